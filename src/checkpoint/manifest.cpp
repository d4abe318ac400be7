// manifest.json with nlohmann-json (see manifest.h). Reading validates every key it uses, so a
// damaged or foreign manifest is one I/O error naming the file and the key, never a JSON exception or
// nlohmann's text (core/json_read.h); file names must be plain names inside the step directory
// (files.h), checked before any is opened.
#include "checkpoint/manifest.h"

#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <type_traits>

#include "checkpoint/files.h"
#include "checkpoint/layout.h"
#include "checkpoint/shard_file.h"
#include "cohort/error.h"
#include "core/check.h"
#include "core/json_read.h"
#include "core/safe_file.h"
#include "core/text.h"

namespace cohort::detail::ckpt {
namespace {

using nlohmann::json;

// A manifest lists every tensor of a model: a few MiB for the largest; anything past this is not one.
constexpr int64_t kMaxManifestBytes = int64_t(1) << 30;

const std::pair<c10::ScalarType, const char*> kDtypes[] = {
    {c10::ScalarType::Double, "float64"},    {c10::ScalarType::Float, "float32"}, {c10::ScalarType::Half, "float16"},
    {c10::ScalarType::BFloat16, "bfloat16"}, {c10::ScalarType::Long, "int64"},    {c10::ScalarType::Int, "int32"},
    {c10::ScalarType::Short, "int16"},       {c10::ScalarType::Char, "int8"},     {c10::ScalarType::Byte, "uint8"},
    {c10::ScalarType::Bool, "bool"}};

std::optional<StateKind> kind_named(const std::string& name) {
  for (StateKind kind : {StateKind::kReplicated, StateKind::kSharded, StateKind::kPerRank, StateKind::kOwned}) {
    if (name == kind_name(kind)) return kind;
  }
  return std::nullopt;
}

std::optional<c10::ScalarType> dtype_named(const std::string& name) {
  for (const auto& [type, type_name] : kDtypes) {
    if (name == type_name) return type;
  }
  return std::nullopt;
}

json piece_to_json(const Piece& p) {
  json j = {{"rank", p.rank},     {"file", p.file},   {"byte_offset", p.byte_offset},
            {"nbytes", p.nbytes}, {"crc32", p.crc32}, {"offset", p.offset},
            {"numel", p.numel}};
  if (!p.shape.empty()) j["shape"] = p.shape;
  return j;
}

json record_to_json(const TensorRecord& r) {
  json pieces = json::array();
  for (const Piece& p : r.pieces) pieces.push_back(piece_to_json(p));
  return {{"name", r.name},   {"kind", kind_name(r.kind)},  {"dtype", dtype_name(r.dtype)},
          {"shape", r.shape}, {"flat_numel", r.flat_numel}, {"pieces", pieces}};
}

// `value` as a T when it is a JSON integer that T holds. nlohmann's get<int>() would convert a float
// such as 7e36 with a cast whose result is undefined (found by manifest_fuzz).
template <typename T>
std::optional<T> exact_integer(const json& value) {
  using Limits = std::numeric_limits<T>;
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u <= static_cast<uint64_t>(Limits::max())) return static_cast<T>(u);
  } else if (value.is_number_integer()) {
    const int64_t i = value.get<int64_t>();
    const bool fits = std::is_signed_v<T>
                          ? i >= static_cast<int64_t>(Limits::min()) && i <= static_cast<int64_t>(Limits::max())
                          : i >= 0 && static_cast<uint64_t>(i) <= static_cast<uint64_t>(Limits::max());
    if (fits) return static_cast<T>(i);
  }
  return std::nullopt;
}

struct WrongType {};

// `value` as a T, or WrongType / json::exception.
template <typename T>
T typed(const json& value) {
  if constexpr (std::is_integral_v<T>) {
    if (const auto integer = exact_integer<T>(value)) return *integer;
    throw WrongType{};
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    if (!value.is_array()) throw WrongType{};
    T out;
    for (const json& item : value) out.push_back(typed<int64_t>(item));
    return out;
  } else {
    return value.get<T>();
  }
}

// Typed access that turns a missing key or a wrong type into "'<path>' is missing/not a <type>".
template <typename T>
T field(const json& object, const char* key, const std::string& where) {
  COHORT_CHECK_KIND(kIO, object.is_object() && object.contains(key), where, ": '", key, "' is missing");
  try {
    return typed<T>(object.at(key));
  } catch (const WrongType&) {
    throw Error(where + ": '" + key + "' is not an integer of its range (" + json_excerpt(object.at(key)) + ")",
                ErrorKind::kIO);
  } catch (const json::exception&) {
    throw Error(where + ": '" + key + "' has the wrong type (" + json_excerpt(object.at(key)) + ")", ErrorKind::kIO);
  }
}

