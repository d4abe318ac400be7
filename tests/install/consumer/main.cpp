// A user program built against the installed cohort: allreduce of rank+1 over the world.
#include <cohort/cohort.h>
#include <iostream>
int main() {
  auto world = cohort::init();
  auto t = torch::ones({2}) * (world.rank() + 1);
  world.comm().allreduce(t);
  std::cout << "rank " << world.rank() << " of " << world.size() << ": " << t[0].item<float>() << std::endl;
}
