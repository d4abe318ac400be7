// A user program built against the installed cohort: allreduce of rank+1 over the world, and an error
// read by its kind (Error::kind, error_kind_name: exported API) rather than its text.
#include <cohort/cohort.h>
#include <iostream>
int main() {
  auto world = cohort::init();
  auto t = torch::ones({2}) * (world.rank() + 1);
  world.comm().allreduce(t);
  std::cout << "rank " << world.rank() << " of " << world.size() << ": " << t[0].item<float>() << std::endl;
  try {
    world.comm().broadcast(t, world.size());  // no such root: refused before any rank waits
  } catch (const cohort::Error& e) {
    std::cout << "rank " << world.rank() << " error kind: " << cohort::error_kind_name(e.kind()) << std::endl;
  }
}
