#include "checkpoint/dcp/export_plan.h"

#include <algorithm>
#include <functional>
#include <map>
#include <regex>

#include "checkpoint/dcp/pickle_writer.h"
#include "cohort/error.h"
#include "core/check.h"

namespace cohort::detail::dcp {

namespace {
// A name of its own: the checkpoint layer compiles in unity batches, which share anonymous namespaces.
namespace export_planning {

using ckpt::Manifest;
using ckpt::TensorRecord;

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

}  // namespace export_planning
}  // namespace

ExportPlan plan_export(const ckpt::Manifest& m, const ExportOptions& options) {
  using namespace export_planning;
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

}  // namespace cohort::detail::dcp
