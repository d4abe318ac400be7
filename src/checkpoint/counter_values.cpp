// check_counter_values and check_whole_value (see counter_values.h). Values are JSON doubles: each is
// checked before anything casts it to an integer (a cast of 2^70 is undefined).
#include "checkpoint/counter_values.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "checkpoint/position_values.h"
#include "checkpoint/step_tensors.h"
#include "cohort/error.h"
#include "core/check.h"
#include "core/text.h"

namespace cohort::detail::ckpt {
namespace {

constexpr double kFloatMax = 3.4028234663852886e38;

std::string named(const std::string& entry, const std::string& key, double value) {
  return "'values." + entry + "." + key + "' is " + number_text(value);
}

// `key` against `pattern`, where each '#' stands for one or more digits ("g#.p#.step"). A hand-made
// match: std::regex cost this file 14 s of compile time in each build.
bool matches(const std::string& key, const char* pattern) {
  size_t at = 0;
  for (const char* p = pattern; *p != '\0'; ++p) {
    if (*p != '#') {
      if (at >= key.size() || key[at] != *p) return false;
      ++at;
      continue;
    }
    const size_t start = at;
    while (at < key.size() && std::isdigit(static_cast<unsigned char>(key[at]))) ++at;
    if (at == start) return false;
  }
  return at == key.size();
}

}  // namespace

void check_whole_value(const StateValues& values, const std::string& entry, const std::string& key, double low,
                       double high, const std::string& range) {
  const auto it = values.find(key);
  if (it == values.end()) return;  // a missing key is load_state_values's to name
  const double value = it->second;
  COHORT_CHECK_KIND(kIO, std::isfinite(value) && std::floor(value) == value, named(entry, key, value),
                    ", not a whole number");
  COHORT_CHECK_KIND(kIO, value >= low && value <= high, named(entry, key, value), ", outside ", range);
}

// The ZeRO engine's Adam hyper-parameters, which only cohort-ckpt export reads (PyTorch's AdamW
// would take them as they are).
void check_adam_value(const StateValues& values, const std::string& entry, const std::string& key, double value) {
  const std::string field = key.substr(std::string("zero.adam.").size());
  if (field == "amsgrad" || field == "decoupled")
    return check_whole_value(values, entry, key, 0, 1, "0..1 (false or true)");
  const bool known = field == "lr" || field == "beta1" || field == "beta2" || field == "eps" || field == "weight_decay";
  COHORT_CHECK_KIND(kIO, known, named(entry, key, value), ": the ZeRO engine saves no such number");
  if (field == "lr")
    COHORT_CHECK_KIND(kIO, std::isfinite(value) && value >= 0 && value <= kLearningRateMax, named(entry, key, value),
                      ", not a learning rate (0 to 1e+06: no optimizer trains at a larger one)");
  else if (field == "beta1" || field == "beta2")
    COHORT_CHECK_KIND(kIO, std::isfinite(value) && value >= 0 && value < 1, named(entry, key, value),
                      ", not a beta of Adam (0 to less than 1)");
  else
    COHORT_CHECK_KIND(kIO, std::isfinite(value) && value >= 0 && value <= kFloatMax, named(entry, key, value), ", not ",
                      field == "eps" ? "an epsilon" : "a weight decay", " of Adam (0 to 3.4e+38)");
}

void check_counter_values(const StateValues& values, const std::string& entry) {
  for (const auto& [key, value] : values) {
    // The engine's counters too (hostile pass 7, S1: 1e300 was cast to an integer unchecked and the
    // next save held -9.2e18 as its micro-step count).
    if (matches(key, "g#.p#.step")) {
      check_whole_value(values, entry, key, -1, kTwoTo53 - 1, "-1..9007199254740991 (-1: no state yet)");
    } else if (matches(key, "g#.params") || key == kPipelineParamsKey || matches(key, "zero.group#.step") ||
               key == "zero.global_steps" || key == "zero.skipped_steps" || key == "zero.micro_steps") {
      check_whole_value(values, entry, key, 0, kTwoTo53 - 1, "0..9007199254740991 (2^53 - 1)");
    } else if (matches(key, "g#.lr")) {
      // 1e300 failed the first step with c10's "cannot be converted to type float without overflow"
      // and no fallback (hostile pass 9, S4); 3e38 did too, once Adam divided it by its bias
      // correction, and 1e30 trained to NaN (pass 10, S4). No optimizer trains above kLearningRateMax.
      COHORT_CHECK_KIND(kIO, std::isfinite(value) && value >= 0 && value <= kLearningRateMax, named(entry, key, value),
                        ", not a learning rate (0 to 1e+06: no optimizer trains at a larger one)");
    } else if (key.rfind("zero.adam.", 0) == 0) {
      check_adam_value(values, entry, key, value);
    } else if (key == "zero.loss_scaler.scale") {  // fp16's loss is scaled in float: 4e38 is inf there
      COHORT_CHECK_KIND(kIO, std::isfinite(value) && value > 0 && value <= kFloatMax, named(entry, key, value),
                        ", not a loss scale (more than 0, at most 3.4028234663852886e+38: a float's largest)");
    } else if (key == "zero.fp16") {
      check_whole_value(values, entry, key, 0, 1, "0..1 (false or true)");
    } else if (key == "zero.loss_scaler.iter") {  // hostile pass 8, S1: cast unchecked as the steps were
      check_whole_value(values, entry, key, 0, kTwoTo53 - 1, "0..9007199254740991 (2^53 - 1)");
    } else if (key == "zero.loss_scaler.last_overflow_iter") {
      check_whole_value(values, entry, key, -1, kTwoTo53 - 1, "-1..9007199254740991 (-1: none yet)");
    } else if (key == "zero.loss_scaler.hysteresis_left") {
      check_whole_value(values, entry, key, 0, 2147483647, "0..2147483647");
    } else if (key == "pipeline.stages") {  // hostile pass 9, S5: 2^31 - 1 looped the resume forever
      check_whole_value(values, entry, key, 1, 1048576, "1..1048576");
    } else if (matches(key, "pipeline.bound#")) {
      check_whole_value(values, entry, key, 0, kTwoTo53 - 1, "0..9007199254740991 (2^53 - 1)");
    } else if (key.rfind("zero.", 0) == 0 && values.count("zero.global_steps")) {  // hostile pass 8, minor 12
      COHORT_CHECK_KIND(kIO, false, named(entry, key, value), ": the ZeRO engine saves no such number");
    }
  }
}

// Hostile pass 8, M1: each counter was in range, but a global_steps of 2 at step 8 verified OK and
// resumed on another learning-rate schedule (WarmupLR reads global_steps - skipped_steps).
void check_counters_agree(const StateValues& values, const std::string& entry, int64_t step, bool trainer_step) {
  const auto global = values.find("zero.global_steps");
  if (global == values.end()) return;
  auto value_of = [&](const std::string& key) {
    const auto it = values.find(key);
    return it == values.end() ? 0.0 : it->second;
  };
  const double skipped = value_of("zero.skipped_steps");
  const double micro = values.count("zero.micro_steps") ? value_of("zero.micro_steps") : global->second;
  auto both = [&](const std::string& key, double value) {
    return named(entry, "zero.global_steps", global->second) + " and '" + key + "' " + number_text(value);
  };
  COHORT_CHECK_KIND(kIO, skipped <= global->second, both("zero.skipped_steps", skipped),
                    ": more steps skipped than taken");
  COHORT_CHECK_KIND(kIO, skipped == 0 || value_of("zero.fp16") != 0 || !values.count("zero.fp16"),
                    named(entry, "zero.skipped_steps", skipped),
                    " in a run without fp16 ('zero.fp16' 0): only fp16's loss scaling skips a step");
  COHORT_CHECK_KIND(kIO, global->second <= micro, both("zero.micro_steps", micro),
                    ": more optimizer steps than micro-batches");
  for (const auto& [key, value] : values)
    if (matches(key, "zero.group#.step"))
      COHORT_CHECK_KIND(kIO, value <= global->second - skipped, both(key, value), " (skipped ", number_text(skipped),
                        "): a group stepped more often than the engine");
  COHORT_CHECK_KIND(kIO, !trainer_step || global->second == static_cast<double>(step),
                    named(entry, "zero.global_steps", global->second), " at the Trainer's step ", step,
                    ": the engine steps once per optimizer step");
}

namespace {

bool counts_steps(const std::string& field) { return field == "exp_avg" || field == "sum" || field == "square_avg"; }

void require(const StateValues& values, const std::string& entry, const std::string& key, const std::string& why) {
  COHORT_CHECK_KIND(kIO, values.count(key), "'values.", excerpt(entry), "' has no '", key, "': ", why);
}

// Hostile pass 9, S1: a deleted number read as its default (a group's Adam step as 0), verify said OK.
void check_engine_counters(const Manifest& m, const StateValues& values, const std::string& entry) {
  for (const char* key :
       {"zero.global_steps", "zero.skipped_steps", "zero.micro_steps", "zero.loss_scaler.scale",
        "zero.loss_scaler.iter", "zero.loss_scaler.last_overflow_iter", "zero.loss_scaler.hysteresis_left"})
    require(values, entry, key, "the ZeRO engine saves it with every checkpoint");
  const double taken = values.at("zero.global_steps") - values.at("zero.skipped_steps");
  for (const auto& [unit, field] : state_fields_of(m, entry)) {
    if (!matches(unit, "group#")) continue;
    const std::string key = "zero." + unit + ".step";
    require(values, entry, key, "the ZeRO engine saves a step count for each group");
    COHORT_CHECK_KIND(kIO, !counts_steps(field) || values.at(key) == taken, named(entry, key, values.at(key)),
                      ", not the engine's ", number_text(taken), " steps taken (global_steps - skipped_steps) for a ",
                      "group with '", field, "'");
  }
}

// The other way round from a state tensor's step (hostile pass 12, S-1: Adam's moments deleted, the
// step kept, resumed with zero moments): a parameter with a step saved its state's tensors with it.
void check_states_present(const std::vector<std::pair<std::string, std::string>>& state_fields,
                          const StateValues& values, const std::string& entry) {
  std::set<std::string> stateful;
  for (const auto& [param, field] : state_fields)
    if (matches(param, "g#.p#")) stateful.insert(param);
  for (const auto& [key, value] : values) {
    if (!matches(key, "g#.p#.step") || value < 0) continue;  // -1: no state, no tensors
    const std::string param = key.substr(0, key.size() - 5);
    COHORT_CHECK_KIND(kIO, stateful.count(param), named(entry, key, value), ", but there is no tensor '",
                      excerpt(entry), "/", param, ".*': a parameter's optimizer state is saved with its step");
  }
}

std::string field_list(const std::set<std::string>& fields) {
  std::string out;
  for (const auto& field : fields) out += (out.empty() ? "" : ", ") + field;
  return "{" + out + "}";
}

// Hostile pass 13, S-2 and S-3: part of a parameter's state deleted (resealed) resumed with zeros in
// its place (RMSprop's square_avg: NaN weights). An optimizer makes a parameter's fields together:
// Adam's two moments (AMSGrad's max beside them), RMSprop's square_avg under its grad_avg; and the
// parameters of one group with state hold the same fields (one set of options makes them).
void check_field_sets(const std::vector<std::pair<std::string, std::string>>& state_fields, const std::string& entry) {
  static const std::pair<const char*, const char*> kNeeds[] = {
      {"exp_avg", "exp_avg_sq"}, {"exp_avg_sq", "exp_avg"}, {"max_exp_avg_sq", "exp_avg"}, {"grad_avg", "square_avg"}};
  std::map<std::string, std::set<std::string>> fields;
  for (const auto& [unit, field] : state_fields)
    if (field != "step") fields[unit].insert(field);
  std::map<std::string, std::string> first_of_group;  // "g0" -> its first parameter with state
  for (const auto& [unit, set] : fields) {
    for (const auto& [field, other] : kNeeds)
      COHORT_CHECK_KIND(kIO, !set.count(field) || set.count(other), "tensor '", excerpt(entry), "/", excerpt(unit), ".",
                        field, "' has no '", other, "' beside it: its optimizer saves them together");
    if (!matches(unit, "g#.p#")) continue;  // a pipeline's parameters: their groups are not saved
    const auto [first, inserted] = first_of_group.emplace(unit.substr(0, unit.find('.')), unit);
    COHORT_CHECK_KIND(kIO, inserted || fields.at(first->second) == set, "tensors '", excerpt(entry), "/", unit,
                      ".*' are ", field_list(set), ", those of '", first->second, "' ",
                      field_list(fields.at(first->second)), ": one group's parameters hold the same state");
  }
}

// Hostile pass 12, M-4: a parameter's whole state deleted (its tensors and its step, resealed) read as
// "no state yet" and Adam restarted. From format version 4 an optimizer's entry counts each group's
// parameters ('g0.params') and gives every one a step count, -1 before it has state.
void check_parameter_counts(const Manifest& m, const StateValues& values, const std::string& entry) {
  std::map<std::string, double> sizes;   // "g0" -> its 'g0.params'
  std::map<std::string, int64_t> steps;  // "g0" -> how many 'g0.p#.step' it holds
  std::string rate;                      // a 'g#.lr': this is an optimizer's entry
  for (const auto& [key, value] : values) {
    const std::string group = key.substr(0, key.find('.'));
    if (matches(key, "g#.params")) sizes[group] = value;
    if (matches(key, "g#.lr") && rate.empty()) rate = key;
  }
  if (sizes.empty()) {
    COHORT_CHECK_KIND(kIO, m.format_version < 4 || rate.empty() || values.count(kPipelineParamsKey), "'values.",
                      excerpt(entry), "' has '", rate, "' but no count of its parameters ('",
                      rate.substr(0, rate.find('.')), ".params', a pipeline's '", kPipelineParamsKey,
                      "'): from format version 4 on, an optimizer's entry counts them");
    // Hostile pass 13, S-5: a deleted rate resumed at the program's own.
    COHORT_CHECK_KIND(kIO, !values.count(kPipelineParamsKey) || values.count("g0.lr"), "'values.", excerpt(entry),
                      "' has '", kPipelineParamsKey, "' but no 'g0.lr': the optimizer saves its learning rate");
    return;
  }
  size_t numbered = 0;  // the groups are g0, g1, ... each with its rate (hostile pass 13, S-5)
  while (sizes.count("g" + std::to_string(numbered))) ++numbered;
  COHORT_CHECK_KIND(kIO, numbered == sizes.size(), "'values.", excerpt(entry), "' has '", sizes.rbegin()->first,
                    ".params' but no 'g", numbered, ".params': an optimizer's groups are numbered from g0");
  for (const auto& [group, size] : sizes)
    COHORT_CHECK_KIND(kIO, values.count(group + ".lr"), "'values.", excerpt(entry), "' has '", group,
                      ".params' but no '", group, ".lr': the optimizer saves each group's learning rate");
  for (const auto& [key, value] : values) {
    const std::string group = key.substr(0, key.find('.'));
    if (!matches(key, "g#.p#.step") && !matches(key, "g#.lr")) continue;
    const auto size = sizes.find(group);
    COHORT_CHECK_KIND(kIO, size != sizes.end(), named(entry, key, value), ", but there is no '", group,
                      ".params': every group of the optimizer counts its parameters");
    if (!matches(key, "g#.p#.step")) continue;
    const std::string digits = key.substr(group.size() + 2, key.size() - group.size() - 2 - 5);
    const double index = digits.size() > 15 ? kTwoTo53 : std::stod(digits);  // stod throws past a double
    COHORT_CHECK_KIND(kIO, index < size->second, named(entry, key, value), ", but '", group, ".params' is ",
                      number_text(size->second), ": there is no parameter ", number_text(index));
    ++steps[group];
  }
  for (const auto& [group, size] : sizes) {
    if (steps[group] == size) continue;
    int64_t missing = 0;
    while (values.count(group + ".p" + std::to_string(missing) + ".step")) ++missing;
    COHORT_CHECK_KIND(kIO, false, "'values.", excerpt(entry), "' has no '", group, ".p", missing, ".step', but '",
                      group, ".params' is ", number_text(size),
                      ": every parameter of a group has a step count (-1: no state yet)");
  }
}

}  // namespace

std::vector<std::pair<std::string, std::string>> state_fields_of(const Manifest& m, const std::string& entry) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::string prefix = entry + "/";
  for (const TensorRecord& r : m.tensors) {
    if (r.name.rfind(prefix, 0) != 0) continue;
    const std::string rest = r.name.substr(prefix.size());
    const size_t dot = rest.rfind('.');
    if (dot != std::string::npos) out.emplace_back(rest.substr(0, dot), rest.substr(dot + 1));
  }
  return out;
}

