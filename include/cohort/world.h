// Who am I: cohort::init() detects the launcher (cohortrun/torchrun, Slurm, Open MPI, PMI, MVAPICH),
// rendezvouses through cohort's own store, hosted by rank 0 (torchrun's agent store when it offers one;
// docs/security.md), and returns the World. A lone process is a world of one and opens no socket, so
// the same program runs unchanged with and without a launcher.
#pragma once

#include <torch/arg.h>
#include <torch/types.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "cohort/comm.h"
#include "cohort/error.h"
#include "cohort/export.h"
#include "cohort/mesh.h"

COHORT_EXPORT_BEGIN
namespace cohort {

/// Which c10d backend moves tensors: Gloo for CPU tensors, NCCL for CUDA tensors.
enum class Backend {
  kAuto,  ///< NCCL when LibTorch has CUDA and a GPU is visible, else Gloo
  kGloo,
  kNccl,
};

/// Overrides for what init() would otherwise detect. Unset fields (empty, -1, 0) mean "detect".
struct InitOptions {
  TORCH_ARG(Backend, backend) = Backend::kAuto;
  /// Per-collective timeout; 0 means COHORT_TIMEOUT (seconds) or 300 s.
  TORCH_ARG(std::chrono::milliseconds, timeout) = std::chrono::milliseconds(0);
  TORCH_ARG(std::string, master_addr) = "";
  TORCH_ARG(int, master_port) = 0;
  TORCH_ARG(int, rank) = -1;
  TORCH_ARG(int, world_size) = -1;
  /// A store the launcher already made (rank 0 hosts a TCPStore when none is given).
  TORCH_ARG(c10::intrusive_ptr<c10d::Store>, store) = {};
};

/// This process's place in the job. Cheap to copy; all copies share one Comm.
class World {
 public:
  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int node_rank() const { return node_rank_; }
  /// cuda:LOCAL_RANK when the backend is NCCL, else cpu.
  torch::Device device() const { return device_; }
  const std::string& master_addr() const { return master_addr_; }
  int master_port() const { return master_port_; }
  /// Where the identity came from: "cohortrun/torchrun", "slurm", "openmpi", "pmi", "mvapich", "none".
  const std::string& launcher() const { return launcher_; }
  bool is_main() const { return rank_ == 0; }
  /// The collectives of this world (a no-op Comm in a world of one).
  Comm& comm() const;
  std::shared_ptr<Comm> comm_ptr() const { return comm_; }
  /// torch.distributed.new_group(ranks): every rank of the world calls it with the same ranks;
  /// members get the group's Comm, the others null (see Comm::new_group).
  std::shared_ptr<Comm> new_group(const std::vector<int>& ranks, const GroupOptions& options = {}) const;
  /// The {node, local} mesh from the launcher's NODE_RANK/LOCAL_RANK: group("local") holds the ranks of
  /// this node, group("node") one rank per node (those with this local rank). Collective.
  Mesh node_mesh() const;

 private:
  friend World init(const InitOptions& options);
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, node_rank_ = 0, master_port_ = 0;
  torch::Device device_ = torch::kCPU;
  std::string master_addr_, launcher_ = "none";
  std::shared_ptr<Comm> comm_;
};

/// Detects the launcher, rendezvouses and builds the world. Calling it again returns the same world.
World init(const InitOptions& options = {});

/// The world made by init(); throws cohort::Error if init() was not called.
World& current_world();

/// True once init() has made the world in this process.
bool is_initialized();

/// Releases the world (torch.distributed.destroy_process_group): its Comm is torn down in order, NCCL
/// communicators first, as soon as no DDP/ZeRO object holds it any more. Called by itself at exit;
/// init() may be called again afterwards. A no-op when there is no world.
void shutdown();

}  // namespace cohort
COHORT_EXPORT_END
