// The manifest of a checkpoint (manifest.json, written by rank 0): world size, ZeRO stage, library
// version, every tensor's name, kind, dtype, shape and where its bytes lie (file, byte offset,
// element range of a sharded tensor, CRC32), the Statefuls' numbers and the user's key/values.
// JSON stays inside manifest.cpp; the rest of cohort sees these structs.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cohort/stateful.h"

namespace cohort::detail::ckpt {

inline constexpr const char* kFormat = "cohort-checkpoint";
// 2: 'values_crc32' beside 'user_crc32', both required (in 1 the user's was optional and the values had
// none: deleting the field or editing a number went unnoticed). 3: 'records_crc32' over the rest (the
// header, the files and the tensor records), required: two pieces' offsets swapped passed every check.
// 4: an optimizer's entry counts its parameters ('g0.params', 'pipeline.params') and gives each a step
// count, -1 before it has state: a parameter's whole state deleted read as "no state yet".
// 5: a sharded tensor's 'shape' may be the whole tensor's (a Trainer's ZeRO state by parameter), not
// only [flat_numel].
inline constexpr int kFormatVersion = 5;

/// Where one piece of a tensor's bytes lies.
struct Piece {
  int rank = 0;             ///< the rank that wrote it (and, for per-rank tensors, whose it is)
  std::string file;         ///< shard file name inside the step directory
  int64_t byte_offset = 0;  ///< within the file's payload (after its header)
  int64_t nbytes = 0;
  uint32_t crc32 = 0;
  int64_t offset = 0;  ///< sharded: first element of the flat tensor it holds
  int64_t numel = 0;
  std::vector<int64_t> shape;  ///< per-rank: this rank's shape
};

struct TensorRecord {
  std::string name;  ///< "<entry>/<tensor name>"
  StateKind kind = StateKind::kReplicated;
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<int64_t> shape;  ///< replicated: the shape; sharded: [flat_numel]
  int64_t flat_numel = 0;
  std::vector<Piece> pieces;
};

struct FileRecord {
  std::string name;
  int rank = 0;
  int64_t payload_bytes = 0;
};

struct Manifest {
  int format_version = kFormatVersion;
  std::string library_version;
  int64_t step = 0;
  int world_size = 1;
  int zero_stage = 0;
  std::string created;  ///< UTC, ISO 8601
  std::vector<FileRecord> files;
  std::vector<TensorRecord> tensors;
  std::map<std::string, StateValues> values;  ///< per entry
  std::map<std::string, std::string> user;

  const TensorRecord* find(const std::string& name) const;
};

/// "float32", "int64", ... and back; throws cohort::Error for types checkpoints do not store.
std::string dtype_name(c10::ScalarType type);
c10::ScalarType dtype_from_name(const std::string& name);
const char* kind_name(StateKind kind);

/// The checksum of the user values the manifest carries as 'user_crc32' (read_manifest checks it).
uint32_t user_values_crc32(const std::map<std::string, std::string>& user);
/// The checksum of the Statefuls' numbers, 'values_crc32' (read_manifest checks it from version 2).
uint32_t state_values_crc32(const std::map<std::string, StateValues>& values);
/// The checksum 'records_crc32' of a manifest's JSON text: every key but the values, the user's strings
/// and the checksums (read_manifest checks it from version 3).
uint32_t records_crc32_of(const std::string& manifest_text);
std::string manifest_to_json(const Manifest& manifest);
/// Reads and validates `path` (check_records included); errors name the path and the bad key
/// ("... manifest.json: 'world_size' is missing", "'values.sampler.seed' is \"abc\", not a number"),
/// quoting at most 200 characters of any value. 'step' must be 0 or more, and the n of a step-<n>
/// directory holding the manifest; 'files' and 'tensors' must be lists.
Manifest read_manifest(const std::string& path);
/// Throws cohort::Error (starting with `where`) for records no saved checkpoint has and that would make
/// a consolidated safetensors file unreadable: two tensors of one name, a negative dimension, a shape
/// whose size overflows or does not match its bytes, per-rank pieces of one rank twice
/// (manifest_check.cpp).
void check_records(const Manifest& manifest, const std::string& where);
/// The header's zero_stage agrees with the ZeRO engine's values (0 when there is no engine).
void check_mode(const Manifest& manifest, const std::string& where);
/// "ZeRO stage 2", or "DDP (no ZeRO engine)" when there is no stage.
std::string mode_name(const std::optional<int>& zero_stage);
/// The stage a Stateful's values name ("zero_stage"), over all entries of a checkpoint or a state.
std::optional<int> zero_stage_of(const std::map<std::string, StateValues>& values);

/// The records one rank sends to rank 0 while saving (each with its own pieces only).
std::string records_to_json(const std::vector<TensorRecord>& records);
std::vector<TensorRecord> records_from_json(const std::string& text);

}  // namespace cohort::detail::ckpt
