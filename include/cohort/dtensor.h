// cohort::DTensor: a tensor laid out over the ranks of one mesh axis (a Comm) with PyTorch DTensor's
// placements: Shard(dim) (each rank holds a torch.chunk of dim), Replicate() (each holds all of it)
// and Partial() (each holds a summand: the sum over ranks is the tensor). Redistribution between
// placements is one collective (all-gather, all-to-all, all-reduce, reduce-scatter, or a local cut)
// and is differentiable: the gradient goes back the other way, from the placement it arrives in
// (`grad_placement`, the output's by default) to the input's. Only what tensor and sequence
// parallelism need; no operator dispatch: compute on to_local() and wrap the result with from_local.
//
//   auto tp = mesh.group_ptr("tp");
//   auto w = cohort::DTensor::distribute(full_weight, tp, cohort::Placement::shard(0));  // rows
//   auto y = cohort::DTensor::from_local(torch::matmul(x, w.to_local().t()), tp, cohort::Placement::shard(1));
//   torch::Tensor out = y.full_tensor();  // all-gather; its backward takes this rank's columns
//
// Megatron's sequence parallel: x.redistribute(Replicate(), /*grad_placement=*/Partial()) gathers the
// sequence for a column-parallel matmul, and its backward reduce-scatters the partial gradients.
#pragma once

#include <torch/types.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cohort/comm.h"
#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort {

/// How a tensor lies over the ranks of one mesh axis.
class Placement {
 public:
  enum class Kind { kShard, kReplicate, kPartial };
  /// Each rank holds its torch.chunk of `dim` (ceil(size / ranks) rows each; the last may hold fewer).
  static Placement shard(int64_t dim);
  static Placement replicate();
  /// Each rank holds a summand (the output of a row-parallel matmul, before its all-reduce).
  static Placement partial();

  Kind kind() const { return kind_; }
  bool is_shard() const { return kind_ == Kind::kShard; }
  bool is_replicate() const { return kind_ == Kind::kReplicate; }
  bool is_partial() const { return kind_ == Kind::kPartial; }
  /// The sharded dimension (non-negative once a DTensor holds it); only for shard().
  int64_t dim() const { return dim_; }
  /// "Shard(1)", "Replicate()", "Partial(sum)", as DTensor prints them.
  std::string str() const;
  bool operator==(const Placement& other) const { return kind_ == other.kind_ && dim_ == other.dim_; }
  bool operator!=(const Placement& other) const { return !(*this == other); }

 private:
  Placement(Kind kind, int64_t dim) : kind_(kind), dim_(dim) {}
  Kind kind_;
  int64_t dim_;
};

/// The rows [first, first + count) of a dimension of `size` that `rank` of `ranks` holds when it is
/// sharded: torch.chunk's split, as DTensor's Shard makes it.
std::pair<int64_t, int64_t> shard_range(int64_t size, int ranks, int rank);

class DTensor {
 public:
  DTensor() = default;
  /// `local` is this rank's part of a tensor of `shape` laid out by `placement` over `comm`'s ranks.
  /// An empty `shape` means even shards (the sharded dimension times the ranks) or the local shape.
  /// No communication; `local` keeps its autograd history.
  static DTensor from_local(torch::Tensor local, std::shared_ptr<Comm> comm, Placement placement,
                            std::vector<int64_t> shape = {});
  /// torch's distribute_tensor: `full` (the same on every rank) cut to this rank's part. Partial is
  /// refused (no computation made the summands).
  static DTensor distribute(const torch::Tensor& full, std::shared_ptr<Comm> comm, Placement placement);

  /// The same tensor laid out by `to` (collective). Its gradient arrives laid out by `grad_placement`
  /// (default: `to`, or Replicate when `to` is Partial) and goes back to this tensor's placement
  /// (Replicate for a Partial one: each summand's gradient is the whole gradient).
  DTensor redistribute(Placement to, std::optional<Placement> grad_placement = std::nullopt) const;
  /// redistribute(Replicate(), grad_placement).to_local(): the whole tensor on every rank.
  torch::Tensor full_tensor(std::optional<Placement> grad_placement = std::nullopt) const;

  const torch::Tensor& to_local() const { return local_; }
  const Placement& placement() const { return placement_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::shared_ptr<Comm>& comm() const { return comm_; }
  bool defined() const { return comm_ != nullptr; }

 private:
  DTensor(torch::Tensor local, std::shared_ptr<Comm> comm, Placement placement, std::vector<int64_t> shape)
      : local_(std::move(local)), comm_(std::move(comm)), placement_(placement), shape_(std::move(shape)) {}
  torch::Tensor local_;
  std::shared_ptr<Comm> comm_;
  Placement placement_ = Placement::replicate();
  std::vector<int64_t> shape_;
};

}  // namespace cohort
COHORT_EXPORT_END
