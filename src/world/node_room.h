// What a node can give to the worker processes a launcher starts on it (cohortrun, the Trainer's
// self-launch): its usable cores and free memory, and the rule that refuses far more workers than
// those can hold. Without it `--nproc-per-node 5000` on 2 cores spawned workers until memory ran out.
#pragma once

#include <cstdint>
#include <string>

namespace cohort::detail {

/// More workers than this per usable core are refused: each is a whole LibTorch process with threads of
/// its own, and beyond a few per core the node thrashes rather than trains.
constexpr int kProcessesPerCore = 4;

/// The cores this process may run on (its affinity mask).
int usable_cores();
/// This process's resident bytes; -1 when unknown.
int64_t resident_bytes();
/// MemAvailable, or the room left under this process's memory cgroups (v2's memory.max, v1's
/// memory.limit_in_bytes, on its own cgroup and each ancestor) when that is less; -1 when unknown.
int64_t available_memory();
/// The least room (limit less usage) of the memory cgroups `proc_cgroup` (/proc/self/cgroup's text)
/// names under `cgroup_root` (/sys/fs/cgroup), each with its ancestors; -1 when none has a limit.
int64_t cgroup_memory_room(const std::string& proc_cgroup, const std::string& cgroup_root);
/// "1,234 MB"-style: bytes in whole megabytes, rounded up.
std::string megabytes(int64_t bytes);

/// What starting worker processes on this node would ask of it, and how the refusal names the setting.
struct WorkerRoom {
  int workers = 0;         // processes on this node, the launcher's own included when it is one
  int started = 0;         // how many of them are new processes (their memory is counted)
  int cores = 0;           // usable cores
  int64_t each = -1;       // the least memory one new process takes; -1: unknown
  int64_t available = -1;  // memory this node can still give; -1: unknown
  std::string asked;       // "--nproc-per-node=5000", "TrainerOptions.devices 64"
  std::string setting;     // "--nproc-per-node", "devices": what "use <setting> N or fewer" names
  std::string elsewhere;   // the other way out: "more nodes (--nnodes)"
  std::string each_is;     // where `each` comes from: "this process's resident memory"
};
/// Why `room` cannot hold its workers (more than kProcessesPerCore per core, or started x each bytes
/// more than available): one line with what would fit; "" when it fits.
std::string refuse_workers(const WorkerRoom& room);

}  // namespace cohort::detail
