// "dp": DataParallel (TensorFlow's MirroredStrategy) in one process. The network is copied once per
// device when the strategy is made (replica 0 is the module's own network), and one persistent thread
// per replica runs it. Each training batch is split along dim 0 as DataParallel's scatter splits it
// (torch::chunk: ceil(N / replicas) samples per chunk, so a small batch may use fewer replicas); every
// worker runs training_step and then backward on its chunk, its loss weighted by its share of the batch
// (a mean over the chunk times chunk / batch is the chunk's part of the mean over the batch). At the
// accumulation boundary the replicas' gradients are summed into replica 0's, which the module's
// optimizer steps; the others copy replica 0's parameters before they next run.
//
// Why one optimizer step and copies, not the same step on every replica: a copy is exact and costs one
// pass over the parameters, where N steps cost N optimizer updates (Adam: several passes each) and N
// optimizer states, and then a checkpoint or configure_optimizers would have to pick one anyway. With
// one step the optimizer, its state and the checkpoint are exactly those of strategy "single".
//
// A forward() from the caller's thread (validation_step, test_step) is DataParallel's: scatter the
// input, run the replicas on their threads, gather the outputs on replica 0's device, so the module
// sees its whole batch and every sample is evaluated once.
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <optional>

#include "cohort/error.h"
#include "cohort/safetensors.h"
#include "core/check.h"
#include "trainer/replica_workers.h"
#include "trainer/strategy.h"

namespace cohort::detail {
namespace {

// The replica the calling thread runs; set on a worker while it runs a task of `owner`.
struct ReplicaSlot {
  const void* owner = nullptr;
  int index = -1;
};
thread_local ReplicaSlot current_replica;

class ReplicaScope {
 public:
  ReplicaScope(const void* owner, int index) { current_replica = {owner, index}; }
  ~ReplicaScope() { current_replica = {}; }
};

struct LoggedValue {
  std::string name;
  double value = 0;
  LogOptions options;
};

std::string refusal(const ResolvedOptions& options, const std::string& accepted) {
  return "TrainerOptions.devices \"" + options.raw.devices() + "\" is not accepted: expected " + accepted;
}

// Replica k's device: the CPU for every replica, or cuda:k (the module is on cuda:0 in a lone process).
std::vector<torch::Device> replica_devices(const ResolvedOptions& options, const World& world) {
  if (!world.device().is_cuda()) return std::vector<torch::Device>(std::max(1, options.devices), world.device());
  const int visible = static_cast<int>(torch::cuda::device_count());
  const int count = options.devices == 0 ? visible : options.devices;
  COHORT_CHECK_KIND(kInvalidArgument, count <= visible,
                    refusal(options, "1 to " + std::to_string(visible) +
                                         " with strategy dp on cuda (the GPUs LibTorch sees), or auto"));
  COHORT_CHECK_KIND(kInvalidArgument, world.device().index() == 0,
                    "strategy dp puts replica 0 on cuda:0, but this process's device is ", world.device().str(),
                    ": run it as one process without a launcher");
  std::vector<torch::Device> out;
  for (int k = 0; k < count; ++k) out.emplace_back(torch::kCUDA, static_cast<c10::DeviceIndex>(k));
  return out;
}

torch::nn::Sequential clone_network(const torch::nn::Sequential& network, const torch::Device& device) {
  std::shared_ptr<torch::nn::Module> copy;
  try {
    copy = network->clone(device);
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    throw Error("strategy dp copies the network once per device with clone(), which failed: " +
                    what.substr(0, what.find('\n')) +
                    " (derive your modules from torch::nn::Cloneable, as LibTorch's are)",
                ErrorKind::kInvalidArgument);
  }
  return torch::nn::Sequential(std::dynamic_pointer_cast<torch::nn::SequentialImpl>(copy));
}

class DpStrategy : public ModuleOptimizerStrategy {
 public:
  DpStrategy(const ResolvedOptions& options, TrainingModule& module, const World& world)
      : ModuleOptimizerStrategy(options),
        devices_(replica_devices(options, world)),
        replicas_(make_replicas(module)),
        workers_(static_cast<int>(replicas_.size()), intra_op_threads()) {
    for (auto& replica : replicas_) {
      trainable_.push_back(trainable_parameters(*replica));
      all_parameters_.push_back(replica->parameters());
      buffers_.push_back(replica->buffers());
    }
    make_optimizer(module, trainable_[0]);
  }

