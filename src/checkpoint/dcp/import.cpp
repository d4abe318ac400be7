#include "checkpoint/dcp/import.h"

#include <filesystem>
#include <map>
#include <set>

#include "checkpoint/dcp/dcp_files.h"
#include "checkpoint/dcp/metadata.h"
#include "cohort/checkpoint.h"
#include "cohort/error.h"
#include "cohort/stateful.h"
#include "core/check.h"

namespace fs = std::filesystem;

namespace cohort::detail::dcp {

namespace {

// A model tensor and what the optimizer keeps for it, by the DCP keys that hold them.
struct Parameter {
  std::string fqn;
  const DcpEntry* weight = nullptr;
  std::map<std::string, const DcpEntry*> state;  // exp_avg, exp_avg_sq, max_exp_avg_sq, momentum_buffer
  const DcpEntry* step = nullptr;
};

struct ImportPlan {
  std::map<std::string, Parameter> tensors;      // by fqn
  std::map<std::string, const DcpEntry*> group;  // param_groups.0's objects by name
  std::set<std::string> parameters;              // param_groups.0's params: the rest are buffers
};

const std::set<std::string> kStateFields = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer", "step"};

ImportPlan plan_import(const DcpMetadata& md, const std::string& dir) {
  ImportPlan plan;
  for (const DcpEntry& e : md.entries) {
    const std::string& key = e.fqn;
    if (key.rfind("model.", 0) == 0 && e.tensor) {
      plan.tensors[key.substr(6)].weight = &e;
      continue;
    }
    if (key.rfind("optimizer.state.", 0) == 0) {
      const std::string rest = key.substr(16);
      const auto dot = rest.rfind('.');
      const std::string field = dot == std::string::npos ? "" : rest.substr(dot + 1);
      COHORT_CHECK_KIND(kInvalidArgument, kStateFields.count(field) && e.tensor, dir, ": '", key,
                        "' is no optimizer state cohort's Adam, AdamW or SGD keeps");
      Parameter& p = plan.tensors[rest.substr(0, dot)];
      if (field == "step") p.step = &e;
      else p.state[field] = &e;
      continue;
    }
    if (key.rfind("optimizer.param_groups.0.", 0) == 0) {
      plan.group[key.substr(25)] = &e;
      continue;
    }
    if (key.rfind("optimizer.param_groups.", 0) == 0) {
      const std::string group = key.substr(23, key.find('.', 23) - 23);
      const bool index = !group.empty() && group.find_first_not_of("0123456789") == std::string::npos;
      COHORT_CHECK_KIND(kInvalidArgument, !index, dir, ": '", key,
                        "' is a second parameter group; cohort's engine steps its parameters as one");
      COHORT_CHECK_KIND(kInvalidArgument, false, dir, ": '", key, "' is of a flattened optimizer state dict ",
                        "(StateDictOptions(flatten_optimizer_state_dict=True)): save it without flattening");
    }
    COHORT_CHECK_KIND(kInvalidArgument, false, dir, ": '", key,
                      "' is not the model's or its optimizer's (a state dict of get_state_dict's {\"model\": ..., ",
                      "\"optimizer\": ...}, not flattened)");
  }
  for (auto& [fqn, p] : plan.tensors) {
    p.fqn = fqn;
    COHORT_CHECK_KIND(kInvalidArgument, p.weight != nullptr, dir, ": the optimizer keeps ", "state for '", fqn,
                      "', which the model ('model.", fqn, "') does not have");
  }
  return plan;
}

double number_of(const PickleValue& v, const std::string& what) {
  COHORT_CHECK_KIND(kIO, v.kind == PickleKind::kFloat || v.kind == PickleKind::kInt || v.kind == PickleKind::kBool,
                    what, " is ", describe(v), ", not a number");
  return v.kind == PickleKind::kFloat ? v.real : double(v.integer);
}

// param_groups[0]['params']: the names of the parameters the optimizer steps, each the model's.
void read_parameters(ImportPlan& plan, DcpFiles& files, const std::string& dir) {
  const auto it = plan.group.find("params");
  if (it == plan.group.end()) return;
  const PickleValue params = files.object(*it->second);
  const std::string what = dir + ": optimizer.param_groups.0.params";
  COHORT_CHECK_KIND(kIO, params.kind == PickleKind::kList, what, " is ", describe(params), ", not a list");
  for (const PickleRef& name : params.items) {
    COHORT_CHECK_KIND(kIO, name->kind == PickleKind::kString, what, " holds ", describe(*name),
                      ", not a parameter's name (a state dict of get_state_dict names them)");
    const auto tensor = plan.tensors.find(name->text);
    COHORT_CHECK_KIND(kInvalidArgument, tensor != plan.tensors.end(), what, " names '", name->text,
                      "', which the model ('model.", name->text, "') does not have");
    plan.parameters.insert(name->text);
  }
}

// Adam's and AdamW's hyper-parameters as the ZeRO engine saves them (inner_optimizer.h).
void adam_values(const ImportPlan& plan, DcpFiles& files, const std::string& dir, StateValues& values) {
  auto object = [&](const std::string& name) {
    const auto it = plan.group.find(name);
    COHORT_CHECK_KIND(kInvalidArgument, it != plan.group.end(), dir, ": there is no 'optimizer.param_groups.0.", name,
                      "' beside Adam's moments");
    return files.object(*it->second);
  };
  const std::string where = dir + ": optimizer.param_groups.0.";
  values["zero.adam.lr"] = number_of(object("lr"), where + "lr");
  const PickleValue betas = object("betas");
  COHORT_CHECK_KIND(kIO, betas.kind == PickleKind::kTuple && betas.items.size() == 2, where, "betas is ",
                    describe(betas), ", not a pair");
  values["zero.adam.beta1"] = number_of(*betas.items[0], where + "betas[0]");
  values["zero.adam.beta2"] = number_of(*betas.items[1], where + "betas[1]");
  values["zero.adam.eps"] = number_of(object("eps"), where + "eps");
  values["zero.adam.weight_decay"] = number_of(object("weight_decay"), where + "weight_decay");
  values["zero.adam.amsgrad"] = number_of(object("amsgrad"), where + "amsgrad") != 0 ? 1 : 0;
  // Adam's own state dict in 2.11 says decoupled_weight_decay; AdamW's always decouples.
  const bool decoupled = plan.group.count("decoupled_weight_decay") &&
                         number_of(object("decoupled_weight_decay"), where + "decoupled_weight_decay") != 0;
  values["zero.adam.decoupled"] = decoupled ? 1 : 0;
}

}  // namespace

namespace {

// The imported state as a ZeRO engine's Stateful lists it: each parameter a part (its master and
// moments, read from the DCP files when the save asks for it), so memory holds one at a time.
class ImportedEngine : public Stateful {
 public:
  ImportedEngine(const ImportPlan& plan, DcpFiles& files, const ImportOptions& options, StateValues values)
      : files_(files), values_(std::move(values)) {
    for (const auto& [fqn, p] : plan.tensors) {
      // The optimizer's params name the parameters; without an optimizer every model tensor is one.
      const bool parameter = plan.parameters.empty() || plan.parameters.count(fqn);
      if (!parameter) {
        buffers_.push_back({"module." + options.prefix + fqn, p.weight});
        continue;
      }
      std::vector<Field> fields = {{options.prefix + fqn + ".master", p.weight}};
      for (const auto& [name, entry] : p.state) fields.push_back({options.prefix + fqn + "." + name, entry});
      parts_.push_back(std::move(fields));
    }
  }
  int64_t parameters() const { return static_cast<int64_t>(parts_.size()); }
  int64_t buffers() const { return static_cast<int64_t>(buffers_.size()); }

