// The packaging recipes' outside consumer: each rank allreduces rank + 1 and checks the sum against its
// closed form w(w+1)/2, exiting non-zero otherwise. Run by the installed launcher:
//   cohortrun --standalone --nproc-per-node 2 ./consumer 2      (the argument: the world size expected)
#include <cohort/cohort.h>
#include <cstdlib>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  const int expected_size = argc > 1 ? std::stoi(argv[1]) : 2;
  const cohort::World world = cohort::init();
  auto t = torch::full({4}, static_cast<double>(world.rank() + 1), torch::kFloat64);
  world.comm().allreduce(t);
  const double expected_sum = world.size() * (world.size() + 1) / 2.0;
  const bool ok = world.size() == expected_size && torch::all(t == expected_sum).item<bool>();
  std::cout << "consumer: rank " << world.rank() << " of " << world.size() << ": allreduce sum " << t[0].item<double>()
            << ", expected " << expected_sum << " in a world of " << expected_size << (ok ? ": ok" : ": WRONG")
            << std::endl;
  return ok ? EXIT_SUCCESS : EXIT_FAILURE;
}
