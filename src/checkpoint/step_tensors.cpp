// check_step_tensor, check_step_tensors_present (see step_tensors.h).
#include "checkpoint/step_tensors.h"

#include <algorithm>
#include <map>
#include <set>
#include <string_view>
#include <vector>

#include "checkpoint/counter_values.h"
#include "cohort/error.h"
#include "core/check.h"
#include "core/text.h"

namespace cohort::detail::ckpt {
namespace {

constexpr std::string_view kStepSuffix = ".step";

bool ends_with(const std::string& text, std::string_view tail) {
  return text.size() >= tail.size() && text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

// The state fields `param` of `entry` saves as tensors (state_fields_of's, for one parameter).
std::set<std::string> fields_of(const Manifest& m, const std::string& entry, const std::string& param) {
  std::set<std::string> out;
  for (const auto& [unit, field] : state_fields_of(m, entry))
    if (unit == param) out.insert(field);
  return out;
}

bool made_at_first_step(const std::set<std::string>& fields) {
  return fields.count("exp_avg") > 0 || fields.count("square_avg") > 0;
}

}  // namespace

bool is_step_tensor(const TensorRecord& r) {
  const bool one_element = r.shape == std::vector<int64_t>{1} || (r.shape.empty() && r.kind != StateKind::kSharded);
  return r.dtype == c10::ScalarType::Long && one_element && ends_with(r.name, kStepSuffix) &&
         r.name.find('/') != std::string::npos;
}

void check_step_tensor(const Manifest& m, const TensorRecord& r, int64_t value) {
  const std::string entry = r.name.substr(0, r.name.find('/'));
  const std::string param = r.name.substr(entry.size() + 1, r.name.size() - entry.size() - 1 - kStepSuffix.size());
  const auto fields = fields_of(m, entry, param);
  // A parameter without state has the step -1 alone (format version 4 gives every parameter a step): a
  // step with no state beside it read as zero moments (hostile pass 13, S-2).
  if (fields.size() <= 1) {  // "step" alone
    COHORT_CHECK_KIND(kIO, value == -1, "tensor '", excerpt(r.name), "' is ", value, ", but '", excerpt(param),
                      "' has no state tensor beside it: a step of 0 or more is saved with its state (-1: none yet)");
    return;
  }
  const int64_t low = made_at_first_step(fields) ? 1 : 0;
  const bool trainer = m.user.count(kTrainerStepBatchKey) > 0;
  const int64_t high = trainer ? m.step : static_cast<int64_t>(kTwoTo53) - 1;
  COHORT_CHECK_KIND(
      kIO, value >= low && value <= high, "tensor '", excerpt(r.name), "' is ", value, ", outside ", low, "..", high,
      " (",
      low == 1 ? "its parameter's optimizer state is made at its first step" : "its parameter has optimizer state",
      trainer ? ", and the Trainer took " + std::to_string(m.step) : std::string(), ")");
}

void check_step_tensors_present(const Manifest& m, const std::string& entry) {
  const std::string prefix = entry + "/";
  const auto steps = std::count_if(m.tensors.begin(), m.tensors.end(), [&](const TensorRecord& r) {
    return r.name.rfind(prefix, 0) == 0 && is_step_tensor(r);
  });
  if (steps > 0) {
    std::map<std::string, std::set<std::string>> params;
    for (const auto& [param, field] : state_fields_of(m, entry)) params[param].insert(field);
    for (const auto& [param, fields] : params) {
      if (fields.count("step") || !made_at_first_step(fields)) continue;
      COHORT_CHECK_KIND(kIO, false, "'", excerpt(entry), "' has no tensor '", excerpt(param),
                        ".step': its parameters' step counts are tensors, and '", excerpt(param),
                        "' has optimizer state made at its first step");
    }
  }
  // Hostile pass 12, M-4: the pipeline's optimizer state of a parameter deleted whole (resealed) read
  // as "saved before its first step". From format version 4 its entry counts them, a step tensor each.
  const auto values = m.values.find(entry);
  if (values == m.values.end() || !values->second.count(kPipelineParamsKey)) return;
  const double expected = values->second.at(kPipelineParamsKey);
  COHORT_CHECK_KIND(kIO, static_cast<double>(steps) == expected, "'values.", excerpt(entry), ".", kPipelineParamsKey,
                    "' is ", number_text(expected), ", but '", excerpt(entry), "' has ", steps,
                    " step tensors ('<parameter>.step'): each trainable parameter of the pipeline has one "
                    "(-1: no state yet)");
}

}  // namespace cohort::detail::ckpt
