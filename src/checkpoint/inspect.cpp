// cohort-ckpt's work (see inspect.h). Consolidation streams each piece through one 4 MiB buffer,
// computing its CRC32 on the way, into a safetensors file (an 8-byte header length, a JSON header
// of names, dtypes, shapes and byte ranges, then the bytes): every size is known from the manifest,
// so the header is written first and no tensor is ever held whole.
#include "checkpoint/inspect.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "checkpoint/counter_values.h"
#include "checkpoint/files.h"
#include "checkpoint/layout.h"
#include "checkpoint/manifest.h"
#include "checkpoint/piece_stream.h"
#include "checkpoint/position_values.h"
#include "checkpoint/safetensors_writer.h"
#include "checkpoint/sampler_values.h"
#include "checkpoint/shard_file.h"
#include "checkpoint/step_tensors.h"
#include "cohort/error.h"
#include "core/check.h"
#include "core/log.h"
#include "core/safe_file.h"
#include "core/text.h"

namespace fs = std::filesystem;

namespace cohort::detail::ckpt {
namespace {

// check_step_tensor's refusal as text, "" when the value is one a run saves.
std::string step_problem(const Manifest& m, const TensorRecord& r, int64_t value) {
  try {
    check_step_tensor(m, r, value);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string bytes_text(int64_t bytes) {
  char text[32];
  if (bytes >= (1 << 20)) std::snprintf(text, sizeof text, "%.1f MiB", bytes / 1048576.0);
  else if (bytes >= 1024) std::snprintf(text, sizeof text, "%.1f KiB", bytes / 1024.0);
  else std::snprintf(text, sizeof text, "%lld B", static_cast<long long>(bytes));
  return text;
}

// A position no sampler reaches, a step count or loss scale no run has: resume refuses them too.
std::vector<std::string> manifest_value_problems(const Manifest& m, const std::string& dir) {
  std::vector<std::string> problems;
  try {
    check_trainer_sampler(m);
    check_trainer_rng(m);
  } catch (const Error& e) {
    problems.push_back(dir + "/manifest.json: " + e.what());
  }
  for (const auto& [entry, numbers] : m.values) {
    try {
      check_counter_values(numbers, entry);
      check_entry_counters(m, entry);
      if (is_sampler_values(numbers)) check_sampler_values(numbers, entry, m.world_size);
    } catch (const Error& e) {
      problems.push_back(dir + "/manifest.json: " + e.what());
    }
  }
  return problems;
}

}  // namespace

std::string resolve_step_dir(const std::string& path) {
  COHORT_CHECK_KIND(kInvalidArgument, !path.empty(),
                    "the checkpoint path is empty: give a checkpoint directory or one of its step-<n> directories");
  COHORT_CHECK_KIND(kInvalidArgument, path_exists(path), "checkpoint path ", path, " does not exist");
  // A step's manifest.json names its step (hostile pass 8: "manifest.json/manifest.json ... Not a directory").
  const fs::path given(path);
  std::error_code error;
  if (given.filename() == "manifest.json" && fs::is_regular_file(given, error))
    return given.has_parent_path() ? given.parent_path().string() : ".";
  if (path_exists((fs::path(path) / "manifest.json").string())) return path;
  // Throws for a pointer that leads out of `path`. The step a load takes: a replaced step's previous
  // copy while the step itself is missing (hostile pass 15, M-1: the tools failed on what loads).
  bool replaced = false;
  const std::string latest = latest_step_to_load(path, &replaced);
  if (replaced)
    COHORT_WARN("checkpoint ", read_latest(path), " is missing (a save replacing it was interrupted): taking its ",
                "previous copy ", latest, ", as a load does");
  if (!latest.empty()) return latest;
  // No 'latest' (a copy of the step directories, a save that never moved it): the newest step
  // directory, the one training would resume from.
  const auto steps = step_directories(path);
  COHORT_CHECK_KIND(kInvalidArgument, !steps.empty(), path,
                    " holds no checkpoint: no manifest.json, no 'latest' pointer and no step-<n> directory");
  return steps.front().second;
}

void check_output_outside(const std::string& step_dir, const std::string& out) {
  COHORT_CHECK_KIND(kInvalidArgument, !path_inside(step_dir, out), "the output ", out,
                    " is inside the checkpoint it reads (", step_dir,
                    "): writing it there would replace or add to the checkpoint's own files; write it elsewhere");
  // Any other checkpoint of the same directory (a sibling step-<n>, a save in progress, `latest`).
  const fs::path root = fs::path(step_dir).parent_path().empty() ? "." : fs::path(step_dir).parent_path();
  std::error_code error;
  const fs::path file = fs::weakly_canonical(out, error);
  const fs::path top = fs::weakly_canonical(root, error);
  if (!path_inside(top.string(), file.string()) || file == top) return;
  const std::string first = file.lexically_relative(top).begin()->string();
  COHORT_CHECK_KIND(kInvalidArgument, first != "latest", "the output ", out, " is the 'latest' pointer of ",
                    root.string(), ": write it elsewhere");
  const bool checkpoint = parse_step_dir(first).has_value() || first.rfind(".step-", 0) == 0;
  COHORT_CHECK_KIND(kInvalidArgument, !checkpoint, "the output ", out, " is inside checkpoint ",
                    (root / first).string(), " of ", root.string(),
                    ": writing it there would replace or add to that checkpoint's files; write it "
                    "elsewhere");
}

std::string describe_checkpoint(const std::string& dir, bool tensors) {
  const Manifest m = read_manifest(dir + "/manifest.json");
  std::ostringstream out;
  out << "checkpoint " << dir << "\n  step " << m.step << ", saved by " << m.world_size << " rank(s), ZeRO stage "
      << m.zero_stage << ", cohort " << excerpt(m.library_version) << ", " << excerpt(m.created) << "\n  files:";
  int64_t total = 0;
  for (const FileRecord& f : m.files) {
    out << "\n    " << f.name << "  " << bytes_text(f.payload_bytes);
    total += f.payload_bytes;
  }
  out << "\n  total " << bytes_text(total) << " in " << m.tensors.size() << " tensors\n  entries:";
  std::map<std::string, std::pair<int64_t, int64_t>> per_entry;  // tensors, bytes
  for (const TensorRecord& r : m.tensors) {
    auto& e = per_entry[r.name.substr(0, r.name.find('/'))];
    e.first += 1;
    for (const Piece& p : r.pieces) e.second += p.nbytes;
  }
  for (const auto& [entry, numbers] : m.values) {
    const auto counts = per_entry[entry];
    out << "\n    " << excerpt(entry) << ": " << counts.first << " tensors, " << bytes_text(counts.second);
    for (const auto& [key, value] : numbers) {
      if (key.find(".p") == std::string::npos)
        out << ", " << excerpt(key) << "=" << number_text(value);  // not per-parameter
    }
  }
  // A checkpoint may come from anyone: its texts escaped and cut as messages quote them (hostile pass 5,
  // m2: a value's terminal escapes reached the terminal, a 100 KB value printed whole).
  for (const auto& [key, value] : m.user) out << "\n  user " << excerpt(key) << " = " << excerpt(value);
  if (tensors) {
    out << "\n  tensors:";
    for (const TensorRecord& r : m.tensors) {
      out << "\n    " << excerpt(r.name) << "  " << kind_name(r.kind) << " " << dtype_name(r.dtype) << " [";
      for (size_t i = 0; i < r.shape.size(); ++i) out << (i ? ", " : "") << r.shape[i];
      out << "]  " << r.pieces.size() << " piece(s)";
    }
  }
  return out.str() + "\n";
}

std::vector<std::string> value_problems(const std::string& dir) {
  try {
    return manifest_value_problems(read_manifest(dir + "/manifest.json"), dir);
  } catch (const std::exception&) {
    return {};
  }
}

std::vector<std::string> verify_checkpoint(const std::string& dir) {
  Manifest m;
  try {
    m = read_manifest(dir + "/manifest.json");
  } catch (const std::exception& e) {
    return {e.what()};
  }
  std::vector<std::string> problems = manifest_value_problems(m, dir);
  PieceFiles files(dir, m);
  std::vector<char> buffer(kPieceChunk);
  std::set<std::string> bad_files;
  for (const TensorRecord& r : m.tensors) {
    try {
      for (const Piece& p : ordered_pieces(r)) {
        if (bad_files.count(p.file)) continue;
        try {
          std::string bytes;  // a step tensor's value, checked as a resume checks it
          const std::string mismatch = stream_piece(files, p, r.name, buffer, [&](const char* data, int64_t n) {
            if (is_step_tensor(r) && bytes.size() < sizeof(int64_t)) bytes.append(data, static_cast<size_t>(n));
          });
          if (!mismatch.empty()) problems.push_back(Error(mismatch, ErrorKind::kIO).what());
          if (mismatch.empty() && bytes.size() >= sizeof(int64_t)) {
            int64_t value = 0;
            std::memcpy(&value, bytes.data(), sizeof(value));
            const std::string problem = step_problem(m, r, value);
            // The file that holds the value (hostile pass 13, m-1: the step directory was named).
            if (!problem.empty()) problems.push_back(dir + "/" + p.file + ": " + problem);
          }
        } catch (const Error& e) {  // the file cannot be read: its other pieces cannot either
          bad_files.insert(p.file);
          problems.push_back(e.what());
        }
      }
    } catch (const Error& e) {
      problems.push_back(e.what());
    }
  }
  for (const FileRecord& f : m.files) {  // one no piece names is checked too (hostile pass 12, m-2)
    if (bad_files.count(f.name)) continue;
    try {
      files.get(f.name);
    } catch (const Error& e) {
      problems.push_back(e.what());
    }
  }
  return problems;
}

int64_t consolidate_checkpoint(const std::string& dir, const std::string& out) {
  check_output_outside(dir, out);
  const Manifest m = read_manifest(dir + "/manifest.json");
  // The header: every tensor's place in the data section, from the manifest's sizes alone.
  nlohmann::json header = nlohmann::json::object();
  nlohmann::json metadata = {{"format", "cohort-checkpoint consolidated"},
                             {"step", std::to_string(m.step)},
                             {"world_size", std::to_string(m.world_size)},
                             {"zero_stage", std::to_string(m.zero_stage)}};
  for (const auto& [entry, numbers] : m.values) {
    for (const auto& [key, value] : numbers) {
      std::ostringstream text;
      text.precision(17);
      text << value;
      metadata["values." + entry + "." + key] = text.str();
    }
  }
  for (const auto& [key, value] : m.user) metadata["user." + key] = value;
  header["__metadata__"] = metadata;
  struct Item {
    std::string name;
    const TensorRecord* record;
    std::vector<Piece> pieces;
  };
  std::vector<Item> items;
  int64_t offset = 0;
  for (const TensorRecord& r : m.tensors) {
    std::vector<std::pair<std::string, std::vector<Piece>>> outputs;
    if (r.kind == StateKind::kPerRank) {
      for (const Piece& p : r.pieces) outputs.push_back({r.name + ".rank" + std::to_string(p.rank), {p}});
    } else {
      outputs.push_back({r.name, ordered_pieces(r)});
    }
    for (auto& [name, pieces] : outputs) {
      int64_t bytes = 0;
      for (const Piece& p : pieces) bytes += p.nbytes;
      const std::vector<int64_t> shape = r.kind == StateKind::kPerRank ? pieces[0].shape : r.shape;
      header[name] = {
          {"dtype", safetensors_dtype(r.dtype)}, {"shape", shape}, {"data_offsets", {offset, offset + bytes}}};
      offset += bytes;
      items.push_back({name, &r, pieces});
    }
  }
  SafeFile file(out);  // a failure below leaves neither `out` changed nor a temporary behind
  write_safetensors_header(file, header);
  PieceFiles files(dir, m);
  std::vector<char> buffer(kPieceChunk);
  for (const Item& item : items) {
    for (const Piece& p : item.pieces) {
      const std::string mismatch = stream_piece(files, p, item.record->name, buffer,
                                                [&](const char* data, int64_t n) { file.write(data, n); });
      if (!mismatch.empty()) throw Error(mismatch, ErrorKind::kIO);
    }
  }
  file.commit();
  return static_cast<int64_t>(items.size());
}

}  // namespace cohort::detail::ckpt
