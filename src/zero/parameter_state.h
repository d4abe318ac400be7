// The ZeRO engine's checkpoint state by parameter, as DCP's sharded state dict names it: each trainable
// parameter's master weight and optimizer state ("h.0.attn.c_attn.weight.master", "...exp_avg") is a
// flat tensor of the whole parameter's size and shape, of which each rank saves and loads the elements
// it keeps. Nothing in it depends on how the engine grouped or sharded the parameters, so it loads at
// any data-parallel shape (flat, HSDP), stage-3 unit or bucket size. A parameter that is a part of a
// larger tensor (tensor parallelism: ParameterPart) is saved as that tensor, in its order: its parts
// are gathered while saving (a group at a time) and written in shares, and a load reads the runs of
// this rank's part; so any tensor_parallel_size loads it too. The engine's own form (its flat groups:
// ZeroEngineCore's Stateful) is what an engine with its optimizer state on NVMe keeps.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/stateful.h"
#include "cohort/zero.h"

namespace cohort::detail {

/// `count` elements from `local` in a part and from `whole` in the whole tensor (both flattened).
struct PartRun {
  int64_t local = 0;
  int64_t whole = 0;
  int64_t count = 0;
};

/// How a parameter this rank holds is cut out of a larger tensor.
struct ParameterPart {
  /// The whole tensor's shape, from the part's.
  std::function<std::vector<int64_t>(const std::vector<int64_t>& part_shape)> whole_shape;
  /// The runs of the part's elements [begin, end) in a whole tensor of `whole_shape`, in order.
  std::function<std::vector<PartRun>(const std::vector<int64_t>& whole_shape, int64_t begin, int64_t end)> runs;
  /// The whole tensor of this rank's part (a collective over the ranks holding the other parts).
  std::function<torch::Tensor(const torch::Tensor& part)> gather;
  /// This rank's part of the whole tensor.
  std::function<torch::Tensor(const torch::Tensor& whole)> cut;
  /// This rank among the holders of the parts: each writes a share of the whole tensor.
  int holder = 0;
  int holders = 1;
};

struct ParameterStateOptions {
  /// A parameter's part by name (its name in the engine's module), nullopt when it is whole.
  std::function<std::optional<ParameterPart>(const std::string& name)> part_of;
  /// The kind of the module tensors the engine keeps whole (frozen parameters, buffers): the same on
  /// every rank (kReplicated), or held by some ranks only (kOwned: a pipeline stage's).
  StateKind module_kind = StateKind::kReplicated;
  /// The name a parameter or module tensor is saved under, from its name in the engine's module (a
  /// pipeline stage's "4.h.3.ln_1.weight" -> the whole model's "h.3.ln_1.weight"); null: that name.
  /// part_of is asked with the engine's names.
  std::function<std::string(const std::string& name)> name_of;
};

/// Around `engine` (which must outlive it; optimizer state in memory, not on NVMe).
std::shared_ptr<Stateful> engine_parameter_state(ZeroEngineCore& engine, ParameterStateOptions options = {});
/// The same for several engines that step together (a pipeline rank's stages), as one Stateful.
std::shared_ptr<Stateful> engines_parameter_state(const std::vector<ZeroEngineCore*>& engines,
                                                  const ParameterStateOptions& options);

}  // namespace cohort::detail
