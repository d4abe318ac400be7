// ZeRO stage 3's unit coordinator (DeepSpeed's PartitionedParameterCoordinator, FSDP2's pre/post
// forward and backward hooks): the sharding units' parameters between their shards in the state
// store and whole. A unit's call gathers its parameters just before it runs (prefetching the units
// the last forward ran next, within stage3_prefetch_bucket_size, stage3_max_live_parameters and
// EngineOptions::prefetch_units) and frees them after (reshard_after_forward); an autograd node on
// each of its outputs gathers them again just before the unit's backward, and the end of the unit's
// backward frees them. The root unit's parameters stay gathered from the start of forward to the end
// of backward. Freed parameters keep their TensorImpl (autograd saved them by reference) and only lose
// their storage, as DeepSpeed does; the gathered buffer is emptied in place (gathered_storage.h).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "cohort/comm.h"
#include "cohort/zero.h"
#include "core/grad_kit.h"
#include "core/units.h"
#include "zero/engine_settings.h"
#include "zero/state_store.h"
#include "zero/trainable_parameters.h"
#include "zero/unit_groups.h"

namespace cohort::detail {

class UnitCoordinator : public UnitOwner {
 public:
  /// The parts the coordinator works with (ZeroEngineImpl owns them; they outlive it).
  struct Parts {
    TrainableParameters& params;
    StateStore& store;
    /// Whether group g's reduction was launched in the backward running now (ReduceScheduler):
    /// backward prefetch skips such a unit, its backward is over.
    std::function<bool(int64_t g)> reduction_launched;
  };

  /// Takes the units of `units` (refused when another engine holds one) and turns on their
  /// activation checkpointing when the config asks; throws when a tied parameter spans two units.
  UnitCoordinator(const EngineSettings& settings, UnitGroups units, Parts parts);
  /// Gives the units back (they are plain calls again) and the Sequential entries routed through them.
  ~UnitCoordinator() override;
  UnitCoordinator(const UnitCoordinator&) = delete;
  UnitCoordinator& operator=(const UnitCoordinator&) = delete;

  /// This rank's first shard of group `g`: the one its unit kept when it was made (cohort::ShardedInit,
  /// adopted), or a slice of its parameters flattened now.
  torch::Tensor initial_shard(int64_t g, const GroupLayout& layout, const torch::TensorOptions& options);

  /// One forward of the whole model: the root gathered first, the order the units run recorded.
  void begin_forward();
  void end_forward() noexcept;
  // UnitOwner: a unit's call
  void before_forward(int64_t unit) override;
  torch::Tensor mark_output(int64_t unit, const torch::Tensor& output) override;
  void after_forward(int64_t unit) noexcept override;
  /// Called by the autograd node placed on each unit's outputs.
  void before_unit_backward(int64_t unit);
  /// Group `g`'s gradients are all in: its unit's backward is over, so its parameters can go even
  /// while its reduction waits for its turn (not the root's or a persistent unit's).
  void after_unit_backward(int64_t g);
  /// Frees every gathered unit (the end of backward, an evaluation forward).
  void release_all();
  /// Adds the gathered units' bytes.
  void add_memory(MemoryReport& report) const;

 private:
  // A group's whole parameters while its unit runs.
  struct Gathered {
    enum class Presence { kFreed, kGathering, kGathered } presence = Presence::kFreed;
    torch::Tensor gathered;
    Work gather_work;
    torch::Tensor staged;     // the shard copied to the device for the gather (offload_param cpu on a GPU)
    bool shard_lent = false;  // the store's shard is lent until the gather is done
  };
  void check_tied_parameters() const;
  void gather(int64_t g);
  void finish_gather(Gathered& unit, int64_t g);
  void ensure_gathered(int64_t g);
  void release(int64_t g);
  int64_t live_elements() const;
  void prefetch_after(int64_t unit, int direction);
  void read_ahead(std::vector<int64_t>::const_iterator from, int direction);

  const EngineSettings& settings_;
  UnitGroups units_;
  Parts parts_;
  std::vector<Gathered> gathered_;  // per group
  // the order the last forward ran the units (prefetch follows it), and this forward's calls
  std::vector<int64_t> run_order_, this_order_;
  std::vector<char> ran_;
  bool in_forward_ = false;
  OwnerHandle handle_{this};  // how GatherBeforeBackward finds this coordinator (if it still lives)
};

}  // namespace cohort::detail
