// Reading a checkpoint for this rank without touching the live state: every tensor this rank asks
// for is read (whole, or its range of a sharded flat tensor, cut from the saved slices), its CRC32
// checked, and kept in a staging tensor; a part's tensor (StateTensor::part: state kept out of
// memory) is read and checked but not kept, commit reads it again when its part is lent. Only when
// every rank staged everything does load commit.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "cohort/checkpoint.h"
#include "cohort/error.h"

namespace cohort::detail::ckpt {

/// The checkpoint is readable but holds another model's (or another setup's) state: falling back
/// to an older checkpoint of the same run would not help.
class MismatchError : public Error {
 public:
  using Error::Error;
};

struct Wanted {
  std::string name;  ///< "<entry>/<tensor>"
  StateTensor tensor;
  bool optional = false;
  Stateful* owner = nullptr;  ///< whose tensor it is (lend_part for a part's)
};

struct Staged {
  std::string path;  ///< the step directory
  int rank = 0;
  Manifest manifest;
  std::map<std::string, torch::Tensor> tensors;  ///< by Wanted::name
  /// Parts' tensors in the checkpoint: read and checked, read again by commit (tensor_reader.h).
  std::set<std::string> deferred;
};

/// What the loading state holds: its tensors, the names of its entries (anything else in the
/// checkpoint is a mismatch), and its mode: the stage of its ZeRO engine, none under DDP or a plain
/// module (a checkpoint saved in another mode is a mismatch that names both).
struct LoadRequest {
  std::vector<Wanted> wanted;
  std::vector<std::string> entries;
  std::optional<int> zero_stage;
  /// The StateKind::kOwned and kSharded tensors any loading rank lists: a saved one this rank does
  /// not list is then another rank's, not a mismatch (a model's part that some ranks hold, or the
  /// ZeRO engine's state of another tensor-parallel rank, sharded over its data-parallel group).
  std::set<std::string> listed_anywhere;
};

/// Stages request.wanted from the step directory `path` for `rank`. Throws MismatchError or Error.
Staged stage_checkpoint(const std::string& path, const LoadRequest& request, int rank);

}  // namespace cohort::detail::ckpt
