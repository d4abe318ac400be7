// What the cohort-ckpt tool does, as library functions: describe a checkpoint, verify every byte
// of it against the manifest's checksums, and consolidate it into one full-state file. Reading is
// streamed in fixed-size chunks, so memory stays bounded whatever the size of the model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::detail::ckpt {

/// `path` itself when it holds a manifest.json, else the step directory `path/latest` names (its
/// previous copy `.step-<n>.old` while it is missing, as a load takes: files.h latest_step_to_load), else
/// (no `latest`) its newest step-<n> directory, as training resumes. Throws cohort::Error naming the
/// path when there is none, when it cannot be looked at (a loop of links), or when `latest` leads out
/// of `path` (files.h: read_latest).
std::string resolve_step_dir(const std::string& path);

/// A human-readable summary: step, world size, ZeRO stage, version, files, entries with their
/// tensor counts and bytes, values, user values; with `tensors`, one line per tensor.
std::string describe_checkpoint(const std::string& step_dir, bool tensors);

/// Every problem found (missing or truncated files, checksum mismatches, holes in sharded
/// tensors), each naming the file; empty when the checkpoint is sound.
std::vector<std::string> verify_checkpoint(const std::string& step_dir);

/// The problems of the manifest's numbers alone (positions, step counts, the Trainer's sampler), as a
/// resume refuses them; part of verify_checkpoint, which also reads every byte. Empty when they are sound
/// or when the manifest does not read (verify_checkpoint says why).
std::vector<std::string> value_problems(const std::string& step_dir);

/// Throws cohort::Error when `out` would land inside `step_dir` (replacing or adding to the files it
/// reads), inside any other checkpoint of its checkpoint directory (a step-<n> or .step-<n>.tmp
/// directory beside it), or on that directory's `latest` pointer.
void check_output_outside(const std::string& step_dir, const std::string& out);

/// Writes the whole state as one safetensors file (full tensors, sharded ones reassembled; per-rank
/// ones as "<name>.rank<r>"; numbers and user values in its metadata), checking every checksum on
/// the way; written safely (core/safe_file.h: a temporary beside `out`, renamed over it; nothing left
/// on a failure) after check_output_outside. Returns the number of tensors written.
int64_t consolidate_checkpoint(const std::string& step_dir, const std::string& out);

}  // namespace cohort::detail::ckpt
