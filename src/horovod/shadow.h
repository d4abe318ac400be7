// How a rank that called hvd::join() takes part in an operation it never submitted (Horovod's join):
// each operation's description (its kind and, for an allreduce, the reduction and every tensor's dtype
// and shape) travels in the negotiation while a rank has joined, and the joined rank issues the same
// collective under the same name with zeros. Its contribution is then nothing, and an Average still
// divides by every rank, as in Horovod. Only allreduces with Sum or Average can be shadowed.
#pragma once

#include <c10/core/ScalarType.h>
#include <torch/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cohort/comm.h"

namespace cohort::hvd::detail {

struct Started;

/// One tensor of an allreduce, as a joined rank needs it to make zeros alike.
struct TensorSpec {
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<int64_t> sizes;
  bool cuda = false;
};

/// An allreduce as a joined rank repeats it.
struct Shadow {
  bool fused = false;  // Comm::allreduce_fused_async (grouped ones, DistributedOptimizer) or allreduce_async
  ReduceOp op = ReduceOp::kSum;
  std::vector<TensorSpec> tensors;
};

/// The shadow of an allreduce of `tensors` (one tensor unless `fused`).
Shadow allreduce_shadow(const std::vector<torch::Tensor>& tensors, ReduceOp op, bool fused);
/// Whether a joined rank's zeros leave the others' result as Horovod defines it (Sum and Average).
bool can_shadow(const std::optional<Shadow>& shadow);
/// Issues the shadow's collective on `comm` with zeros (CUDA tensors on `device`); the returned Work
/// keeps them alive.
Work start_shadow(Comm& comm, const Shadow& shadow, const torch::Device& device);

/// An operation waiting on one rank, as a join round exchanges it.
struct WaitingEntry {
  bool named = true;
  std::string kind;  // "allreduce", "allgather", ...
  std::string name;
  std::optional<Shadow> shadow;
};

/// One entry to a string and back (names may hold any byte); decode throws cohort::Error on bad input.
std::string encode_entry(const WaitingEntry& entry);
WaitingEntry decode_entry(const std::string& text);

}  // namespace cohort::hvd::detail
