// The pure arithmetic of checkpoints, testable alone: which rank writes which replicated tensor,
// which saved slices of a sharded flat tensor cover the range a rank asks for, and the names of the
// files and directories of a checkpoint.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cohort::detail::ckpt {

/// Writer rank of each replicated tensor, so that every rank writes about the same number of bytes:
/// largest first, each to the rank with the fewest bytes so far (ties: the lower rank). The same
/// on every rank, since every rank holds the same replicated list.
std::vector<int> assign_writers(const std::vector<int64_t>& bytes, int world_size);

/// Writer rank of each StateKind::kOwned tensor (and each kSharded slice: save.cpp's writer_key), by name, from every
/// rank's list of the (name, bytes) it holds: largest first (ties: by name), each to the holder with the fewest bytes
/// so far (ties: the lower rank), so a tensor several ranks hold (pipeline stages with data-parallel replicas) is
/// written once and the replicas share the writing.
using HeldTensors = std::vector<std::pair<std::string, int64_t>>;
std::map<std::string, int> assign_owned_writers(const std::vector<HeldTensors>& per_rank);

/// A saved slice [offset, offset + numel) of a flat tensor.
struct Slice {
  int64_t offset = 0;
  int64_t numel = 0;
};

/// One copy from a saved slice into the range being loaded.
struct SliceCopy {
  size_t slice = 0;  ///< index into the saved slices
  int64_t from = 0;  ///< element offset inside that slice
  int64_t to = 0;    ///< element offset inside the wanted range
  int64_t count = 0;
};

/// The copies that fill [begin, end) from `saved`. Throws cohort::Error (naming `what`) when the
/// saved slices leave a hole in it or overlap each other.
std::vector<SliceCopy> plan_slice_copies(const std::vector<Slice>& saved, int64_t begin, int64_t end,
                                         const std::string& what);

/// "step-<n>" and back (nothing for any other name, e.g. ".step-5.tmp").
std::string step_dir_name(int64_t step);
std::optional<int64_t> parse_step_dir(const std::string& name);
/// ".step-<n>.old", the previous copy of a step being replaced (commit.h), from "step-<n>", and the
/// step such a name holds (nothing for any other name).
std::string old_copy_name(const std::string& step_dir);
std::optional<int64_t> parse_old_copy(const std::string& name);

/// What a save of step `saved` keeps and removes among the step directories `steps` (the saved one
/// included). The retention rule: a checkpoint of a later step than the one saved is never removed
/// (someone's work: resuming from an older checkpoint, or `--resume never`, must not destroy it);
/// of the steps up to the saved one the `keep_last` newest are kept (all when keep_last <= 0) and
/// the older ones removed.
struct RetentionPlan {
  std::vector<int64_t> remove;  ///< older than the keep_last newest up to `saved`
  std::vector<int64_t> newer;   ///< later than `saved`: kept, and worth a warning
};
RetentionPlan plan_retention(std::vector<int64_t> steps, int64_t saved, int keep_last);

/// "shard-00001-of-00004.bin": rank 1 of 4.
std::string shard_file_name(int rank, int world_size);

}  // namespace cohort::detail::ckpt
