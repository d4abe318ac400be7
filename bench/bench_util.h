// What bench/allreduce's modes share: re-running the program as local ranks without a launcher, and
// interleaved block timing with medians and per-repetition ratios.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

extern char** environ;

namespace {

using SteadyClock = std::chrono::steady_clock;

// How many untimed and timed blocks each variant runs.
struct BlockTiming {
  int reps = 21;
  int warmup = 3;
};

// ---- local ranks (--nproc) -------------------------------------------------------------------------

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Re-executes this program `n` times as ranks on 127.0.0.1 (re-exec, not fork: torch's thread pools do
// not survive fork), sharing our stdout/stderr, and waits. One failing rank stops the others.
int run_local_ranks(int n, char** argv) {
  std::vector<std::string> base;
  bool has_omp = false;
  for (char** e = environ; *e != nullptr; ++e) {
    base.emplace_back(*e);
    has_omp = has_omp || base.back().rfind("OMP_NUM_THREADS=", 0) == 0;
  }
  // Gloo reduces on its own threads; one intra-op thread per rank keeps N ranks on N cores honest.
  if (!has_omp) base.push_back("OMP_NUM_THREADS=1");
  const int port = free_port();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < n; ++rank) {
    std::vector<std::string> env = base;
    for (const char* key : {"RANK", "LOCAL_RANK"}) env.push_back(std::string(key) + "=" + std::to_string(rank));
    for (const char* key : {"WORLD_SIZE", "LOCAL_WORLD_SIZE"}) env.push_back(std::string(key) + "=" + std::to_string(n));
    env.push_back("MASTER_ADDR=127.0.0.1");
    env.push_back("MASTER_PORT=" + std::to_string(port));
    std::vector<char*> envp;
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) != 0) {
      std::perror("posix_spawn");
      for (pid_t p : pids) ::kill(p, SIGTERM);
      return 1;
    }
    pids.push_back(pid);
  }
  int result = 0;
  for (int left = n; left > 0; --left) {
    int status = 0;
    const pid_t pid = ::wait(&status);
    if (pid < 0) break;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      if (result == 0) {
        std::fprintf(stderr, "bench: a rank (pid %d) failed; stopping the others\n", int(pid));
        for (pid_t p : pids)
          if (p != pid) ::kill(p, SIGTERM);
      }
      result = 1;
    }
  }
  return result;
}

// ---- timing ----------------------------------------------------------------------------------------

// The q-quantile (0..1) of `v`, interpolated between neighbours.
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double at = q * double(v.size() - 1);
  const size_t lo = size_t(at);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - double(lo));
}

// Per-call microseconds of each variant, one sample per repetition.
struct Timings {
  std::vector<std::vector<double>> samples;  // [variant][repetition]
  double median(size_t v) const { return quantile(samples[v], 0.5); }
  // Ratios a/b taken within each repetition (neighbouring blocks, so slow drifts of a shared machine's
  // load cancel); the median and quartiles of those.
  std::vector<double> ratios(size_t a, size_t b) const {
    std::vector<double> r;
    for (size_t i = 0; i < samples[a].size(); ++i) r.push_back(samples[a][i] / samples[b][i]);
    return r;
  }
};

// Each variant runs in blocks of `iters` calls; the variants take turns block by block and the order
// rotates each repetition (A B, then B A, ...) so none always runs first. `sync` lines the ranks up
// before every block (untimed). Every rank runs the same schedule.
Timings measure_interleaved(const std::vector<std::function<void()>>& variants, int iters,
                            const BlockTiming& options, const std::function<void()>& sync) {
  const size_t k = variants.size();
  for (int w = 0; w < options.warmup; ++w)
    for (const auto& run : variants)
      for (int i = 0; i < iters; ++i) run();
  Timings t;
  t.samples.resize(k);
  for (int rep = 0; rep < options.reps; ++rep) {
    for (size_t j = 0; j < k; ++j) {
      const size_t v = (j + rep) % k;
      sync();
      const auto start = SteadyClock::now();
      for (int i = 0; i < iters; ++i) variants[v]();
      const std::chrono::duration<double, std::micro> took = SteadyClock::now() - start;
      t.samples[v].push_back(took.count() / iters);
    }
  }
  return t;
}

}  // namespace
