// The data-parallel side of this rank's pipeline stages: each local stage wrapped in DDP, or given to a
// ZeRO engine, over PipelineOptions::data_comm (neither without one). The backward of a stage's last
// microbatch in a step reduces; the earlier ones only accumulate.
#pragma once

#include <memory>
#include <vector>

#include "cohort/ddp.h"
#include "cohort/pipeline.h"
#include "cohort/zero.h"

namespace cohort::pipeline::detail {

class StageReplicas {
 public:
  /// `last_backward`: per local stage, the microbatch of its last backward in the schedule.
  StageReplicas(const std::vector<torch::nn::Sequential>& stages, const PipelineOptions& options,
                std::vector<int> last_backward);

  /// backward(root, grad) of `microbatch` on local stage `local`, reducing when it is the stage's last.
  void backward(int local, int microbatch, const torch::Tensor& root, const torch::Tensor& grad);
  bool has_zero() const { return !zero_.empty(); }
  /// Steps each stage's ZeRO engine on its shard.
  void step_zero();

 private:
  void make_zero_engines(const std::vector<torch::nn::Sequential>& stages, const PipelineOptions& options);

  std::vector<int> last_backward_;
  std::vector<std::unique_ptr<DataParallelCore>> ddp_;  // per local stage, with a data group and no ZeRO
  std::vector<std::unique_ptr<ZeroEngineCore>> zero_;   // per local stage, with PipelineOptions::zero
};

}  // namespace cohort::pipeline::detail
