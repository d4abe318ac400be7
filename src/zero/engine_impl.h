// The ZeRO engine's machinery behind cohort::ZeroEngineCore (include/cohort/zero.h).
//
// Trainable parameters are laid out in flat groups (partition.h), rank r owning shard r of each.
//   stage 0: every rank holds everything; gradients are allreduced at the accumulation boundary.
//   stage 1: parameters and gradients whole; at the boundary each group's gradients are
//            reduce-scattered, each rank updates its shard, the shards are all-gathered back.
//   stage 2: as 1, but a group's gradients are reduce-scattered as soon as backward produced them
//            and then dropped, so only this rank's gradient shard outlives backward.
//   stage 3: as 2, and each group (one sharding unit, include/cohort/fsdp.h; unit 0 is the root:
//            every parameter outside the marked units) keeps only its parameter shard; the whole
//            parameters are all-gathered before the unit's forward and again before its backward
//            (the next unit's gather is prefetched, in the order the last forward ran the units),
//            and freed after (stage3.cpp). The root's stay gathered from forward to the end of backward.
// The optimizer steps on fp32 master shards: the flat parameters' own shard in fp32 training,
// a separate fp32 copy with bf16/fp16 compute.
//
// Note "launch order": every rank must issue the same collectives in the same order. Stage 2/3
// reduce-scatters are launched strictly from the last group to the first (the order backward
// produces them), a group waiting for all groups after it; the stage 3 gathers follow the unit order
// of forward and the reverse unit order of backward, which autograd runs the same way on every rank.
// Groups are numbered root first, then the units in module order, so a model whose blocks run in
// the order they were registered reduces each block as soon as its backward ends.
#pragma once

#include <torch/csrc/autograd/function.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "cohort/comm.h"
#include "cohort/zero.h"
#include "core/grad_kit.h"
#include "core/units.h"
#include "zero/buffer_pool.h"
#include "zero/loss_scaler.h"
#include "zero/partition.h"
#include "zero/unit_plan.h"

namespace cohort::detail {

struct FlatGroup {
  GroupLayout layout;
  torch::Tensor flat;        // compute dtype: [padded] (stage 0-2, parameters alias it), [shard] (stage 3)
  torch::Tensor master;      // fp32 optimizer parameter: [shard], or [padded] at stage 0
  torch::Tensor flat_grad;   // stage 0/1: [padded] compute dtype, the parameters' .grad alias it
  torch::Tensor shard_grad;  // stage 2/3: [shard] compute dtype, accumulated over micro-steps;
                             // stage 1: the reduced shard, from the boundary backward to its step
  // stage 3: the gathered whole parameters while a unit runs
  enum class Presence { kFreed, kGathering, kGathered } presence = Presence::kFreed;
  torch::Tensor gathered;
  Work gather_work;
  // per backward that reduces (stage 2/3 always, stage 0/1 at the boundary)
  int pending = 0;
  bool launched = false;
  bool shard_grad_clean = true;  // stage 2/3: shard_grad is zero (no reduction since the last step)
  torch::Tensor reduce_input, reduce_output;
  Work reduce_work;
  // stage 0/1 with a communication_data_type other than the compute dtype: the cast gradients in
  // flight and (stage 1) the reduced shard in that dtype, cast back when the reduction retires
  torch::Tensor comm_input, comm_shard;
};

class ZeroEngineImpl : public UnitOwner {
 public:
  ZeroEngineImpl(std::shared_ptr<torch::nn::Module> module, ZeroConfig config, EngineOptions options);
  ~ZeroEngineImpl() override;

  void backward(const torch::Tensor& loss);
  void step();
  torch::Tensor to_compute(const torch::Tensor& t) const;

  // stage 3 (stage3.cpp): a forward of the whole model, and the units' calls inside it
  void begin_forward();
  void end_forward() noexcept;
  void before_forward(int64_t unit) override;
  torch::Tensor mark_output(int64_t unit, const torch::Tensor& output) override;
  void after_forward(int64_t unit) noexcept override;
  /// Called by the autograd node placed on each unit's outputs.
  void before_unit_backward(int64_t unit);

  MemoryReport memory_report() const;
  std::vector<std::pair<std::string, torch::Tensor>> full_parameters();
  void for_each_full_parameter(const ParameterVisitor& visit);
  void prepare_load();
  std::vector<StateTensor> state_tensors();
  StateValues state_values() const;
  void load_state_values(const StateValues& values);

