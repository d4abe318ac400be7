// How activations and their gradients travel between pipeline ranks. Each (receiving stage, direction,
// microbatch) is a channel (Comm tag) of its own, so messages pair up whatever order the schedule
// receives them in. An activation goes as a fixed-size header (dtype and shape) followed by its data,
// both sent without waiting, so the receiver learns every step what arrives: a changed shape (a
// smaller last batch) is received as it is, never cut to the first step's shape.
#pragma once

#include <torch/types.h>

#include <string>
#include <vector>

#include "cohort/comm.h"

namespace cohort::pipeline::detail {

enum class Direction { kForward = 0, kBackward = 1 };

/// The channel of what `stage` receives for `microbatch` in `direction`.
int channel(int stage, int microbatch, int microbatches, Direction direction);

/// "float32 [4, 16]": how messages show a tensor.
std::string describe_tensor(const torch::Tensor& tensor);

/// The header of `tensor` (dtype and sizes), and an empty tensor as a header describes it.
torch::Tensor encode_header(const torch::Tensor& tensor);
torch::Tensor empty_from_header(const torch::Tensor& header, const torch::Device& device);

/// Sends the header and the data of `tensor` to `dst` without waiting; the sends land in `pending`.
void send_activation(Comm& comm, const torch::Tensor& tensor, int dst, int tag, std::vector<Work>& pending);

/// The receive of one activation: post() starts the header's receive (at the schedule's RECV action),
/// take() waits for it, receives the data into a tensor of the announced dtype and shape and returns it.
class ActivationReceive {
 public:
  void post(Comm& comm, int src, int tag);
  bool posted() const { return header_.defined(); }
  torch::Tensor take(Comm& comm, const torch::Device& device);

 private:
  torch::Tensor header_;
  Work header_work_;
  int src_ = -1;
  int tag_ = 0;
};

}  // namespace cohort::pipeline::detail