  std::vector<StateTensor> state_tensors() override {
    std::vector<StateTensor> out;
    for (size_t part = 0; part < parts_.size(); ++part)
      for (const Field& f : parts_[part])
        out.push_back(
            sharded(f, torch::empty({numel(f)}, torch::TensorOptions().dtype(torch::kFloat).device(torch::kMeta)),
                    int64_t(part)));
    for (const Field& f : buffers_) {
      const torch::Tensor whole = files_.tensor(*f.entry, f.entry->dtype);
      out.push_back({f.name, whole, StateKind::kReplicated});
    }
    return out;
  }
  std::vector<StateTensor> lend_part(int64_t part) override {
    std::vector<StateTensor> out;
    for (const Field& f : parts_.at(size_t(part)))
      out.push_back(sharded(f, files_.tensor(*f.entry, torch::kFloat).reshape({-1}), part));  // fp32, as masters are
    return out;
  }
  StateValues state_values() const override { return values_; }

 private:
  struct Field {
    std::string name;
    const DcpEntry* entry;
  };
  static int64_t numel(const Field& f) {
    int64_t n = 1;
    for (int64_t s : f.entry->size) n *= s;
    return n;
  }
  static StateTensor sharded(const Field& f, torch::Tensor t, int64_t part) {
    StateTensor s{f.name, std::move(t), StateKind::kSharded, numel(f), 0, f.entry->size, part};
    return s;
  }