  const ZeroConfig& config() const { return config_; }
  int stage() const { return stage_; }
  /// DeepSpeed's rule: micro-steps count step() calls; the backward and step() of every gas-th one
  /// reduce and update.
  bool at_boundary() const { return (micro_steps_ + 1) % gas_ == 0; }
  int64_t global_steps() const { return global_steps_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  bool last_step_skipped() const { return last_skipped_; }
  double loss_scale() const { return scaler_.scale(); }
  double next_lr() const;
  double last_gradient_norm() const { return last_norm_; }
  torch::Dtype compute_dtype() const { return compute_dtype_; }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  int64_t micro_steps() const { return micro_steps_; }
  int gas() const { return gas_; }

 private:
  using ShapeMap = std::unordered_map<const c10::TensorImpl*, std::vector<int64_t>>;
  void collect_parameters(const ShapeMap& sharded_shapes);
  void plan_stage3_units(const EngineOptions& options);
  std::vector<GroupLayout> stage3_layouts();
  void build_groups();
  torch::Tensor flatten(const GroupLayout& layout, const torch::TensorOptions& options) const;
  // stage 3 units sharded as they were made (cohort::ShardedInit; stage3_units.cpp)
  static ShapeMap construction_shapes(const torch::nn::Module& root);
  void show_whole_shapes(const ShapeMap& sharded_shapes);
  torch::Tensor stage3_shard(int64_t group, const GroupLayout& layout, const torch::TensorOptions& options);
  void register_hooks();
  void on_gradient_ready(int64_t param);
  void launch_ready_reduces();
  void launch_reduce(FlatGroup& group);
  void launch_cast_reduce(FlatGroup& group);  // stage 0/1 in communication_data_type
  void retire_reduces(bool all);
  void finish_reduces();
  torch::Tensor gradient_of(const FlatGroup& group);  // the group's reduced gradient for the optimizer
  void write_back_and_gather();
  void zero_gradients();
  bool any_overflow();
  double global_norm_squared();
  // stage 3
  void gather(int64_t group);
  void ensure_gathered(int64_t group);
  void release(int64_t group);
  void release_all();
  void free_parameters(const FlatGroup& group);
  void prefetch_after(int64_t unit, int direction);
  int64_t live_elements() const;
  /// Whether the fp32 master is a copy (mixed precision, offload) rather than the parameters' shard.
  bool master_is_copy(const FlatGroup& group) const {
    return separate_master_ || group.master.device() != group.flat.device();
  }

  std::shared_ptr<torch::nn::Module> module_;
  ZeroConfig config_;
  std::shared_ptr<Comm> comm_;
  int stage_ = 0;
  int gas_ = 1;
  int rank_ = 0;
  int world_ = 1;
  torch::Dtype compute_dtype_ = torch::kFloat;
  torch::Dtype comm_dtype_ = torch::kFloat;  // communication_data_type, or the compute dtype
  bool separate_master_ = false;             // mixed precision: fp32 master copies apart from the parameters

  std::vector<torch::Tensor> params_;  // trainable, module order
  std::vector<std::string> names_;
  std::vector<std::pair<std::string, std::string>> tied_;  // (name, the name it shares a tensor with)
  std::vector<std::vector<int64_t>> shapes_;               // whole shapes (stage 3 parameters are empty between uses)
  std::vector<int64_t> group_of_;                          // parameter -> group
  std::vector<torch::Tensor> grad_aliases_;                // stage 0/1: each parameter's slice of flat_grad
  // stage 3: the units (unit_plan.h), each one's group (-1 without trainable parameters), the order
  // the last forward ran them (prefetch follows it), and this forward's calls
  UnitPlan plan_;
  std::vector<int64_t> unit_group_;
  std::vector<int64_t> run_order_, this_order_;
  std::vector<char> ran_;
  std::vector<char> persistent_;  // per group: below stage3_param_persistence_threshold, kept whole
  int64_t prefetch_units_ = 0;    // EngineOptions::prefetch_units (0: no limit but the bucket's)
  bool in_forward_ = false;
  BufferPool buffers_;  // gathered units and staged gradients (buffer_pool.h says why not malloc)
  std::vector<FlatGroup> groups_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  LossScaler scaler_;

  std::vector<char> ready_;
  int64_t next_launch_ = 0;         // stage 2/3: groups launched this backward, counted from the last
  int64_t next_retire_ = 0;         // of those, how many have finished (their staging buffers freed)
  int64_t in_flight_elements_ = 0;  // staged gradient elements of launched, unfinished reductions
  bool in_backward_ = false;
  int64_t micro_steps_ = 0;  // step() calls so far
  int64_t global_steps_ = 0;
  int64_t skipped_steps_ = 0;
  bool last_skipped_ = false;
  double last_norm_ = 0;
  OwnerHandle handle_{this};  // stage 3: how GatherBeforeBackward finds this engine (if it still lives)
  GradHookSet hooks_;         // last: destroyed first, so no hook runs into a half-destroyed engine
};

}  // namespace cohort::detail
