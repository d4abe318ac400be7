// bench/allreduce_mpi: MPI_Allreduce (float32 sum) at the sizes and with the timing scheme of
// bench/allreduce --mode sizes, so bench/allreduce_run.sh can put the MPI every cluster user has next
// to cohort: 4 KiB to 64 MiB in x4 steps, blocks of clamp(32 MiB / size, 2, 100) calls, 3 untimed
// warm-up blocks, then 21 timed blocks per size, the ranks lined up on MPI_Barrier before each block;
// rank 0's clock, median per call. Each size first checks the closed-form sum. `--mode pingpong`: the
// send/recv ping-pong of bench/allreduce --mode pingpong (8 B to 2 MiB, one-way time = round trip / 2)
// with MPI_Send/MPI_Recv. Plain C++ and MPI only.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Options {
  int reps = 21;
  int warmup = 3;
  int64_t min_bytes = 4 << 10;
  int64_t max_bytes = 64 << 20;
  int64_t block_bytes = 32 << 20;
  bool pingpong = false;
  int64_t pingpong_max = 4 << 20;
};

// The same flags as bench/allreduce for the sizes mode; false (after one line) on anything else.
bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const std::string mode = i + 1 < argc ? argv[i + 1] : "";
    if (flag == "--mode" && (mode == "sizes" || mode == "pingpong")) {
      o.pingpong = mode == "pingpong";
      ++i;
      continue;
    }
    int64_t* target = flag == "--min-bytes" ? &o.min_bytes : flag == "--max-bytes" ? &o.max_bytes
                      : flag == "--block-bytes" ? &o.block_bytes : nullptr;
    int* small = flag == "--reps" ? &o.reps : flag == "--warmup" ? &o.warmup : nullptr;
    char* end = nullptr;
    const long long value = i + 1 < argc ? std::strtoll(argv[i + 1], &end, 10) : -1;
    if ((target == nullptr && small == nullptr) || end == nullptr || *end != '\0' || value < 0 ||
        (small != nullptr && value > 100000) || (target != nullptr && flag != "--block-bytes" && value < 4)) {
      std::fprintf(stderr, "allreduce_mpi: bad flag or value at '%s' (flags: --reps N --warmup N --min-bytes B "
                   "--max-bytes B --block-bytes B --mode sizes|pingpong)\n", argv[i]);
      return false;
    }
    if (target != nullptr) *target = value;
    else *small = int(value);
    ++i;
  }
  return o.reps >= 1;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Every rank contributes rank + 1; the sum must be n(n+1)/2 everywhere.
bool sums_correctly(int64_t count, int rank, int size) {
  std::vector<float> in(size_t(count), float(rank + 1)), out(size_t(count), 0.f);
  MPI_Allreduce(in.data(), out.data(), int(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  const float expected = float(size * (size + 1) / 2);
  int ok = std::all_of(out.begin(), out.end(), [&](float x) { return x == expected; });
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return ok != 0;
}

// Microseconds per call of each timed run of `block` (`calls` calls; rank 0's clock), after the
// untimed warm-up runs, the ranks lined up on MPI_Barrier before each.
template <typename Block>
std::vector<double> time_blocks(const Block& block, double calls, const Options& o) {
  for (int w = 0; w < o.warmup; ++w) block();
  std::vector<double> samples;
  for (int rep = 0; rep < o.reps; ++rep) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = std::chrono::steady_clock::now();
    block();
    const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
    samples.push_back(took.count() / calls);
  }
  return samples;
}

std::vector<double> time_allreduce(int64_t count, int iters, const Options& o) {
  std::vector<float> data(size_t(count), 0.f);  // zeros: sums stay finite however often reduced
  return time_blocks([&] {
    for (int i = 0; i < iters; ++i)
      MPI_Allreduce(MPI_IN_PLACE, data.data(), int(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }, iters, o);
}

// Ranks 0 and 1 send a message there and back `iters` times per block; one-way microseconds.
std::vector<double> time_pingpong(int64_t count, int iters, int rank, const Options& o) {
  std::vector<float> data(size_t(count), 0.f);
  return time_blocks([&] {
    for (int i = 0; i < iters; ++i) {
      if (rank == 0) {
        MPI_Send(data.data(), int(count), MPI_FLOAT, 1, 0, MPI_COMM_WORLD);
        MPI_Recv(data.data(), int(count), MPI_FLOAT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (rank == 1) {
        MPI_Recv(data.data(), int(count), MPI_FLOAT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(data.data(), int(count), MPI_FLOAT, 0, 0, MPI_COMM_WORLD);
      }
    }
  }, 2.0 * iters, o);
}

void pingpong(int rank, const Options& o, const std::string& library) {
  if (rank == 0)
    std::printf("# bench/allreduce_mpi --mode pingpong: MPI_Send/MPI_Recv ping-pong, ranks 0 and 1, %s; one-way "
                "time = round trip / 2; medians of %d repetitions (warm-up %d)\n#\n# %9s %9s %4s | %9s\n",
                library.c_str(), o.reps, o.warmup, "size (B)", "count", "iter", "MPI (us)");
  for (int64_t bytes = 8; bytes <= o.pingpong_max; bytes *= 4) {
    const int iters = int(std::clamp<int64_t>(o.block_bytes / bytes, 2, 100));
    const double us = median(time_pingpong(bytes / 4, iters, rank, o));
    if (rank == 0) std::printf("  %9lld %9lld %4d | %9.2f\n", (long long)bytes, (long long)(bytes / 4), iters, us);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Options o;
  if (!parse(argc, argv, o)) {
    MPI_Finalize();
    return 2;
  }
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int length = 0;
  MPI_Get_library_version(version, &length);
  const std::string library(version, std::strcspn(version, ",\n"));
  if (o.pingpong) {
    pingpong(rank, o, library);
    MPI_Finalize();
    return 0;
  }
  if (rank == 0) {
    std::printf("# bench/allreduce_mpi: MPI_Allreduce, float32 sum, %d ranks, %s; times: medians of %d "
                "repetitions (warm-up %d)\n#\n# %9s %9s %4s | %9s %6s %6s\n# %9s %9s %4s | %9s %6s %6s\n",
                size, library.c_str(), o.reps, o.warmup, "size", "count", "iter", "MPI", "algbw", "busbw", "(B)",
                "(elems)", "", "time(us)", "(GB/s)", "(GB/s)");
  }
  const double bus = 2.0 * (size - 1) / size;
  for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
    const int64_t count = bytes / 4;
    const int iters = int(std::clamp<int64_t>(o.block_bytes / bytes, 2, 100));
    if (!sums_correctly(count, rank, size)) {
      if (rank == 0) std::fprintf(stderr, "allreduce_mpi: wrong sum for %lld elements\n", (long long)count);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const double us = median(time_allreduce(count, iters, o));
    const double algbw = double(bytes) / (us * 1e-6) / 1e9;
    if (rank == 0) {
      std::printf("  %9lld %9lld %4d | %9.1f %6.3f %6.3f\n", (long long)bytes, (long long)count, iters, us, algbw,
                  bus * algbw);
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}