// object[key] when it is a string, else `fallback` (json::value throws when the key holds another type).
std::string string_or(const json& object, const char* key, const std::string& fallback) {
  const auto found = object.find(key);
  return found != object.end() && found->is_string() ? found->get<std::string>() : fallback;
}

// object[key] when it is a list: null or an object would iterate as an empty or odd list, and a
// manifest whose "tensors" is null would read as a model without tensors.
json list_field(const json& object, const char* key, const std::string& where) {
  json value = field<json>(object, key, where);
  COHORT_CHECK_KIND(kIO, value.is_array(), where, ": '", key, "' is ", json_excerpt(value), ", not a list");
  return value;
}

// 'values': per entry, named numbers; an error names the whole key and its value
// ("'values.sampler.seed' is \"abc\", not a number"), not the enclosing object.
std::map<std::string, StateValues> values_from_json(const json& j, const std::string& where) {
  const json values = field<json>(j, "values", where);
  COHORT_CHECK_KIND(kIO, values.is_object(), where, ": 'values' is ", json_excerpt(values), ", not an object");
  std::map<std::string, StateValues> out;
  for (const auto& [entry, numbers] : values.items()) {
    const std::string key = "values." + excerpt(entry);
    COHORT_CHECK_KIND(kIO, numbers.is_object(), where, ": '", key, "' is ", json_excerpt(numbers), ", not an object");
    StateValues& mine = out[entry];
    for (const auto& [name, number] : numbers.items()) {
      // A boolean is not one either: get<double> would throw nlohmann's own text (hostile pass 9, M1).
      COHORT_CHECK_KIND(kIO, number.is_number(), where, ": '", key, ".", excerpt(name), "' is ", json_excerpt(number),
                        ", not a number");
      mine[name] = number.get<double>();
    }
  }
  return out;
}

// 'user': the user's key/values, strings only.
std::map<std::string, std::string> user_from_json(const json& j, const std::string& where) {
  const json user = field<json>(j, "user", where);
  COHORT_CHECK_KIND(kIO, user.is_object(), where, ": 'user' is ", json_excerpt(user), ", not an object");
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : user.items()) {
    COHORT_CHECK_KIND(kIO, value.is_string(), where, ": 'user.", excerpt(key), "' is ", json_excerpt(value),
                      ", not a string");
    out[key] = value.get<std::string>();
  }
  return out;
}

// The checksums of what a check cannot hold to a range (a loss sum, a user's string, which tensor a
// piece's offset belongs to), so that a hand edit or damage is caught whole. Each is required from the
// version that brought it (values and user 2, records 3); an older manifest without it still loads.
struct Checksum {
  const char* key;
  const char* covers;  // for the message: "the values"
  int required_from;   // the format version that brought it
};

void check_crc(const json& j, const Checksum& crc, uint32_t now, int format_version, const std::string& where) {
  if (format_version < crc.required_from && !j.contains(crc.key)) return;
  const auto written = field<uint32_t>(j, crc.key, where);
  COHORT_CHECK_KIND(kIO, written == now, where, ": '", crc.key, "' is ", written, " but ", crc.covers,
                    " it covers give ", now, ": edited or damaged after the save");
}

// 'step' is a step count, and the one its step-<n> (or .step-<n>.old) directory names (a directory of
// another name, such as a copy, is not compared): resuming from a hand-edited step would set the state to it.
int64_t step_from_json(const json& j, const std::string& where) {
  const int64_t step = field<int64_t>(j, "step", where);
  COHORT_CHECK_KIND(kIO, step >= 0, where, ": 'step' is ", step, ", not a step count (0 or more)");
  const std::string dir = std::filesystem::path(where).parent_path().filename().string();
  // A replaced step's old copy, `.step-<n>.old`, which a load may take, names its step too (hostile pass 15).
  auto named = parse_step_dir(dir);
  if (!named) named = parse_old_copy(dir);
  COHORT_CHECK_KIND(kIO, !named || *named == step, where, ": 'step' is ", step, ", but its directory is ",
                    step_dir_name(*named));
  return step;
}

