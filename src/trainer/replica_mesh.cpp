// The Trainer's HSDP layout (replica_mesh.h).
#include "trainer/replica_mesh.h"

#include <torch/torch.h>

#include "cohort/error.h"
#include "core/check.h"

namespace cohort::detail {
namespace {

// One replica per node when every node has the same number of ranks, numbered node by node, and a
// node holds whole tensor-parallel groups and more than one data-parallel rank: then a shard group is
// one node's, and only the replicas' allreduce of a gradient shard crosses nodes. Collective.
int replicas_by_node(const World& world, int tensor_parallel) {
  const int local = world.local_size();
  const bool fits = local > 0 && world.size() % local == 0 && world.size() / local > 1 &&
                    world.rank() / local == world.node_rank() && world.rank() % local == world.local_rank() &&
                    local % tensor_parallel == 0 && local / tensor_parallel > 1;
  // Every rank must agree: the same local size everywhere, and the layout on each.
  torch::Tensor votes = torch::tensor({fits ? 1 : 0, local, -local}, torch::kLong);
  world.comm().allreduce(votes, ReduceOp::kMin);
  const bool all_fit = votes[0].item<int64_t>() == 1 && votes[1].item<int64_t>() == -votes[2].item<int64_t>();
  return all_fit ? world.size() / local : 1;
}

}  // namespace

std::shared_ptr<Mesh> make_replica_mesh(const ResolvedOptions& options, const World& world,
                                        const std::shared_ptr<Mesh>& tensor_parallel) {
  if (!options.zero) return nullptr;
  const int tp = static_cast<int>(options.raw.tensor_parallel_size());
  const int data_parallel = world.size() / tp;
  const std::string ranks_text = std::to_string(data_parallel) + " data-parallel rank(s) (world " +
                                 std::to_string(world.size()) + " / tensor_parallel_size " + std::to_string(tp) + ")";
  int replicas = static_cast<int>(options.raw.data_parallel_replicate_size());
  const int64_t shard = options.raw.data_parallel_shard_size();
  if (shard > 0) {
    COHORT_CHECK_KIND(kInvalidArgument,
                      data_parallel % shard == 0 && (replicas == 0 || replicas * shard == data_parallel),
                      "TrainerOptions.data_parallel_shard_size ", shard,
                      replicas == 0 ? "" : " x data_parallel_replicate_size " + std::to_string(replicas),
                      replicas == 0 ? " does not divide the " : " is not the ", ranks_text);
    replicas = static_cast<int>(data_parallel / shard);
  }
  if (replicas == 0)
    replicas = options.zero->zero_optimization().stage() == 3 && world.size() > 1 ? replicas_by_node(world, tp) : 1;
  COHORT_CHECK_KIND(kInvalidArgument, data_parallel % replicas == 0, "TrainerOptions.data_parallel_replicate_size ",
                    replicas, " does not divide the ", ranks_text);
  if (replicas == 1) return nullptr;
  Comm& ranks = tensor_parallel ? tensor_parallel->group("data_parallel") : world.comm();
  return std::make_shared<Mesh>(ranks,
                                std::vector<MeshDim>{{"replicate", replicas}, {"shard", data_parallel / replicas}});
}

}  // namespace cohort::detail
