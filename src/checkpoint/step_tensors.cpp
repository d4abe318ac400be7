// check_step_tensor, check_step_tensors_present (see step_tensors.h).
#include "checkpoint/step_tensors.h"

#include <map>
#include <set>
#include <vector>

#include "checkpoint/counter_values.h"
#include "cohort/error.h"
#include "core/check.h"
#include "core/text.h"

namespace cohort::detail::ckpt {
namespace {

constexpr const char* kStepSuffix = ".step";

bool ends_with(const std::string& text, const std::string& tail) {
  return text.size() >= tail.size() && text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

// The state fields each parameter of `entry` saves as tensors ("1.bias" -> {"exp_avg", "step"}).
std::map<std::string, std::set<std::string>> fields_by_param(const Manifest& m, const std::string& entry) {
  std::map<std::string, std::set<std::string>> out;
  const std::string prefix = entry + "/";
  for (const TensorRecord& r : m.tensors) {
    if (r.name.rfind(prefix, 0) != 0) continue;
    const std::string rest = r.name.substr(prefix.size());
    const size_t dot = rest.rfind('.');
    if (dot != std::string::npos && dot > 0) out[rest.substr(0, dot)].insert(rest.substr(dot + 1));
  }
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
  const std::string param = r.name.substr(entry.size() + 1, r.name.size() - entry.size() - 1 - 5);
  const auto fields = fields_by_param(m, entry)[param];
  const int64_t low = made_at_first_step(fields) ? 1 : 0;
  const bool trainer = m.user.count(kTrainerStepBatchKey) > 0;
  const int64_t high = trainer ? m.step : static_cast<int64_t>(kTwoTo53) - 1;
  COHORT_CHECK_KIND(
      kIO, value >= low && value <= high, "tensor '", excerpt(r.name), "' is ", value, ", outside ", low, "..", high,
      " (", low == 1 ? "its parameter's optimizer state is made at its first step" : "a parameter's optimizer steps",
      trainer ? ", and the Trainer took " + std::to_string(m.step) : std::string(), ")");
}

void check_step_tensors_present(const Manifest& m, const std::string& entry) {
  const auto params = fields_by_param(m, entry);
  bool saves_steps = false;
  for (const TensorRecord& r : m.tensors)
    if (r.name.rfind(entry + "/", 0) == 0 && is_step_tensor(r)) saves_steps = true;
  if (!saves_steps) return;
  for (const auto& [param, fields] : params) {
    if (fields.count("step") || !made_at_first_step(fields)) continue;
    COHORT_CHECK_KIND(kIO, false, "'", excerpt(entry), "' has no tensor '", excerpt(param),
                      ".step': its parameters' step counts are tensors, and '", excerpt(param),
                      "' has optimizer state made at its first step");
  }
}

}  // namespace cohort::detail::ckpt