  torch::Tensor training_step(TrainingModule& module, Batch& batch, int64_t index) override;
  torch::Tensor forward(const torch::Tensor& input) override;
  void backward(const torch::Tensor& combined, bool boundary) override;

  void after_step() override {
    window_open_ = false;
    stale_ = true;
  }

  bool log_from_replica(const std::string& name, double value, const LogOptions& options) override {
    if (current_replica.owner != this) return false;
    logged_[static_cast<size_t>(current_replica.index)].push_back({name, value, options});
    return true;
  }

  // Replica 0 is the module's network: the checkpoint is strategy "single"'s. A load may follow
  // (resume), so the other replicas copy replica 0 before they next run.
  void add_to(CheckpointState& state) override {
    state.add("model", *replicas_[0]).add("optimizer", *optimizer_);
    window_open_ = false;
    stale_ = true;
  }
  void load_pretrained(const std::string& path, const StateDictOptions& options) override {
    cohort::load_pretrained(*replicas_[0], path, options);
    stale_ = true;  // the other replicas copy replica 0 before the next step
  }
  std::vector<std::pair<std::string, torch::Tensor>> full_parameters() override {
    return float_parameters(*replicas_[0]);
  }
  std::string describe() const override {
    const std::string where = devices_[0].is_cuda() ? "cuda:0-" + std::to_string(devices_.size() - 1) : "cpu";
    return "dp (" + std::to_string(devices_.size()) + " replica(s) on " + where + ")";
  }
  std::unique_ptr<AutocastGuard> autocast() const override { return replica_autocast(0); }

 private:
  int replicas() const { return static_cast<int>(replicas_.size()); }
  std::vector<torch::nn::Sequential> make_replicas(TrainingModule& module) const {
    COHORT_CHECK_KIND(
        kInvalidArgument, module.has_network(),
        "strategy \"dp\" copies a torch::nn::Sequential network once per device, but "
        "this TrainingModule has its own layers (made with TrainingModule()): use strategy ddp with devices ",
        devices_.size(), ", or give the module a Sequential");
    std::vector<torch::nn::Sequential> out{module.network()};
    for (size_t k = 1; k < devices_.size(); ++k) out.push_back(clone_network(module.network(), devices_[k]));
    return out;
  }
  // On the CPU the replicas share the cores this process would use alone.
  int intra_op_threads() const {
    return devices_[0].is_cuda() ? 0 : std::max(1, at::get_num_threads() / static_cast<int>(devices_.size()));
  }
  std::unique_ptr<AutocastGuard> replica_autocast(int k) const {
    if (options_.precision != Precision::kBf16Mixed) return nullptr;
    return std::make_unique<AutocastGuard>(devices_[static_cast<size_t>(k)].type(), torch::kBFloat16);
  }
  c10::optional<torch::Device> guard_device(int k) const {
    if (!devices_[static_cast<size_t>(k)].is_cuda()) return c10::nullopt;
    return devices_[static_cast<size_t>(k)];
  }
  void copy_from_first(int k, bool parameters, bool buffers);
  void prepare_replicas(bool copy_parameters);
  void reduce_gradients();
  void replay_logs(TrainingModule& module);

