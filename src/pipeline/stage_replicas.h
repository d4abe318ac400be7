// The data-parallel side of this rank's pipeline stages: each local stage wrapped in DDP, or given to a
// ZeRO engine, over PipelineOptions::data_comm (neither without one). The backward of a stage's last
// microbatch in a step reduces; the earlier ones only accumulate (at ZeRO stage 3 each reduces).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cohort/ddp.h"
#include "cohort/pipeline.h"
#include "cohort/zero.h"

namespace cohort::pipeline::detail {

/// A bfloat16 or float16 tensor in float32 (the last stage's output before the loss, and what
/// Pipeline::forward returns, as the Trainer's ZeRO forward does); any other tensor as it is.
torch::Tensor in_float(const torch::Tensor& t);

class StageReplicas {
 public:
  /// `last_backward`: per local stage, the microbatch of its last backward in the schedule.
  StageReplicas(const std::vector<torch::nn::Sequential>& stages, const PipelineOptions& options,
                std::vector<int> last_backward);

  /// backward(root, grad) of `microbatch` on local stage `local`, reducing when it is the stage's last
  /// (at ZeRO stage 3 every microbatch's reduces, into the shard's accumulated gradient).
  void backward(int local, int microbatch, const torch::Tensor& root, const torch::Tensor& grad);
  /// fn(), a forward of local stage `local`: at ZeRO stage 3 as one forward of its engine (each unit
  /// gathered as it runs, freed after), else as it is.
  torch::Tensor forward(int local, const std::function<torch::Tensor()>& fn);
  /// `t` in local stage `local`'s compute dtype (a ZeRO engine's under bf16) when it is a floating-point
  /// tensor of another, else `t`.
  torch::Tensor to_compute(int local, const torch::Tensor& t) const;
  /// With ZeRO: local stage `local`'s parameters whole, by name (a collective over the data group).
  std::vector<std::pair<std::string, torch::Tensor>> full_parameters(int local);
  bool has_zero() const { return !zero_.empty(); }
  int zero_engines() const { return int(zero_.size()); }
  ZeroEngineCore& zero_engine(int local) { return *zero_.at(size_t(local)); }
  /// Steps each stage's ZeRO engine on its shard.
  void step_zero();

 private:
  void make_zero_engines(const std::vector<torch::nn::Sequential>& stages, const PipelineOptions& options);

  std::vector<int> last_backward_;
  std::vector<std::unique_ptr<DataParallelCore>> ddp_;  // per local stage, with a data group and no ZeRO
  // per local stage, with PipelineOptions::zero
  std::vector<std::unique_ptr<ZeroEngine<torch::nn::SequentialImpl>>> zero_;
  bool sharded_parameters_ = false;  // ZeRO stage 3
};

}  // namespace cohort::pipeline::detail
