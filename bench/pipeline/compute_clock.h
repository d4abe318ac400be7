// The time a rank spends computing its stages, measured from inside the model, so the pipeline
// runtime needs no hooks: a ClockMark layer opens each stage (a forward starts) and closes it (the
// forward ends, and a tensor hook on the stage's output marks when its backward starts); a hook on the
// stage's first Linear's parameters marks when that backward is done (their gradients are the last
// thing it computes). The rest of a pipeline step is the bubble: waiting for transfers, and the
// runtime's own work between computes. bench/pipeline/pipeline_step.py measures torch the same way.
#pragma once

#include <torch/torch.h>

#include <chrono>

namespace cohort::bench {

class ComputeClock {
 public:
  using Clock = std::chrono::steady_clock;

  void forward_begin() {
    commit();
    state_ = State::kForward;
    start_ = Clock::now();
  }
  void forward_end() {
    if (state_ == State::kForward) busy_ += seconds(start_, Clock::now());
    state_ = State::kIdle;
  }
  /// The gradient of a stage's output (or of the loss) arrived. A second call before the stage's first
  /// layer finished (the loss, then the output of the same stage) belongs to the same backward.
  void backward_begin() {
    if (state_ == State::kBackward && !progressed_) return;
    commit();
    state_ = State::kBackward;
    progressed_ = false;
    start_ = last_ = Clock::now();
  }
  /// A gradient of the stage's first layer's parameters: the backward is done up to here.
  void backward_progress() {
    if (state_ != State::kBackward) return;
    progressed_ = true;
    last_ = Clock::now();
  }
  /// Ends the open backward (at the end of a step, or when the next compute starts).
  void commit() {
    if (state_ == State::kBackward && progressed_) busy_ += seconds(start_, last_);
    state_ = State::kIdle;
  }
  double busy_seconds() const { return busy_; }
  void reset() {
    commit();
    busy_ = 0;
  }

 private:
  enum class State { kIdle, kForward, kBackward };
  static double seconds(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  }
  State state_ = State::kIdle;
  bool progressed_ = false;
  Clock::time_point start_, last_;
  double busy_ = 0;
};

inline ComputeClock& compute_clock() {
  static ComputeClock clock;
  return clock;
}

/// Opens (begin) or closes (end) a stage for the compute clock; passes its input through unchanged.
struct ClockMarkImpl : torch::nn::Module {
  explicit ClockMarkImpl(bool begin) : begin(begin) {}
  torch::Tensor forward(torch::Tensor x) {
    if (begin) {
      compute_clock().forward_begin();
      return x;
    }
    compute_clock().forward_end();
    if (x.requires_grad()) x.register_hook([](torch::Tensor) { compute_clock().backward_begin(); });
    return x;
  }
  bool begin;
};
TORCH_MODULE(ClockMark);

}  // namespace cohort::bench