  std::vector<torch::Device> devices_;
  std::vector<torch::nn::Sequential> replicas_;                                   // [0]: the module's own network
  std::vector<std::vector<torch::Tensor>> trainable_, all_parameters_, buffers_;  // per replica, same order
  std::vector<torch::Tensor> losses_;  // of the last training_step, per replica used, for backward
  std::vector<double> weights_;        // each used replica's share of that batch
  std::vector<std::vector<LoggedValue>> logged_;
  bool window_open_ = false;  // an accumulation window started since the last optimizer step
  bool stale_ = false;        // replica 0's parameters may differ from the others'
  ReplicaWorkers workers_;    // last: its threads stop before the rest goes
};

// Replica k (> 0) takes replica 0's training mode and, when asked, its parameters and buffers.
void DpStrategy::copy_from_first(int k, bool parameters, bool buffers) {
  const auto at = static_cast<size_t>(k);
  if (replicas_[at]->is_training() != replicas_[0]->is_training()) replicas_[at]->train(replicas_[0]->is_training());
  if (!parameters && !buffers) return;
  c10::OptionalDeviceGuard device(guard_device(k));
  torch::NoGradGuard no_grad;
  if (parameters)
    for (size_t i = 0; i < all_parameters_[0].size(); ++i) all_parameters_[at][i].copy_(all_parameters_[0][i]);
  if (buffers)
    for (size_t i = 0; i < buffers_[0].size(); ++i) buffers_[at][i].copy_(buffers_[0][i]);
}

// Replicas 1..N-1 made equal to replica 0 before any of them runs. Buffers are copied every time:
// batch norm updates replica 0's in forward (DataParallel broadcasts them per call too).
void DpStrategy::prepare_replicas(bool copy_parameters) {
  workers_.run(replicas(), [&](int k) {
    if (k > 0) copy_from_first(k, copy_parameters, true);
  });
  if (copy_parameters) stale_ = false;
}

torch::Tensor DpStrategy::training_step(TrainingModule& module, Batch& batch, int64_t index) {
  const std::vector<torch::Tensor> data = batch.data.chunk(replicas(), 0);
  std::vector<torch::Tensor> target;
  if (batch.target.defined()) target = batch.target.chunk(replicas(), 0);
  COHORT_CHECK_KIND(kInvalidArgument, target.empty() || target.size() == data.size(),
                    "strategy dp splits a batch along dim 0, but its data "
                    "has ",
                    batch.data.size(0), " samples and its target ", batch.target.size(0));
  const int used = static_cast<int>(data.size());
  // Parameters change only in step(): each worker copies its own while replica 0 already computes.
  // Buffers may change in replica 0's forward, and a short batch leaves replicas idle that a later
  // one of the window needs: then every replica is prepared first.
  const bool copy_parameters = !window_open_;
  const bool apart = !buffers_[0].empty() || used < replicas();
  if (apart) prepare_replicas(copy_parameters);
  window_open_ = true;
  stale_ = false;
  losses_.assign(data.size(), torch::Tensor());
  logged_.assign(data.size(), {});
  weights_.assign(data.size(), 0.0);
  workers_.run(used, [&](int k) {
    const auto at = static_cast<size_t>(k);
    if (k > 0 && !apart) copy_from_first(k, copy_parameters, false);
    ReplicaScope scope(this, k);
    c10::OptionalDeviceGuard device(guard_device(k));
    auto autocast = replica_autocast(k);
    Batch chunk{data[at].to(devices_[at]), target.empty() ? torch::Tensor() : target[at].to(devices_[at])};
    losses_[at] = module.training_step(chunk, index);
  });
  double total = 0;
  for (size_t k = 0; k < data.size(); ++k) {
    const torch::Tensor& loss = losses_[k];
    COHORT_CHECK_KIND(kInvalidArgument, loss.defined() && loss.numel() == 1,
                      "training_step must return the loss, one number; got ",
                      loss.defined() ? "a tensor of shape " + detail::str(loss.sizes()) : "an undefined tensor",
                      " (replica ", k, " of ", replicas(), ")");
    weights_[k] = static_cast<double>(data[k].size(0)) / static_cast<double>(batch.data.size(0));
    if (used > 1) total += weights_[k] * loss.detach().item<double>();
  }
  replay_logs(module);
  // One replica: its loss as it is, so that dp on one device computes exactly what "single" does.
  return used == 1 ? losses_[0] : torch::tensor(total, torch::kFloat64);
}

// The values a step logged on the replicas, each once, as the share-weighted mean over the replicas
// that logged it: for a mean over the chunk (a loss, an accuracy) that is the mean over the batch.
void DpStrategy::replay_logs(TrainingModule& module) {
  std::vector<std::string> order;
  std::map<std::string, std::pair<double, double>> sums;  // name -> (weighted values, weights)
  std::map<std::string, LogOptions> options;
  for (size_t k = 0; k < logged_.size(); ++k)
    for (const LoggedValue& item : logged_[k]) {
      if (!sums.count(item.name)) order.push_back(item.name);
      auto& sum = sums[item.name];
      sum.first += weights_[k] * item.value;
      sum.second += weights_[k];
      options[item.name] = item.options;
    }
  logged_.clear();
  for (const std::string& name : order) module.log(name, sums[name].first / sums[name].second, options[name]);
}

// The combined loss the fit loop passes back carries no graph: each replica's own loss runs backward.
void DpStrategy::backward(const torch::Tensor& /*combined*/, bool boundary) {
  COHORT_CHECK_KIND(kInternal, !losses_.empty(), "strategy dp: backward without a training_step before it");
  const auto accumulate = static_cast<double>(options_.raw.accumulate_grad_batches());
  const int used = static_cast<int>(losses_.size());
  workers_.run(used, [&](int k) {
    const auto at = static_cast<size_t>(k);
    ReplicaScope scope(this, k);
    c10::OptionalDeviceGuard device(guard_device(k));
    const torch::Tensor& mine = losses_[at];
    // One replica: scaled as "single" scales it, bit for bit.
    const torch::Tensor scaled = used > 1         ? mine * (weights_[at] / accumulate)
                                 : accumulate > 1 ? mine / accumulate
                                                  : mine;
    scaled.backward();
  });
  losses_.clear();
  if (boundary) reduce_gradients();
}

// Replica 0's gradient += every other replica's, in replica order (the same sums whichever worker does
// them); worker k sums parameters k, k + N, ... Then the others' gradients are zeroed for the next
// window, their memory kept.
void DpStrategy::reduce_gradients() {
  const int count = replicas();
  if (count == 1) return;
  workers_.run(count, [&](int k) {
    c10::OptionalDeviceGuard device(guard_device(0));
    torch::NoGradGuard no_grad;
    for (size_t i = static_cast<size_t>(k); i < trainable_[0].size(); i += static_cast<size_t>(count)) {
      torch::Tensor& sum = trainable_[0][i].mutable_grad();
      for (size_t r = 1; r < replicas_.size(); ++r) {
        torch::Tensor& grad = trainable_[r][i].mutable_grad();
        if (!grad.defined()) continue;
        if (sum.defined()) {
          sum.add_(grad.to(devices_[0]));
        } else {
          sum = grad.to(devices_[0], /*non_blocking=*/false, /*copy=*/true);
        }
        grad.zero_();
      }
    }
  });
}

torch::Tensor DpStrategy::forward(const torch::Tensor& input) {
  if (current_replica.owner == this) return replicas_[static_cast<size_t>(current_replica.index)]->forward(input);
  if (stale_ || !buffers_[0].empty() || replicas_.back()->is_training() != replicas_[0]->is_training())
    prepare_replicas(stale_);
  const std::vector<torch::Tensor> chunks = input.chunk(replicas(), 0);
  std::vector<torch::Tensor> outputs(chunks.size());
  const bool grad = at::GradMode::is_enabled();
  workers_.run(static_cast<int>(chunks.size()), [&](int k) {
    const auto at = static_cast<size_t>(k);
    ReplicaScope scope(this, k);
    c10::OptionalDeviceGuard device(guard_device(k));
    torch::AutoGradMode grad_mode(grad);
    auto autocast = replica_autocast(k);
    outputs[at] = replicas_[at]->forward(chunks[at].to(devices_[at]));
  });
  if (outputs.size() == 1) return outputs[0];
  for (auto& output : outputs) output = output.to(devices_[0]);
  return torch::cat(outputs, 0);
}

}  // namespace

std::unique_ptr<Strategy> make_dp_strategy(const ResolvedOptions& options, TrainingModule& module, const World& world) {
  return std::make_unique<DpStrategy>(options, module, world);
}

}  // namespace cohort::detail
