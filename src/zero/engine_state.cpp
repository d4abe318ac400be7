// What the ZeRO engine holds: the memory report, the full parameters on demand, and its checkpoint
// state (cohort::Stateful): master weight and optimizer state shards, the model's buffers and frozen
// parameters, counters and the loss scaler.
#include <torch/torch.h>

#include <algorithm>
#include <map>

#include "core/check.h"
#include "zero/engine_impl.h"
#include "zero/gathered_storage.h"
#include "zero/inner_optimizer.h"

namespace cohort::detail {
namespace {

int64_t bytes_of(const torch::Tensor& t) { return t.defined() ? t.numel() * int64_t(t.element_size()) : 0; }

}  // namespace

MemoryReport ZeroEngineImpl::memory_report() const {
  MemoryReport report;
  for (const auto& shape : shapes_) report.num_parameters += c10::multiply_integers(shape);
  for (const auto& group : groups_) {
    report.parameter_bytes += bytes_of(group.flat);
    report.gradient_bytes += bytes_of(group.flat_grad) + bytes_of(group.shard_grad);
    if (master_is_copy(group)) report.optimizer_bytes += bytes_of(group.master);
    for (const auto& [name, state] : state_tensors_of(*optimizer_, group.master))
      report.optimizer_bytes += bytes_of(state);
    report.buffer_bytes += storage_bytes(group.gathered) + bytes_of(group.reduce_input) + bytes_of(group.reduce_output);
  }
  if (stage_ >= 2)  // gradients autograd produced that are not reduced yet (inside backward)
    for (const auto& p : params_) report.gradient_bytes += bytes_of(p.grad());
  report.cached_bytes = buffers_.idle_bytes();
  return report;
}

std::vector<std::pair<std::string, torch::Tensor>> ZeroEngineImpl::full_parameters() {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for_each_full_parameter(
      [&](const std::string& name, const torch::Tensor& value) { out.emplace_back(name, value.clone()); });
  return out;
}

// In the module's order (named_parameters()), whatever order the groups have (stage 3 puts the root's
// group first): a group is gathered at its first parameter and dropped after its last, the same
// sequence of gathers on every rank.
void ZeroEngineImpl::for_each_full_parameter(const ParameterVisitor& visit) {
  std::vector<std::pair<size_t, size_t>> place(params_.size());  // parameter -> (group, index in it)
  std::vector<size_t> last(groups_.size(), 0);
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t k = 0; k < groups_[g].layout.params.size(); ++k) {
      const auto index = size_t(groups_[g].layout.params[k]);
      place[index] = {g, k};
      last[g] = std::max(last[g], index);
    }
  std::map<size_t, torch::Tensor> gathered;
  for (size_t index = 0; index < params_.size(); ++index) {
    const auto [g, k] = place[index];
    auto found = gathered.find(g);
    if (found == gathered.end()) {
      const auto& group = groups_[g];
      torch::Tensor whole = group.master;
      if (stage_ != 0 && world_ > 1) {
        whole = torch::empty({group.layout.padded}, group.master.options());
        comm_->allgather_async(whole, group.master.contiguous()).wait();
      }
      found = gathered.emplace(g, whole.to(torch::kCPU)).first;
    }
    const auto& shape = shapes_[index];
    visit(names_[index],
          found->second.narrow(0, groups_[g].layout.offsets[k], c10::multiply_integers(shape)).view(shape));
    if (index == last[g]) gathered.erase(found);
  }
}

void ZeroEngineImpl::prepare_load() {
  for (const auto& group : groups_) create_state(*optimizer_, group.master);
}

std::vector<StateTensor> ZeroEngineImpl::state_tensors() {
  std::vector<StateTensor> out;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const auto& group = groups_[g];
    const std::string prefix = "group" + std::to_string(g) + ".";
    // The real elements this rank owns (padding is not state: it changes with the world size).
    auto add = [&](const std::string& name, const torch::Tensor& t) {
      StateTensor entry;
      entry.name = prefix + name;
      if (stage_ == 0) {
        entry.tensor = t.narrow(0, 0, group.layout.numel);
        entry.kind = StateKind::kReplicated;
      } else {
        auto [begin, end] = group.layout.owned_real(rank_);
        entry.tensor = t.narrow(0, 0, end - begin);
        entry.kind = StateKind::kSharded;
        entry.flat_numel = group.layout.numel;
        entry.offset = begin;
      }
      out.push_back(std::move(entry));
    };
    add("master", group.master);
    for (const auto& [name, state] : state_tensors_of(*optimizer_, group.master)) add(name, state);
  }
  // Frozen parameters and buffers stay whole on every rank.
  for (const auto& item : module_->named_parameters())
    if (!item.value().requires_grad()) out.push_back({"module." + item.key(), item.value(), StateKind::kReplicated});
  for (const auto& item : module_->named_buffers())
    out.push_back({"module." + item.key(), item.value(), StateKind::kReplicated});
  return out;
}

StateValues ZeroEngineImpl::state_values() const {
  StateValues values;
  values["zero_stage"] = stage_;
  values["zero.global_steps"] = double(global_steps_);
  values["zero.skipped_steps"] = double(skipped_steps_);
  values["zero.micro_steps"] = double(micro_steps_);
  scaler_.save(values, "zero.loss_scaler.");
  for (size_t g = 0; g < groups_.size(); ++g)
    values["zero.group" + std::to_string(g) + ".step"] = double(step_count(*optimizer_, groups_[g].master));
  return values;
}

void ZeroEngineImpl::load_state_values(const StateValues& values) {
  auto get = [&](const std::string& key, double fallback) {
    auto it = values.find(key);
    return it == values.end() ? fallback : it->second;
  };
  const int saved_stage = int(get("zero_stage", stage_));
  COHORT_CHECK_KIND(kInvalidArgument, saved_stage == stage_, "ZeRO engine: the checkpoint was saved at stage ",
                    saved_stage, " but this engine runs stage ", stage_);
  global_steps_ = int64_t(get("zero.global_steps", 0));
  skipped_steps_ = int64_t(get("zero.skipped_steps", 0));
  micro_steps_ = int64_t(get("zero.micro_steps", 0));
  scaler_.load(values, "zero.loss_scaler.");
  for (size_t g = 0; g < groups_.size(); ++g)
    set_step_count(*optimizer_, groups_[g].master, int64_t(get("zero.group" + std::to_string(g) + ".step", 0)));
  if (config_.scheduler().type() != SchedulerType::kNone) set_learning_rate(*optimizer_, next_lr());
  // The master weights were loaded: derive the compute-precision parameters from them.
  torch::NoGradGuard no_grad;
  zero_gradients();  // gradients of before the load mean nothing now
  for (auto& group : groups_) {
    // Padding must stay zero whatever the previous world size left there.
    const int64_t begin = stage_ == 0 ? 0 : group.layout.owned(rank_).first;
    const int64_t real_end = stage_ == 0 ? group.layout.numel : group.layout.owned_real(rank_).second;
    const int64_t real = std::max<int64_t>(0, real_end - begin);
    group.master.narrow(0, real, group.master.numel() - real).zero_();
  }
  write_back_and_gather();
}

}  // namespace cohort::detail
