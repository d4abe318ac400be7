// DistributedOptimizer's gradient reduction (see gradient_reducer.h and its note "group order").
#include "horovod/gradient_reducer.h"

#include <torch/csrc/autograd/grad_mode.h>

#include <unordered_map>

#include "core/check.h"
#include "core/log.h"
#include "horovod/context.h"

namespace cohort::hvd::detail {
namespace {

constexpr const char* kWho = "hvd::DistributedOptimizer";

// "allreduce.fc2.bias, fc2.weight" - the first names of a group and how many there are in all.
std::string group_name(const std::vector<std::string>& names) {
  std::string text = "allreduce.";
  for (size_t i = 0; i < names.size() && i < 3; ++i) text += (i ? ", " : "") + names[i];
  if (names.size() > 3) text += ", ... (" + std::to_string(names.size()) + " tensors)";
  return text;
}

}  // namespace

std::vector<std::vector<int64_t>> fusion_groups(const std::vector<int64_t>& bytes, const std::vector<int64_t>& kind,
                                                int64_t threshold) {
  std::vector<std::vector<int64_t>> groups;
  int64_t filled = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const bool fits = !groups.empty() && kind[groups.back().back()] == kind[i] && filled + bytes[i] <= threshold;
    if (!fits) {
      groups.emplace_back();
      filled = 0;
    }
    groups.back().push_back(int64_t(i));
    filled += bytes[i];
  }
  return groups;
}

GradientReducer::GradientReducer(std::shared_ptr<torch::optim::Optimizer> optimizer,
                                 const torch::OrderedDict<std::string, torch::Tensor>& named_parameters,
                                 DistributedOptimizerOptions options)
    : optimizer_(std::move(optimizer)), options_(options) {
  auto& context = Context::get(kWho);
  COHORT_CHECK_KIND(kInvalidArgument, optimizer_ != nullptr, kWho, ": the optimizer is null");
  COHORT_CHECK_KIND(kInvalidArgument, options_.backward_passes_per_step() >= 1, kWho,
                    ": backward_passes_per_step must be at least 1, got ", options_.backward_passes_per_step());
  COHORT_CHECK_KIND(kInvalidArgument, options_.op() == Average || options_.op() == Sum, kWho,
                    ": op must be Average or Sum, got ", reduce_op_name(options_.op()));
  COHORT_CHECK_KIND(kInvalidArgument,
                    options_.gradient_predivide_factor() > 0 &&
                        (options_.gradient_predivide_factor() == 1.0 || options_.op() == Average),
                    kWho, ": gradient_predivide_factor must be positive, and 1 unless op is Average; got ",
                    options_.gradient_predivide_factor());
  take_parameters(named_parameters);
  build_groups(context.settings().fusion_threshold_bytes);
  reset_passes();
  hooks_ = cohort::detail::GradHookSet(params_, [this](int64_t index) { on_gradient(index); });
}

void GradientReducer::take_parameters(const torch::OrderedDict<std::string, torch::Tensor>& named_parameters) {
  std::unordered_map<const void*, std::string> name_of;
  for (const auto& item : named_parameters) name_of[item.value().unsafeGetTensorImpl()] = item.key();
  std::unordered_map<const void*, bool> in_optimizer;
  size_t unnamed = 0;
  for (auto& group : optimizer_->param_groups()) {
    for (auto& p : group.params()) {
      in_optimizer[p.unsafeGetTensorImpl()] = true;
      if (!name_of.count(p.unsafeGetTensorImpl())) ++unnamed;
    }
  }
  COHORT_CHECK_KIND(kInvalidArgument, unnamed == 0, kWho, ": ", unnamed,
                    " of the optimizer's parameters are not in named_parameters; "
                    "pass model->named_parameters() of the model the optimizer trains");
  for (const auto& item : named_parameters) {
    if (!in_optimizer.count(item.value().unsafeGetTensorImpl()) || !item.value().requires_grad()) continue;
    params_.push_back(item.value());
    names_.push_back(item.key());
  }
}

void GradientReducer::build_groups(int64_t threshold) {
  std::vector<int64_t> order, bytes, kind;
  std::vector<cohort::detail::DtypeDevice> kinds;
  for (int64_t i = int64_t(params_.size()) - 1; i >= 0; --i) {
    order.push_back(i);
    bytes.push_back(params_[i].numel() * int64_t(params_[i].element_size()));
    kind.push_back(cohort::detail::dtype_device_group(params_[i], kinds));
  }
  group_of_.assign(params_.size(), -1);
  for (const auto& members : fusion_groups(bytes, kind, threshold)) {
    Group group;
    std::vector<std::string> names;
    for (int64_t m : members) {
      group.params.push_back(order[m]);
      names.push_back(names_[order[m]]);
      group_of_[order[m]] = int64_t(groups_.size());
    }
    group.name = group_name(names);
    groups_.push_back(std::move(group));
  }
}

void GradientReducer::reset_passes() {
  passes_left_.assign(params_.size(), options_.backward_passes_per_step());
  for (auto& group : groups_) {
    group.pending = int(group.params.size());
    group.handle = -1;
  }
  next_launch_ = 0;
}

