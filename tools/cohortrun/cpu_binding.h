// --bind-cores: each local rank runs on its own CPUs, drawn from the CPUs cohortrun itself may use
// (its affinity mask: Slurm's cpuset, taskset, a container's limit), or from --core-list (PyTorch's
// run_cpu spelling of the same pool). The split keeps the hardware threads of one physical core
// together, so that two ranks never share a core where the count allows it, and the OpenMP and BLAS
// thread counts follow each rank's CPU count unless the user set them.
#pragma once

#include <string>
#include <vector>

#include "cohortrun/options.h"
#include "world/worker_env.h"

namespace cohort::detail::launch {

/// One CPU this process may run on, and the physical core it belongs to (hardware threads of one
/// core share package and core; core -1 when the kernel does not say).
struct HostCpu {
  int cpu = 0;
  int package = 0;
  int core = -1;
};

/// The CPUs cohortrun may use (sched_getaffinity), each with its core from
/// /sys/devices/system/cpu/cpuN/topology; empty when the mask cannot be read.
std::vector<HostCpu> allowed_host_cpus();

/// Linux's CPU list syntax, "0-3,8,10-11" (/proc/self/status Cpus_allowed_list, taskset -c,
/// run_cpu's --core-list); sorted, without repeats. Throws UsageError naming `flag` otherwise.
std::vector<int> parse_cpu_list(const std::string& flag, const std::string& text);

/// Sorted CPUs as "0-3,8".
std::string format_cpu_list(std::vector<int> cpus);

/// Each local rank's CPUs: `pool` ordered by (package, core, cpu) so a core's hardware threads sit
/// together, cut into `nproc` contiguous runs of pool/nproc CPUs, one more for each of the first
/// pool % nproc ranks.
std::vector<std::vector<int>> split_cpus(std::vector<HostCpu> pool, int nproc);

/// --bind-cores (with --core-list when `core_list` is non-empty) against the CPUs `allowed`: each
/// local rank's CPUs. Throws UsageError in one line when a listed CPU is not allowed, or when there
/// are fewer CPUs than local ranks (naming --bind-cores, --nproc-per-node and the count).
std::vector<std::vector<int>> bind_local_ranks(const LaunchOptions& options, const std::vector<HostCpu>& allowed);

/// The thread-count variables a bound rank with `cpu_count` CPUs gets: OMP_NUM_THREADS,
/// OPENBLAS_NUM_THREADS and MKL_NUM_THREADS, each only where `user` (cohortrun's own environment)
/// does not set it. Applied over what build_worker_env made.
void set_thread_counts(EnvVars& env, const EnvVars& user, size_t cpu_count);

/// cohortrun's line for one bound local rank: "--bind-cores: local rank 1 -> CPUs 2-3
/// (OMP_NUM_THREADS=2)", the thread count being the one the worker gets.
std::string describe_binding(int local_rank, const std::vector<int>& cpus, const EnvVars& user);

}  // namespace cohort::detail::launch