void check_entry_counters(const Manifest& m, const std::string& entry) {
  check_step_tensors_present(m, entry);
  const auto found = m.values.find(entry);
  if (found == m.values.end()) return;
  const StateValues& values = found->second;
  check_trainer_position(m, entry);
  check_counters_agree(values, entry, m.step, m.user.count(kTrainerStepBatchKey) > 0);
  // Any of the engine's numbers makes these the engine's: each is required then (a deleted
  // global_steps read as 0 made every later checkpoint of the job BAD; hostile pass 10, S3).
  // Its zero_stage alone too (hostile pass 11, S-c: every number deleted restarted Adam at step 0).
  const bool engine = values.count("zero_stage") > 0 || has_engine_numbers(values);
  if (engine) {
    check_engine_counters(m, values, entry);
    return;
  }
  const auto state_fields = state_fields_of(m, entry);
  for (const auto& [param, field] : state_fields) {
    if (!matches(param, "g#.p#")) continue;
    require(values, entry, param + ".step", "a parameter saved with optimizer state ('" + field + "') has one");
    // Adam's moments and RMSprop's average exist after the first step (hostile pass 10, M5: 0 restarted
    // the bias correction); Adagrad's sum is made with the optimizer, at step 0.
    const double steps = values.at(param + ".step");
    COHORT_CHECK_KIND(kIO, steps >= 0, named(entry, param + ".step", steps), ", but the parameter has '", field,
                      "': -1 says it has no state");
    COHORT_CHECK_KIND(kIO, (field != "exp_avg" && field != "square_avg") || steps >= 1,
                      named(entry, param + ".step", steps), ", but the parameter has '", field,
                      "', which its optimizer makes at its first step");
  }
  check_states_present(state_fields, values, entry);
  check_field_sets(state_fields, entry);
  check_parameter_counts(m, values, entry);
  if (!m.user.count(kTrainerStepBatchKey)) return;  // a step of the user's own numbering
  for (const auto& [key, value] : values)           // the Trainer steps its optimizer once per step at most
    COHORT_CHECK_KIND(kIO, !matches(key, "g#.p#.step") || value <= static_cast<double>(m.step),
                      named(entry, key, value), ", more optimizer steps than the Trainer's ", m.step);
}

}  // namespace cohort::detail::ckpt
