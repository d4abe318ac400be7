// Parameters tied across pipeline stages: PipelineOptions::parameter_names gives two layers' parameters
// one whole-model name (a GPT's token embedding and its output head), as Megatron's embedding group and
// DeepSpeed's TiedLayerSpec tie them. Each rank holding one has its own copy: the copies start equal
// (broadcast from the first stage's holder) and stay equal because every step their gradients are summed
// over the ranks holding them before any optimizer steps, so each copy takes the step one tensor would.
#pragma once

#include <torch/nn/modules/container/sequential.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cohort/comm.h"
#include "cohort/pipeline.h"

namespace cohort::pipeline::detail {

class StageReplicas;

class TiedParameters {
 public:
  /// Collective over `comm` (the pipeline group): every rank tells the others the whole-model names of
  /// its stages' trainable parameters. Throws naming the parameter when a name stands for tensors of
  /// different sizes, or twice on one rank (its layers would be one tensor on two stages of one rank).
  TiedParameters(const std::shared_ptr<Comm>& comm, const std::vector<int>& stage_ids,
                 const std::vector<torch::nn::Sequential>& stages, const ParameterNames& names);

  /// The whole-model name of the first tied parameter ("" without ties): every rank knows every tie.
  std::string first_name() const { return ties_.empty() ? "" : ties_.front().name; }
  /// The whole pipeline's trainable parameters, a tied one counted once.
  int64_t distinct() const { return distinct_; }
  /// Makes every copy the first stage's holder's (collective over each tie's ranks).
  void synchronize();
  /// Before a step under DDP or alone: throws when a tied parameter's gradient is not zero (an earlier
  /// step's, which the next sum would count twice).
  void check_fresh_gradients() const;
  /// Under ZeRO, once the engines exist (their gradients zero): each holder's engine checks, with the
  /// others at once, that it lays the tied parameter out as they do (ZeroEngineCore::sum_tied_gradient).
  void check_engines(StageReplicas& replicas);
  /// Aborts the ties' groups (a failing rank releases its twins).
  void abort(const std::string& reason);
  /// Sums each tied parameter's gradient (.grad) over its holders: stages under DDP or alone.
  void sum_gradients();
  /// The same for stages under ZeRO: each holder's engine sums its reduced gradient shard.
  void sum_engine_gradients(StageReplicas& replicas);

 private:
  struct Tie {
    std::string name;            // the whole-model name
    std::shared_ptr<Comm> comm;  // the ranks holding it, null when this rank holds none
    int root = 0;                // the first stage's holder, in comm
    int local = -1;              // this rank's local stage holding it
    std::string stage_name;      // its name in that stage ("4.transformer.wte.weight")
    torch::Tensor parameter;
  };
  std::vector<Tie> ties_;  // every tie of the pipeline, in name order (the same on every rank)
  int64_t distinct_ = 0;
};

}  // namespace cohort::pipeline::detail
