// One rank of the scale rehearsal (bench/scale/run.sh): no model, only the distributed set-up. Times
// cohort::init() (joining the world), World::node_mesh() (the {node, local} groups, two Comm splits),
// a few 4 KiB allreduces on the world and on each group and a barrier, then prints one SCALE line and,
// with --release FILE, holds every Comm open until FILE exists so the script can count this process's
// TCP connections (ss). bench/scale/scale_step.py does the same with torch.distributed and Gloo.
#include <CLI/CLI.hpp>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "cohort/cohort.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  int iters = 10;
  int64_t numel = 1024;
  std::string release;
  double hold_s = 300;
};

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double epoch_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Milliseconds per call of `iters` allreduces on `comm`, after one untimed call.
double allreduce_ms(cohort::Comm& comm, const Args& args) {
  auto t = torch::ones({args.numel});
  comm.allreduce(t);
  comm.barrier();
  const auto start = Clock::now();
  for (int i = 0; i < args.iters; ++i) comm.allreduce(t);
  return 1000 * seconds_since(start) / args.iters;
}

// This process's resident set in MB (VmRSS of /proc/self/status).
double rss_mb() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024;
  return 0;
}

void hold(const Args& args) {
  const auto start = Clock::now();
  while (access(args.release.c_str(), F_OK) != 0 && seconds_since(start) < args.hold_s)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

int run(const Args& args, double started_at) {
  auto start = Clock::now();
  const cohort::World world = cohort::init();
  const double init_s = seconds_since(start), joined_at = epoch_now();
  start = Clock::now();
  const cohort::Mesh mesh = world.node_mesh();
  const double groups_s = seconds_since(start);
  const double world_ms = allreduce_ms(world.comm(), args);
  const double node_ms = allreduce_ms(mesh.group("node"), args);
  const double local_ms = allreduce_ms(mesh.group("local"), args);
  start = Clock::now();
  world.comm().barrier();
  const double barrier_ms = 1000 * seconds_since(start);
  std::printf("SCALE impl=cohort rank=%d size=%d pid=%d started_at=%.3f joined_at=%.3f init_s=%.3f groups_s=%.3f "
              "world_ms=%.3f node_ms=%.3f local_ms=%.3f barrier_ms=%.3f rss_mb=%.0f\n",
              world.rank(), world.size(), int(getpid()), started_at, joined_at, init_s, groups_s, world_ms, node_ms,
              local_ms, barrier_ms, rss_mb());
  std::fflush(stdout);
  if (!args.release.empty()) {
    hold(args);
    world.comm().barrier();
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const double started_at = epoch_now();
  Args args;
  CLI::App app{"Scale rehearsal: one rank's init, groups and collectives (launch with cohortrun)"};
  app.add_option("--iters", args.iters, "timed allreduces per Comm");
  app.add_option("--numel", args.numel, "float32 elements per allreduce");
  app.add_option("--release", args.release, "hold every Comm open until this file exists");
  app.add_option("--hold-s", args.hold_s, "longest hold, seconds");
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);
  try {
    return run(args, started_at);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
