// The examples' thread count: LibTorch's intra-op pool, and OpenBLAS's own pool when LibTorch's BLAS
// is OpenBLAS (Debian's). OpenBLAS sizes its pool from OMP_NUM_THREADS once, at load, and
// torch::set_num_threads leaves it alone: under srun, which sets no OMP_NUM_THREADS, `--threads 1`
// trained with one BLAS thread per core and printed another params-sha256 than under cohortrun.
#pragma once

#include <ATen/Parallel.h>
#include <dlfcn.h>

namespace examples {

inline void set_threads(int threads) {
  at::set_num_threads(threads);
  using SetThreads = void (*)(int);
  // Found only when OpenBLAS is loaded (MKL, in PyPI's torch, follows at::set_num_threads already).
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(threads);
}

}  // namespace examples
