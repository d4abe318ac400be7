// Parsers for the values of cohortrun's flags, as pure functions: each takes the text the user typed
// and returns the value or throws UsageError with one line naming the flag, the value and the form
// expected. Kept apart from the command-line plumbing so tests call them directly.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cohortrun/cpu_binding.h"
#include "cohortrun/options.h"

namespace cohort::detail::launch {

/// What the machine has, for --nproc-per-node cpu|gpu|auto and --bind-cores.
struct HostFacts {
  int cpu_count = 1;
  int gpu_count = 0;
  std::vector<HostCpu> allowed_cpus;  // for --bind-cores: the CPUs cohortrun may use
  int64_t available_memory = -1;      // bytes this node can still give; -1: unknown
};

/// "N" or "MIN:MAX" with 0 < MIN <= MAX. `what` names the value in errors: the flag, or the PET_*
/// variable it came from.
NodeRange parse_nnodes(const std::string& text, const std::string& what = "--nnodes");

/// "N" (N >= 1), "cpu" (cores), "gpu" (visible CUDA devices, an error when none), "auto" (GPUs if
/// any, else cores).
int parse_nproc(const std::string& text, const HostFacts& host, const std::string& what = "--nproc-per-node");

/// The least resident memory of a worker: a LibTorch program just started (fashion_mnist --help:
/// 165 MB with Debian's LibTorch 1.13), for the memory side of check_local_workers.
constexpr int64_t kLeastWorkerMemory = 150'000'000;
/// Refuses `nproc` local workers that the host cannot hold (more than 4 per usable core, or more than
/// its memory at kLeastWorkerMemory each), naming `what`=`text` and how many would fit.
void check_local_workers(int nproc, const std::string& what, const std::string& text, const HostFacts& host);

/// "HOST", "HOST:PORT", "[V6ADDR]" or "[V6ADDR]:PORT"; a missing port is `default_port`.
Endpoint parse_endpoint(const std::string& text, int default_port);

/// torchrun's Std: "0".."3", or a map "0:1,1:2" from local rank to value, each local rank once.
StdSpec parse_std_spec(const std::string& flag, const std::string& text);

/// "key=value,key2=value2" (torchrun's --rdzv-conf).
std::map<std::string, std::string> parse_key_values(const std::string& text);

/// "0,2,3": local ranks whose output shows on the console.
std::set<int> parse_rank_list(const std::string& text);

/// A strict integer (the whole text) in [min, max]; `what` names it in the error (cohort::parse_integer's
/// words: "--max-restarts is out of range: expected an integer from 0 to 1048576, got 99999999999").
int parse_int(const std::string& what, const std::string& text, int min, int max);
/// A strict, finite, non-negative number of seconds; `what` names it in the error.
double parse_seconds(const std::string& what, const std::string& text);
/// A strict, finite number of seconds > 0 (an interval: 0 would spin); `what` names it in the error.
double parse_positive_seconds(const std::string& what, const std::string& text);

}  // namespace cohort::detail::launch