TensorRecord record_from_json(const json& j, const std::string& where) {
  TensorRecord r;
  r.name = field<std::string>(j, "name", where);
  const std::string here = where + ": tensor '" + excerpt(r.name) + "'";
  const std::string kind = field<std::string>(j, "kind", here), dtype = field<std::string>(j, "dtype", here);
  const auto known_kind = kind_named(kind);
  const auto known_dtype = dtype_named(dtype);
  COHORT_CHECK_KIND(kIO, known_kind, here, ": unknown tensor kind '", excerpt(kind), "'");
  COHORT_CHECK_KIND(kIO, known_dtype, here, ": unknown dtype '", excerpt(dtype), "'");
  r.kind = *known_kind;
  r.dtype = *known_dtype;
  r.shape = field<std::vector<int64_t>>(j, "shape", here);
  r.flat_numel = field<int64_t>(j, "flat_numel", here);
  const json pieces = field<json>(j, "pieces", here);
  COHORT_CHECK_KIND(kIO, pieces.is_array(), here, ": 'pieces' is not a list");
  for (const json& pj : pieces) {
    Piece p;
    p.rank = field<int>(pj, "rank", here);
    p.file = field<std::string>(pj, "file", here);
    check_file_name(p.file, here);
    p.byte_offset = field<int64_t>(pj, "byte_offset", here);
    p.nbytes = field<int64_t>(pj, "nbytes", here);
    p.crc32 = field<uint32_t>(pj, "crc32", here);
    p.offset = field<int64_t>(pj, "offset", here);
    p.numel = field<int64_t>(pj, "numel", here);
    if (pj.contains("shape")) p.shape = field<std::vector<int64_t>>(pj, "shape", here);
    COHORT_CHECK_KIND(kIO, p.byte_offset >= 0 && p.nbytes >= 0 && p.numel >= 0 && p.offset >= 0, here,
                      ": a piece has a negative offset or size");
    r.pieces.push_back(std::move(p));
  }
  return r;
}

}  // namespace

uint32_t user_values_crc32(const std::map<std::string, std::string>& user) {
  uint32_t crc = 0;
  for (const auto& [key, value] : user) {  // each with its NUL: "ab"+"c" is not "a"+"bc"
    crc = crc32_update(crc, key.c_str(), static_cast<int64_t>(key.size()) + 1);
    crc = crc32_update(crc, value.c_str(), static_cast<int64_t>(value.size()) + 1);
  }
  return crc;
}

uint32_t state_values_crc32(const std::map<std::string, StateValues>& values) {
  uint32_t crc = 0;
  for (const auto& [entry, numbers] : values) {
    crc = crc32_update(crc, entry.c_str(), static_cast<int64_t>(entry.size()) + 1);
    for (const auto& [name, number] : numbers) {
      crc = crc32_update(crc, name.c_str(), static_cast<int64_t>(name.size()) + 1);
      crc = crc32_update(crc, &number, sizeof number);
    }
  }
  return crc;
}

namespace {

// Every key but the ones other checksums cover and the checksums, as nlohmann's dump() writes the
// object without them (keys sorted, compact): the header, 'files' and 'tensors', and any key a later
// version adds. Item by item, so the manifest is not copied.
uint32_t records_crc32(const json& manifest) {
  static const std::set<std::string> others = {"values", "user", "user_crc32", "values_crc32", "records_crc32"};
  uint32_t crc = 0;
  const auto add = [&crc](const std::string& text) {
    crc = crc32_update(crc, text.data(), static_cast<int64_t>(text.size()));
  };
  add("{");
  bool first = true;
  for (const auto& [key, value] : manifest.items()) {
    if (others.count(key)) continue;
    add((first ? "" : ",") + json(key).dump() + ":" + value.dump());
    first = false;
  }
  add("}");
  return crc;
}

}  // namespace

uint32_t records_crc32_of(const std::string& manifest_text) { return records_crc32(json::parse(manifest_text)); }

