// DeepSpeed's dynamic loss scaler (see loss_scaler.h).
#include "zero/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "cohort/error.h"
#include "core/check.h"

namespace cohort::detail {

LossScaler::LossScaler(const Fp16Config& config) {
  if (!config.enabled()) return;
  if (config.loss_scale() > 0) {
    scale_ = config.loss_scale();
    return;
  }
  dynamic_ = true;
  scale_ = std::ldexp(1.0, config.initial_scale_power());
  min_scale_ = config.min_loss_scale();
  window_ = config.loss_scale_window();
  hysteresis_ = cur_hysteresis_ = config.hysteresis();
}

void LossScaler::update(bool overflow) {
  if (!dynamic_) return;
  if (overflow) {
    if (hysteresis_ == 1 || cur_hysteresis_ == 1) {
      COHORT_CHECK_KIND(kInvalidArgument, scale_ > min_scale_, "fp16: gradients overflowed at the minimum loss scale ",
                        min_scale_,
                        " (fp16.min_loss_scale); training cannot make progress: lower the learning rate, "
                        "use bf16, or check the loss for inf/nan");
      scale_ = std::max(scale_ / 2, min_scale_);
    } else {
      --cur_hysteresis_;
    }
    last_overflow_iter_ = iter_;
  } else if ((iter_ - last_overflow_iter_) % window_ == 0) {
    cur_hysteresis_ = hysteresis_;
    scale_ *= 2;
  }
  ++iter_;
}

void LossScaler::save(StateValues& values, const std::string& prefix) const {
  values[prefix + "scale"] = scale_;
  values[prefix + "iter"] = double(iter_);
  values[prefix + "last_overflow_iter"] = double(last_overflow_iter_);
  values[prefix + "hysteresis_left"] = cur_hysteresis_;
}

void LossScaler::load(const StateValues& values, const std::string& prefix) {
  // Without fp16 the scale is 1 and a fixed loss_scale is the config's: a saved one (edited, or from
  // a run of another precision) must not scale this run's loss (hostile pass 8, S2).
  if (!dynamic_) return;
  auto get = [&](const std::string& key, double fallback) {
    auto it = values.find(prefix + key);
    return it == values.end() ? fallback : it->second;
  };
  scale_ = get("scale", scale_);
  iter_ = int64_t(get("iter", double(iter_)));
  last_overflow_iter_ = int64_t(get("last_overflow_iter", double(last_overflow_iter_)));
  cur_hysteresis_ = int(get("hysteresis_left", cur_hysteresis_));
}

}  // namespace cohort::detail
