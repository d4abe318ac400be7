// Launcher detection as a pure function of the environment, so every launcher family is tested from
// recorded variables. Order (first match wins): explicit RANK/WORLD_SIZE (cohortrun, torchrun), Slurm,
// Open MPI, PMI (Intel MPI, MPICH), MVAPICH; none of them: a world of one.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "world/hostlist.h"

namespace cohort::detail {

using EnvMap = std::map<std::string, std::string>;

/// What the launcher told this process. master_addr/master_port are empty/0 when it did not say.
struct LaunchEnv {
  std::string launcher = "none";  // "cohortrun/torchrun", "self-launch", "slurm", "openmpi", "pmi", "mvapich", "none"
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int node_rank = 0;
  bool has_local_rank = false;  // the launcher set a local rank (LOCAL_RANK, SLURM_LOCALID, ...)
  std::string master_addr;
  int master_port = 0;
  // torchrun's elastic agent: which restart of the job this is (TORCHELASTIC_RESTART_COUNT), and
  // whether the agent hosts the store (TORCHELASTIC_USE_AGENT_STORE=True). cohortrun sets the first.
  std::optional<int> restart_count;
  bool agent_store = false;
  /// Which job this process belongs to, the same on every rank of one job and different between jobs
  /// (see job_identity.h): TORCHELASTIC_RUN_ID (cohortrun always sets one; torchrun's "none" does not
  /// count), else the launcher's job id (Slurm job.step, Open MPI's job, PMI/PBS/LSF job, MPIRUN_ID).
  /// Empty when nothing names the job; then the rendezvous cannot tell two such jobs apart.
  std::string run_id;
};

/// Reads the launcher's variables. Throws cohort::Error naming the variable and the value on bad input
/// (non-numeric, negative, RANK >= WORLD_SIZE, LOCAL_RANK >= LOCAL_WORLD_SIZE, port out of 1..65535).
/// MASTER_ADDR/MASTER_PORT always win when set. Otherwise Slurm's master is the step's first host and an
/// MPI launch on one node uses 127.0.0.1 (several nodes without MASTER_ADDR: Error); Slurm and MPI
/// ports are hashed from the job id into 20000..59999, or 0 when the environment has none (see .cpp).
/// Slurm counts only inside an srun step that no mpirun/mpiexec/mpirun_rsh runs under.
LaunchEnv detect_launch_env(const EnvMap& env);

/// The process environment as an EnvMap.
EnvMap current_env();

}  // namespace cohort::detail