const TensorRecord* Manifest::find(const std::string& name) const {
  for (const TensorRecord& r : tensors) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

std::string dtype_name(c10::ScalarType type) {
  for (const auto& [t, name] : kDtypes) {
    if (t == type) return name;
  }
  throw Error(std::string("checkpoints cannot store tensors of type ") + c10::toString(type),
              ErrorKind::kInvalidArgument);
}

c10::ScalarType dtype_from_name(const std::string& name) {
  const auto type = dtype_named(name);
  COHORT_CHECK_KIND(kIO, type, "unknown dtype '", excerpt(name), "'");
  return *type;
}

const char* kind_name(StateKind kind) {
  switch (kind) {
    case StateKind::kReplicated: return "replicated";
    case StateKind::kSharded: return "sharded";
    case StateKind::kPerRank: return "per_rank";
    case StateKind::kOwned: return "owned";
  }
  return "?";
}

std::string manifest_to_json(const Manifest& m) {
  json files = json::array(), tensors = json::array(), values = json::object();
  for (const FileRecord& f : m.files) {
    files.push_back({{"name", f.name}, {"rank", f.rank}, {"payload_bytes", f.payload_bytes}});
  }
  for (const TensorRecord& r : m.tensors) tensors.push_back(record_to_json(r));
  for (const auto& [entry, numbers] : m.values) values[entry] = numbers;
  json j = {{"format", kFormat},
            {"format_version", m.format_version},
            {"library_version", m.library_version},
            {"step", m.step},
            {"world_size", m.world_size},
            {"zero_stage", m.zero_stage},
            {"created", m.created},
            {"files", files},
            {"tensors", tensors},
            {"values", values},
            {"user", m.user},
            {"user_crc32", user_values_crc32(m.user)},
            {"values_crc32", state_values_crc32(m.values)}};
  j["records_crc32"] = records_crc32(j);
  return j.dump(1) + "\n";
}

Manifest read_manifest(const std::string& path) {
  const std::string text = read_own_file(path, "manifest", kMaxManifestBytes);
  JsonReadOptions options;
  options.source = path;
  options.document = "cohort checkpoint manifest";
  options.kind = ErrorKind::kIO;  // cohort wrote it: one that is not JSON is truncated or damaged
  options.unique_keys = true;     // cohort never repeats one: a repeated key is damage, not a choice
  const json j = parse_json(text, options);
  COHORT_CHECK_KIND(kIO, j.is_object() && string_or(j, "format", "") == kFormat, path,
                    " is not a cohort checkpoint manifest ('format' is not \"", kFormat, "\")");
  Manifest m;
  m.format_version = field<int>(j, "format_version", path);
  // A version below 1 was never written: taken, it would also have turned the checksums' check off.
  COHORT_CHECK_KIND(kIO, m.format_version >= 1, path, ": 'format_version' is ", m.format_version,
                    ", not a version cohort wrote (1 to ", kFormatVersion, ")");
  COHORT_CHECK_KIND(kInvalidArgument, m.format_version <= kFormatVersion, path, " has format version ",
                    m.format_version, "; this cohort reads up to ", kFormatVersion, " (written by cohort ",
                    excerpt(string_or(j, "library_version", "?")), ")");
  m.library_version = field<std::string>(j, "library_version", path);
  m.step = step_from_json(j, path);
  m.world_size = field<int>(j, "world_size", path);
  COHORT_CHECK_KIND(kIO, m.world_size >= 1, path, ": 'world_size' is ", m.world_size);
  m.zero_stage = field<int>(j, "zero_stage", path);
  m.created = field<std::string>(j, "created", path);
  std::set<std::string> file_names;
  std::set<int> file_ranks;
  for (const json& f : list_field(j, "files", path)) {
    m.files.push_back(
        {field<std::string>(f, "name", path), field<int>(f, "rank", path), field<int64_t>(f, "payload_bytes", path)});
    const FileRecord& file = m.files.back();
    check_file_name(file.name, path);
    // Hostile pass 9: these were shown as the size a shard "expects" (-9223372036854775777 from 2^63 - 1).
    const std::string here = path + ": file '" + excerpt(file.name) + "'";
    COHORT_CHECK_KIND(kIO, file.rank >= 0 && file.rank < m.world_size, here, " has rank ", file.rank, ", outside 0..",
                      m.world_size - 1);
    COHORT_CHECK_KIND(kIO, file.payload_bytes >= 0 && file.payload_bytes <= (int64_t(1) << 60), here,
                      " has payload_bytes ", file.payload_bytes, ", outside 0..2^60");
    COHORT_CHECK_KIND(kIO, file_names.insert(file.name).second, here, " is listed twice");
    COHORT_CHECK_KIND(kIO, file_ranks.insert(file.rank).second, here, " is rank ", file.rank,
                      "'s second file: each rank writes one shard");
  }
  for (const json& t : list_field(j, "tensors", path)) m.tensors.push_back(record_from_json(t, path));
  m.values = values_from_json(j, path);
  m.user = user_from_json(j, path);
  check_crc(j, {"user_crc32", "the values", 2}, user_values_crc32(m.user), m.format_version, path);
  check_crc(j, {"values_crc32", "the values", 2}, state_values_crc32(m.values), m.format_version, path);
  check_crc(j, {"records_crc32", "the header, files and tensor records", 3}, records_crc32(j), m.format_version, path);
  check_records(m, path);
  check_mode(m, path);
  return m;
}

std::string records_to_json(const std::vector<TensorRecord>& records) {
  json list = json::array();
  for (const TensorRecord& r : records) list.push_back(record_to_json(r));
  return list.dump();
}

std::vector<TensorRecord> records_from_json(const std::string& text) {
  std::vector<TensorRecord> records;
  JsonReadOptions options;
  options.source = "shard records";
  options.kind = ErrorKind::kInternal;  // another rank of this job wrote them
  for (const json& j : parse_json(text, options)) records.push_back(record_from_json(j, "shard records"));
  return records;
}

}  // namespace cohort::detail::ckpt