void GradientReducer::on_gradient(int64_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int k = options_.backward_passes_per_step();
  COHORT_CHECK_KIND(kInvalidArgument, passes_left_[index] > 0, kWho, ": parameter '", names_[index],
                    "' got a gradient in ", k + 1, " backward passes before step(), but backward_passes_per_step is ",
                    k,
                    ": call step() (or "
                    "synchronize()) after each backward_passes_per_step backward passes, or raise it to accumulate "
                    "more passes locally");
  synchronized_ = false;
  if (--passes_left_[index] > 0) return;  // accumulating locally
  if (--groups_[group_of_[index]].pending == 0) launch_ready_groups();
}

void GradientReducer::launch_ready_groups() {
  while (next_launch_ < groups_.size() && groups_[next_launch_].pending == 0) launch(groups_[next_launch_++]);
}

void GradientReducer::launch(Group& group) {
  torch::NoGradGuard no_grad;
  const bool fp16 = options_.compression() == Compression::fp16;
  std::vector<torch::Tensor> grads, sent;
  for (int64_t p : group.params) {
    auto& grad = params_[p].mutable_grad();
    if (!grad.defined()) grad = torch::zeros_like(params_[p]);  // no gradient here: it adds nothing
    grads.push_back(grad);
    torch::Tensor wire = fp16 && at::isFloatingType(grad.scalar_type()) ? grad.to(torch::kHalf) : grad;
    if (options_.gradient_predivide_factor() != 1.0) wire.div_(options_.gradient_predivide_factor());
    sent.push_back(wire);
  }
  auto& context = Context::get(kWho);
  const double post = options_.gradient_predivide_factor();  // Average: the sum / size, times the factor
  const Request request{kWho, "allreduce", group.name, 0, allreduce_shadow(sent, options_.op(), true)};
  group.handle = context.submit(request, [sent, grads, post, op = options_.op()](Comm& comm) {
    Work work = comm.allreduce_fused_async(sent, op);
    return Started{work, [grads, sent, post]() mutable {
                     torch::NoGradGuard no_grad;
                     for (size_t i = 0; i < grads.size(); ++i) {
                       if (!sent[i].is_same(grads[i])) grads[i].copy_(sent[i]);
                       if (post != 1.0) grads[i].mul_(post);
                     }
                     return grads;
                   }};
  });
}

void GradientReducer::synchronize() {
  std::lock_guard<std::mutex> lock(mutex_);
  // Groups whose hooks did not all run (a parameter without gradient, fewer passes) start now, in order.
  while (next_launch_ < groups_.size()) launch(groups_[next_launch_++]);
  auto& context = Context::get(kWho);
  for (auto& group : groups_) context.synchronize(group.handle, kWho);
  reset_passes();
  synchronized_ = true;
}

void GradientReducer::step() {
  if (skip_depth_ == 0) {
    if (!synchronized_) {
      synchronize();
    } else if (!warned_step_after_sync_) {
      warned_step_after_sync_ = true;
      COHORT_WARN(kWho,
                  ": step() after synchronize() without skip_synchronize(): the gradients were reduced "
                  "already and are not reduced again; wrap step() in `auto guard = optimizer.skip_synchronize();`");
    }
  }
  optimizer_->step();
  synchronized_ = false;
}

void GradientReducer::zero_grad() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    COHORT_CHECK_KIND(kInvalidArgument, next_launch_ == 0, kWho,
                      ": zero_grad() was called after backward() started reducing ",
                      "gradients but before step() or synchronize(); the reductions in flight would write into the "
                      "zeroed gradients. Call step() or synchronize() first");
  }
  optimizer_->zero_grad();
}

}  // namespace cohort::hvd::detail

namespace cohort::hvd {

DistributedOptimizer::DistributedOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer,
                                           const torch::OrderedDict<std::string, torch::Tensor>& named_parameters,
                                           Options options)
    : reducer_(std::make_unique<detail::GradientReducer>(std::move(optimizer), named_parameters, options)) {}
DistributedOptimizer::~DistributedOptimizer() = default;
DistributedOptimizer::DistributedOptimizer(DistributedOptimizer&&) noexcept = default;
DistributedOptimizer& DistributedOptimizer::operator=(DistributedOptimizer&&) noexcept = default;

void DistributedOptimizer::step() { reducer_->step(); }
void DistributedOptimizer::synchronize() { reducer_->synchronize(); }
void DistributedOptimizer::zero_grad() { reducer_->zero_grad(); }
torch::optim::Optimizer& DistributedOptimizer::optimizer() { return reducer_->optimizer(); }

DistributedOptimizer::SkipSynchronizeGuard::SkipSynchronizeGuard(detail::GradientReducer* reducer) : reducer_(reducer) {
  reducer_->enter_skip();
}
DistributedOptimizer::SkipSynchronizeGuard::~SkipSynchronizeGuard() {
  if (reducer_) reducer_->exit_skip();
}
DistributedOptimizer::SkipSynchronizeGuard DistributedOptimizer::skip_synchronize() {
  return SkipSynchronizeGuard(reducer_.get());
}

}  // namespace cohort::hvd