  DcpFiles& files_;
  StateValues values_;
  std::vector<std::vector<Field>> parts_;
  std::vector<Field> buffers_;
};

// The optimizer's step count: every parameter's the same (one engine steps them together).
int64_t step_of(const ImportPlan& plan, DcpFiles& files, const std::string& dir) {
  int64_t step = -1;
  std::string first;
  for (const auto& [fqn, p] : plan.tensors) {
    if (p.step == nullptr) continue;
    const torch::Tensor t = files.tensor(*p.step, torch::kDouble);
    COHORT_CHECK_KIND(kIO, t.numel() == 1, dir, ": optimizer.state.", fqn, ".step is a tensor of shape ", t.sizes(),
                      ", not a step count");
    const double value = t.item<double>();
    COHORT_CHECK_KIND(kIO, value >= 0 && value <= 9007199254740991.0 && value == std::floor(value), dir,
                      ": optimizer.state.", fqn, ".step is ", value, ", not a step count");
    if (step >= 0)
      COHORT_CHECK_KIND(kInvalidArgument, int64_t(value) == step, dir, ": optimizer.state.", fqn, ".step is ",
                        int64_t(value), " but optimizer.state.", first, ".step is ", step,
                        ": cohort's engine steps every parameter together");
    step = int64_t(value);
    first = fqn;
  }
  return std::max<int64_t>(step, 0);
}

}  // namespace

ImportSummary import_dcp(const std::string& dcp_dir, const std::string& out_dir, const ImportOptions& options) {
  COHORT_CHECK_KIND(kInvalidArgument, options.zero_stage >= 1 && options.zero_stage <= 3, "--zero-stage ",
                    options.zero_stage, " is not a ZeRO stage (1, 2 or 3)");
  std::error_code error;
  const bool exists = fs::exists(fs::symlink_status(out_dir, error));
  COHORT_CHECK_KIND(kInvalidArgument,
                    !exists || (fs::is_directory(fs::symlink_status(out_dir)) && fs::is_empty(out_dir, error)),
                    "the output ", out_dir, " exists and is not an empty directory: name a new one");
  const DcpMetadata md = read_dcp_metadata(dcp_dir);
  ImportPlan plan = plan_import(md, dcp_dir);
  DcpFiles files(dcp_dir);
  read_parameters(plan, files, dcp_dir);
  const int64_t step = step_of(plan, files, dcp_dir);
  StateValues values = {{"zero_stage", double(options.zero_stage)},
                        {"zero.global_steps", double(step)},
                        {"zero.skipped_steps", 0.0},
                        {"zero.micro_steps", double(step)},
                        {"zero.fp16", 0.0},
                        // a run without fp16's loss scaling saves these
                        {"zero.loss_scaler.scale", 1.0},
                        {"zero.loss_scaler.iter", 0.0},
                        {"zero.loss_scaler.last_overflow_iter", -1.0},
                        {"zero.loss_scaler.hysteresis_left", 2.0}};
  const bool adam = std::any_of(plan.tensors.begin(), plan.tensors.end(),
                                [](const auto& t) { return t.second.state.count("exp_avg"); });
  if (adam) adam_values(plan, files, dcp_dir, values);
  auto engine = std::make_shared<ImportedEngine>(plan, files, options, std::move(values));
  CheckpointState state;
  state.add(options.entry, engine).rng(false).set_step(step);
  ImportSummary summary{step, engine->parameters(), engine->buffers(), ""};
  try {
    summary.step_dir = save_checkpoint(out_dir, state, SaveOptions().keep_last(0));
  } catch (...) {  // an item that did not read: the save had made the directory and its lock
    fs::remove(fs::path(out_dir) / ".lock", error);
    if (!exists) fs::remove(out_dir, error);  // only when empty
    throw;
  }
  return summary;
}

}  // namespace cohort::detail::dcp
