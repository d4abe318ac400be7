// The fp16 loss scaler, with DeepSpeed's rules (deepspeed/runtime/fp16/loss_scaler.py): the loss is
// multiplied by the scale before backward so small fp16 gradients do not flush to zero; a step whose
// gradients overflowed (inf/nan on any rank) is skipped. Dynamic scaling halves the scale after
// `hysteresis` overflows (never below min_loss_scale) and doubles it after loss_scale_window steps
// without one. A positive loss_scale in the config is a fixed scale; without fp16 the scale is 1.
#pragma once

#include <cstdint>
#include <string>

#include "cohort/stateful.h"
#include "cohort/zero_config.h"

namespace cohort::detail {

class LossScaler {
 public:
  explicit LossScaler(const Fp16Config& config);

  double scale() const { return scale_; }
  bool dynamic() const { return dynamic_; }
  /// After each boundary step: `overflow` is whether any rank saw inf/nan. Throws cohort::Error when
  /// an overflow happens at min_loss_scale already (training cannot make progress).
  void update(bool overflow);

  void save(StateValues& values, const std::string& prefix) const;
  void load(const StateValues& values, const std::string& prefix);

 private:
  bool dynamic_ = false;
  double scale_ = 1.0;
  double min_scale_ = 1.0;
  int window_ = 1000;
  int hysteresis_ = 2;
  int cur_hysteresis_ = 2;
  int64_t iter_ = 0;
  int64_t last_overflow_iter_ = -1;
};

}  // namespace cohort::detail
