#include "checkpoint/dcp/export.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <regex>

#include "checkpoint/dcp/distcp_writer.h"
#include "checkpoint/dcp/metadata_writer.h"
#include "checkpoint/dcp/pickle_writer.h"
#include "checkpoint/files.h"
#include "checkpoint/inspect.h"
#include "checkpoint/manifest.h"
#include "checkpoint/piece_stream.h"
#include "cohort/error.h"
#include "core/check.h"
#include "core/safe_file.h"

namespace fs = std::filesystem;

namespace cohort::detail::dcp {

namespace {

using ckpt::Manifest;
using ckpt::TensorRecord;

constexpr const char* kDataFile = "__0_0.distcp";

// One key of the DCP state dict: a saved tensor, a step count, or a Python object (param_groups).
struct Source {
  std::string key;
  std::vector<std::string> path;  // its nesting: {"model", fqn}, {"optimizer", "state", fqn, field}
  const TensorRecord* record = nullptr;
  std::optional<float> step;  // a 0-d float32 step count
  std::string pickle;         // an object's data.pkl
};

struct ExportPlan {
  std::vector<Source> sources;
  std::vector<std::string> skipped;
  std::vector<std::string> parameters;  // the optimizer's, in the checkpoint's order
};

std::string without_prefix(const std::string& name, const ExportOptions& options, const std::string& saved) {
  COHORT_CHECK_KIND(kInvalidArgument, name.rfind(options.prefix, 0) == 0, "'", name, "' (of '", saved,
                    "') does not begin with --prefix '", options.prefix, "': its name in the model cannot be made");
  return name.substr(options.prefix.size());
}

void add_tensor(ExportPlan& plan, std::vector<std::string> path, const TensorRecord& r) {
  std::string key;
  for (const std::string& part : path) key += (key.empty() ? "" : ".") + part;
  plan.sources.push_back({key, std::move(path), &r, std::nullopt, ""});
}

// The engine's own Stateful saves its flat groups ("group0.master", "tp1.group0.exp_avg"): no parameter's.
bool is_flat_group(const std::string& name) {
  static const std::regex pattern("(tp[0-9]+\\.)?group[0-9]+\\..*");
  return std::regex_match(name, pattern);
}

// A ZeRO engine's tensor ("<parameter>.master|exp_avg|...", "module.<buffer>") under its DCP name.
void map_engine_tensor(ExportPlan& plan, const TensorRecord& r, const std::string& rest, const ExportOptions& options) {
  COHORT_CHECK_KIND(kInvalidArgument, !is_flat_group(rest), "'", r.name, "' is a flat group of a ZeRO engine's ",
                    "parameters, not one parameter's (the engine was added to the CheckpointState itself, or its ",
                    "optimizer state was on NVMe): save it by parameter name, state.add(\"",
                    r.name.substr(0, r.name.find('/')),
                    "\", engine.parameter_state()), as the Trainer does, to export it");
  // The engine's buffers are whole on every rank; a parameter's state is sharded, whatever its name.
  if (rest.rfind("module.", 0) == 0 && r.kind != StateKind::kSharded)
    return add_tensor(plan, {"model", without_prefix(rest.substr(7), options, r.name)}, r);
  const auto dot = rest.rfind('.');
  const std::string field = dot == std::string::npos ? "" : rest.substr(dot + 1);
  const std::string fqn = without_prefix(rest.substr(0, dot == std::string::npos ? 0 : dot), options, r.name);
  if (field == "master") {
    plan.parameters.push_back(fqn);
    return add_tensor(plan, {"model", fqn}, r);
  }
  const bool state = field == "exp_avg" || field == "exp_avg_sq" || field == "max_exp_avg_sq" ||
                     field == "momentum_buffer";
  COHORT_CHECK_KIND(kInvalidArgument, state, "'", r.name,
                    "' is no parameter's master weights or optimizer state that PyTorch names");
  if (!options.model_only) add_tensor(plan, {"optimizer", "state", fqn, field}, r);
}

bool is_optimizer_entry(const StateValues& values) {
  return std::any_of(values.begin(), values.end(), [](const auto& v) { return v.first.rfind("g0.", 0) == 0; });
}

double value_of(const Manifest& m, const std::string& entry, const std::string& key) {
  const auto& values = m.values.at(entry);
  const auto it = values.find(key);
  COHORT_CHECK_KIND(kInvalidArgument, it != values.end(), "the checkpoint's '", entry, "' has no '", key,
                    "': its optimizer is not LibTorch's Adam or AdamW (PyTorch's state of another one is not ",
                    "written), or it was saved before cohort recorded Adam's hyper-parameters: export it with ",
                    "--model-only");
  return it->second;
}

std::string object_pickle(const std::function<void(PickleWriter&)>& value) {
  PickleWriter p;
  value(p);
  return p.finish();
}

// PyTorch's Adam/AdamW param_groups[0], every key its state dict has, and each parameter's step.
void add_adam_state(ExportPlan& plan, const Manifest& m, const std::string& engine) {
  auto v = [&](const char* key) { return value_of(m, engine, std::string("zero.adam.") + key); };
  const float step = static_cast<float>(value_of(m, engine, "zero.global_steps") -
                                        value_of(m, engine, "zero.skipped_steps"));
  std::vector<std::pair<std::string, std::string>> group = {
      {"lr", object_pickle([&](PickleWriter& p) { p.real(v("lr")); })},
      {"betas", object_pickle([&](PickleWriter& p) {
         p.mark();
         p.real(v("beta1"));
         p.real(v("beta2"));
         p.tuple();
       })},
      {"eps", object_pickle([&](PickleWriter& p) { p.real(v("eps")); })},
      {"weight_decay", object_pickle([&](PickleWriter& p) { p.real(v("weight_decay")); })},
      {"amsgrad", object_pickle([&](PickleWriter& p) { p.boolean(v("amsgrad") != 0); })},
      {"decoupled_weight_decay", object_pickle([&](PickleWriter& p) { p.boolean(v("decoupled") != 0); })}};
  for (const char* off : {"maximize", "capturable", "differentiable"})
    group.push_back({off, object_pickle([](PickleWriter& p) { p.boolean(false); })});
  for (const char* unset : {"foreach", "fused"})
    group.push_back({unset, object_pickle([](PickleWriter& p) { p.none(); })});
  group.push_back({"params", object_pickle([&](PickleWriter& p) {
                     p.empty_list();
                     for (const std::string& fqn : plan.parameters) {
                       p.text(fqn);
                       p.append();
                     }
                   })});
  for (auto& [name, pickle] : group)
    plan.sources.push_back({"optimizer.param_groups.0." + name,
                            {"optimizer", "param_groups", "0", name},
                            nullptr,
                            std::nullopt,
                            std::move(pickle)});
  for (const std::string& fqn : plan.parameters)
    plan.sources.push_back(
        {"optimizer.state." + fqn + ".step", {"optimizer", "state", fqn, "step"}, nullptr, step, ""});
}

ExportPlan plan_export(const Manifest& m, const ExportOptions& options) {
  ExportPlan plan;
  std::string engine;
  for (const TensorRecord& r : m.tensors) {
    const auto slash = r.name.find('/');
    const std::string entry = r.name.substr(0, slash), rest = r.name.substr(slash + 1);
    const auto values = m.values.find(entry);
    if (r.kind == StateKind::kPerRank) {
      plan.skipped.push_back(r.name +
                             ": one value per rank (a random generator's state), which a DCP state dict of "
                             "the model and optimizer has no place for");
    } else if (values != m.values.end() && values->second.count("zero_stage")) {
      COHORT_CHECK_KIND(kInvalidArgument, engine.empty() || engine == entry, "the checkpoint holds ",
                        "two ZeRO engines ('", engine, "' and '", entry, "'): one model's state is exported");
      engine = entry;
      map_engine_tensor(plan, r, rest, options);
    } else if (values != m.values.end() && is_optimizer_entry(values->second)) {
      COHORT_CHECK_KIND(kInvalidArgument, options.model_only, "'", r.name,
                        "' is the state of an optimizer whose parameters are numbered, not named (a LibTorch ",
                        "optimizer beside DDP): export the model with --model-only");
    } else {
      add_tensor(plan, {"model", without_prefix(rest, options, r.name)}, r);
    }
  }
  // Every optimizer the engine can run has a param_groups PyTorch asks for: written for Adam and AdamW,
  // refused for the others (value_of names the missing hyper-parameter).
  if (!engine.empty() && !options.model_only) add_adam_state(plan, m, engine);
  std::map<std::string, const Source*> keys;
  for (const Source& s : plan.sources) {
    const auto [at, fresh] = keys.emplace(s.key, &s);
    COHORT_CHECK_KIND(kInvalidArgument, fresh, "two tensors map to '", s.key,
                      "': ", at->second->record ? at->second->record->name : "", " and ",
                      s.record ? s.record->name : "");
  }
  return plan;
}

// The rows of `shape` in each item: whole rows, at most max_item_bytes an item (a 0-d tensor: one).
std::vector<int64_t> rows_per_item(const TensorRecord& r, const ExportOptions& options) {
  if (r.shape.empty()) return {1};
  int64_t row = c10::elementSize(r.dtype);
  for (size_t d = 1; d < r.shape.size(); ++d) row *= r.shape[d];
  const int64_t per_item = row == 0 ? std::max<int64_t>(r.shape[0], 1)
                                    : std::max<int64_t>(options.max_item_bytes / row, 1);
  COHORT_CHECK_KIND(kInvalidArgument, row < (int64_t(1) << 32) - 4096, "a row of '", r.name, "' is ", row,
                    " bytes, over the 4 GiB of an item");
  std::vector<int64_t> rows;
  for (int64_t done = 0; done < r.shape[0] || rows.empty(); done += per_item)
    rows.push_back(std::min(per_item, r.shape[0] - done));
  return rows;
}

}  // namespace

namespace {

// Streams a saved tensor's pieces into items of whole rows (rows_per_item), one chunk each.
DcpEntry write_tensor(const Source& s, ckpt::PieceFiles& files, DistcpWriter& out, const ExportOptions& options,
                      std::vector<char>& buffer) {
  const TensorRecord& r = *s.record;
  DcpEntry e{s.key, true, r.dtype, r.shape, {}};
  const std::vector<int64_t> rows = rows_per_item(r, options);
  int64_t row_bytes = c10::elementSize(r.dtype);
  for (size_t d = 1; d < r.shape.size(); ++d) row_bytes *= r.shape[d];
  size_t next = 0;  // the next item to open
  bool open = false;
  int64_t left = 0, first_row = 0;  // bytes the open item still takes; its first row
  auto close = [&] {
    const ItemRange range = out.end_tensor_item();
    e.chunks.back().offset = range.offset;
    e.chunks.back().length = range.length;
    open = false;
  };
  auto advance = [&] {  // the open item is full: close it, open the next (closing empty ones at once)
    if (open) close();
    for (; next < rows.size(); ++next) {
      std::vector<int64_t> offsets(r.shape.size(), 0), sizes = r.shape;
      if (!r.shape.empty()) {
        offsets[0] = first_row;
        sizes[0] = rows[next];
        first_row += rows[next];
      }
      e.chunks.push_back({offsets, sizes, kDataFile, 0, 0});
      out.begin_tensor_item(r.dtype, sizes);
      open = true;
      left = r.shape.empty() ? c10::elementSize(r.dtype) : rows[next] * row_bytes;
      if (left > 0) {
        ++next;
        return;
      }
      close();
    }
  };
  advance();
  for (const ckpt::Piece& p : ckpt::ordered_pieces(r)) {
    const std::string mismatch = ckpt::stream_piece(files, p, r.name, buffer, [&](const char* data, int64_t n) {
      while (n > 0) {
        COHORT_CHECK_KIND(kIO, open, "the pieces of '", r.name, "' hold more than the ",
                          c10::multiply_integers(r.shape), " elements of its shape ", c10::IntArrayRef(r.shape));
        const int64_t take = std::min(n, left);
        out.tensor_bytes(data, take);
        data += take;
        n -= take;
        left -= take;
        if (left == 0) advance();
      }
    });
    if (!mismatch.empty()) throw Error(mismatch, ErrorKind::kIO);
  }
  COHORT_CHECK_KIND(kIO, !open && next == rows.size(), "the pieces of '", r.name, "' hold less than the ",
                    c10::multiply_integers(r.shape), " elements of its shape ", c10::IntArrayRef(r.shape));
  return e;
}

// A 0-d float32 tensor (an optimizer's step count), as PyTorch's Adam keeps it.
DcpEntry write_step(const Source& s, DistcpWriter& out) {
  out.begin_tensor_item(c10::ScalarType::Float, {});
  const float value = *s.step;
  out.tensor_bytes(reinterpret_cast<const char*>(&value), sizeof(value));
  const ItemRange range = out.end_tensor_item();
  return {s.key, true, c10::ScalarType::Float, {}, {{{}, {}, kDataFile, range.offset, range.length}}};
}

void check_output(const std::string& step_dir, const std::string& out_dir) {
  ckpt::check_output_outside(step_dir, out_dir);
  std::error_code error;
  const bool exists = fs::exists(fs::symlink_status(out_dir, error));
  COHORT_CHECK_KIND(kInvalidArgument,
                    !exists || (fs::is_directory(fs::symlink_status(out_dir)) && fs::is_empty(out_dir, error)),
                    "the output ", out_dir, " exists and is not an empty directory: name a new one");
}

}  // namespace

ExportSummary export_dcp(const std::string& step_dir, const std::string& out_dir, const ExportOptions& options) {
  check_output(step_dir, out_dir);
  const Manifest m = ckpt::read_manifest(step_dir + "/manifest.json");
  const ExportPlan plan = plan_export(m, options);
  std::error_code error;
  const bool made = fs::create_directories(out_dir, error);
  COHORT_CHECK_KIND(kIO, !error, "cannot create ", out_dir, ": ", error.message());
  ExportSummary summary;
  summary.skipped = plan.skipped;
  try {
    std::vector<PlannedEntry> entries;
    DistcpWriter out(out_dir + "/" + kDataFile);
    ckpt::PieceFiles files(step_dir, m);
    std::vector<char> buffer(ckpt::kPieceChunk);
    for (const Source& s : plan.sources) {  // objects first, as PyTorch writes them
      if (s.record != nullptr || s.step) continue;
      const ItemRange range = out.object_item(s.pickle);
      entries.push_back(
          {{s.key, false, c10::ScalarType::Float, {}, {{{}, {}, kDataFile, range.offset, range.length}}}, s.path});
      ++summary.objects;
    }
    for (const Source& s : plan.sources) {
      if (s.record == nullptr && !s.step) continue;
      entries.push_back({s.step ? write_step(s, out) : write_tensor(s, files, out, options, buffer), s.path});
      ++summary.tensors;
    }
    out.commit();
    write_file_safely(out_dir + "/.metadata", metadata_pickle(entries));  // last: its presence says complete
  } catch (...) {
    fs::remove(out_dir + "/" + kDataFile, error);
    if (made) fs::remove(out_dir, error);
    throw;
  }
  return summary;
}

}  // namespace cohort::detail::dcp
