// The environment of each worker, exactly the variables torchrun's agent sets (RANK, LOCAL_RANK,
// WORLD_SIZE, ..., TORCHELASTIC_*), so a program sees the same world under cohortrun and torchrun.
// Pure functions of the group layout, tested alone; shared by cohortrun and the Trainer's self-launch.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace cohort::detail::launch {

using EnvVars = std::map<std::string, std::string>;

/// Where this node's workers sit in the job after a rendezvous round.
struct GroupLayout {
  int group_rank = 0;        // this node's rank (GROUP_RANK)
  int group_world_size = 1;  // number of nodes (GROUP_WORLD_SIZE)
  int local_world_size = 1;  // workers on this node (LOCAL_WORLD_SIZE)
  int rank_base = 0;         // global rank of local rank 0
  int world_size = 1;        // workers in the job (WORLD_SIZE)
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT
  int max_restarts = 0;
  std::string run_id = "none";
  std::string role = "default";
  std::string secret;  // COHORT_JOB_SECRET for the workers ("": none given, they derive one)
  /// COHORT_LAUNCH_ID: this launch of the job, the same on every node and kept across its restarts, unlike
  /// a run id a user may reuse ("": none). The Trainer's restarts know their own checkpoints by it.
  std::string launch_id;
};

/// Global rank of the first worker and the world size when node i has local_sizes[i] workers
/// (torchelastic's assignment: nodes in rank order, workers in local-rank order).
struct RankSpan {
  int base = 0;
  int world_size = 0;
};
RankSpan assign_worker_ranks(const std::vector<int>& local_sizes, int node_rank);

/// The process environment `base` plus the launcher's variables for `local_rank`. OMP_NUM_THREADS=1
/// is added when there is more than one local worker and `base` has none; NCCL's async error
/// handling defaults to 1 like torchrun (under the name the built LibTorch's torchrun uses).
EnvVars build_worker_env(const EnvVars& base, const GroupLayout& layout, int local_rank, const std::string& error_file);

/// The names of the variables build_worker_env sets (for tests and docs).
std::vector<std::string> launcher_variable_names();

/// "KEY=VALUE" strings for execve.
std::vector<std::string> to_envp(const EnvVars& env);

/// environ as EnvVars.
EnvVars process_env();

}  // namespace cohort::detail::launch
