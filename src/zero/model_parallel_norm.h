// Gradient clipping's norm when the model is also cut by tensor parallelism (DeepSpeed's mpu): each
// tensor-parallel rank's engine holds its own parts of the cut layers, and every one of them the
// parameters left whole (a row-wise layer's bias), alike. The whole model's squared norm is the sum
// over the model-parallel group of each rank's, with the whole parameters' elements weighted 1/size
// there, so that the sum counts them once. Likewise an fp16 overflow in any rank's parts skips the step
// on all of them.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "cohort/comm.h"
#include "cohort/zero.h"
#include "zero/engine_settings.h"
#include "zero/state_store.h"
#include "zero/trainable_parameters.h"

namespace cohort::detail {

class ModelParallelNorm {
 public:
  /// Over options.model_parallel_comm(), the parameters of options.model_parallel_replicated() whole.
  ModelParallelNorm(const EngineSettings& settings, const StateStore& store, const TrainableParameters& params,
                    const EngineOptions& options);

  /// Group g's reduced gradient as this rank holds it (`grad`), squared, its whole parameters'
  /// elements weighted 1/size: a double on the CPU.
  torch::Tensor squared_norm(int64_t g, const torch::Tensor& grad) const;
  /// Sums `total` over the model-parallel group.
  void sum(torch::Tensor& total) const;
  /// The largest `flag` of the model-parallel group (fp16: an overflow in any part skips every step).
  void max(torch::Tensor& flag) const;

 private:
  std::shared_ptr<Comm> comm_;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> whole_ranges_;  // per group: [begin, end) in `grad`
};

}  // namespace cohort::detail
