// Where this rank stands in a pipeline's schedule: which stages it runs, which rank runs the others,
// and the channel (Comm tag) of each transfer between stages.
#pragma once

#include <torch/nn/modules/container/sequential.h>

#include <vector>

#include "cohort/pipeline.h"
#include "core/check.h"
#include "pipeline/transfer.h"

namespace cohort::pipeline::detail {

class StagePlacement {
 public:
  /// `stages`: this rank's stage modules, in the order of its stage ids (rank, rank + ranks, ...).
  StagePlacement(const Schedule& schedule, int rank, const std::vector<torch::nn::Sequential>& stages)
      : schedule_(schedule), rank_(rank), stages_(stages) {}

  const Schedule& schedule() const { return schedule_; }
  int rank() const { return rank_; }
  int rank_of(int stage) const { return schedule_.rank_of(stage); }
  bool is_last(int stage) const { return stage == schedule_.stages - 1; }
  bool is_mine(int stage) const { return schedule_.rank_of(stage) == rank_; }
  int local_index(int stage) const {
    COHORT_CHECK_KIND(kInternal, is_mine(stage), "Pipeline: schedule '", schedule_.name, "' runs stage ", stage,
                      " on rank ", rank_, ", which holds stages of rank ", schedule_.rank_of(stage), " only");
    return stage / schedule_.ranks;
  }
  torch::nn::Sequential module_of(int stage) const { return stages_[local_index(stage)]; }  // forward() is not const
  int tag(int stage, int microbatch, Direction direction) const {
    return channel(stage, microbatch, schedule_.microbatches, direction);
  }

 private:
  const Schedule& schedule_;
  int rank_;
  const std::vector<torch::nn::Sequential>& stages_;
};

}  // namespace cohort::pipeline::detail
