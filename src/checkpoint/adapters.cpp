// Stateful adapters for what LibTorch and cohort own: a module's parameters and buffers, an LR
// scheduler's step count, a sampler's position, the RNG states. (Optimizers: optimizer_state.cpp.)
#include <ATen/Context.h>
#include <torch/cuda.h>

#include <cstdint>

#include "checkpoint/entry.h"
#include "checkpoint/sampler_values.h"
#include "cohort/error.h"
#include "core/check.h"
#include "core/text.h"

namespace cohort::detail::ckpt {
namespace {

class ModuleState : public Stateful {
 public:
  explicit ModuleState(torch::nn::Module& module) : module_(module) {}
  std::vector<StateTensor> state_tensors() override {
    std::vector<StateTensor> out;
    for (const auto& item : module_.named_parameters(true)) out.push_back({item.key(), item.value()});
    for (const auto& item : module_.named_buffers(true)) out.push_back({item.key(), item.value()});
    return out;
  }

 private:
  torch::nn::Module& module_;
};

// LRScheduler keeps its step count protected; a derived class may name the member for us.
struct SchedulerAccess : torch::optim::LRScheduler {
  static unsigned& step_count(torch::optim::LRScheduler& s) { return s.*(&SchedulerAccess::step_count_); }
};

class SchedulerState : public Stateful {
 public:
  explicit SchedulerState(torch::optim::LRScheduler& scheduler) : scheduler_(scheduler) {}
  std::vector<StateTensor> state_tensors() override { return {}; }
  StateValues state_values() const override { return {{"step_count", SchedulerAccess::step_count(scheduler_)}}; }
  void load_state_values(const StateValues& values) override {
    const auto it = values.find("step_count");
    COHORT_CHECK_KIND(kIO, it != values.end(), "the checkpoint's scheduler has no 'step_count'");
    SchedulerAccess::step_count(scheduler_) = static_cast<unsigned>(it->second);
  }

 private:
  torch::optim::LRScheduler& scheduler_;
};

class SamplerState : public Stateful {
 public:
  SamplerState(std::string name, DistributedSampler& sampler, int64_t& samples)
      : name_(std::move(name)), sampler_(sampler), samples_(samples) {}
  std::vector<StateTensor> state_tensors() override { return {}; }
  StateValues state_values() const override {
    // A checkpoint's numbers are doubles: a larger seed would be saved rounded, and a resume with the
    // rounded one, another shuffle, would pass the check below (hostile pass 9, M2).
    constexpr int64_t kExact = int64_t(1) << 53;  // compared as integers: 2^53 + 1 rounds to 2^53 as a double
    const int64_t seed = sampler_.options().seed();
    COHORT_CHECK_KIND(kInvalidArgument, seed >= -kExact && seed <= kExact, "the sampler's seed ", seed,
                      " cannot be saved exactly: a checkpoint's numbers are doubles (a seed from -2^53 to 2^53)");
    return {{"epoch", sampler_.epoch()},
            {"samples_in_epoch", samples_},
            {"dataset_size", sampler_.dataset_size()},
            {"seed", sampler_.options().seed()},
            {"shuffle", sampler_.options().shuffle()}};
  }
  // A position no sampler reaches (negative, past the data, not whole) makes the checkpoint unusable
  // before commit: cast to int64 below, it crashed the resume or skipped the epoch unsaid.
  void check_state_values(const StateValues& values, int saved_world_size) const override {
    check_sampler_values(values, name_, saved_world_size);
  }
  void load_state_values(const StateValues& values) override {
    for (const char* key : {"epoch", "samples_in_epoch", "dataset_size", "seed", "shuffle"}) {
      COHORT_CHECK_KIND(kIO, values.count(key), "the checkpoint's sampler has no '", key, "'");
    }
    const auto mine = state_values();
    for (const char* key : {"dataset_size", "seed", "shuffle"}) {
      COHORT_CHECK_KIND(kInvalidArgument, values.at(key) == mine.at(key), "the checkpoint's sampler has ", key, " ",
                        number_text(values.at(key)), ", this one ", number_text(mine.at(key)),
                        ": it belongs to another dataset or shuffle");
    }
    sampler_.set_epoch(static_cast<int64_t>(values.at("epoch")));
    samples_ = static_cast<int64_t>(values.at("samples_in_epoch"));
  }

 private:
  std::string name_;  // the entry's, for messages ('values.<name>.epoch')
  DistributedSampler& sampler_;
  int64_t& samples_;
};

// The generators' states are read at save time, and written back in load_state_values(), after the
// checkpoint layer copied the saved bytes into the tensors state_tensors() handed out.
class RngState : public Stateful {
 public:
  std::vector<StateTensor> state_tensors() override {
    generators_.clear();
    tensors_.clear();
    generators_.push_back(at::detail::getDefaultCPUGenerator());
    names_ = {"cpu"};
    const int64_t devices = torch::cuda::is_available() ? torch::cuda::device_count() : 0;
    for (int64_t i = 0; i < devices; ++i) {
      generators_.push_back(at::globalContext().defaultGenerator(at::Device(at::kCUDA, i)));
      names_.push_back("cuda" + std::to_string(i));
    }
    std::vector<StateTensor> out;
    for (size_t i = 0; i < generators_.size(); ++i) {
      std::lock_guard<std::mutex> lock(generators_[i].mutex());
      tensors_.push_back(generators_[i].get_state());
      out.push_back({names_[i], tensors_.back(), StateKind::kPerRank});
    }
    return out;
  }
  void load_state_values(const StateValues&) override {
    for (size_t i = 0; i < generators_.size(); ++i) {
      std::lock_guard<std::mutex> lock(generators_[i].mutex());
      generators_[i].set_state(tensors_[i]);
    }
  }

 private:
  std::vector<at::Generator> generators_;
  std::vector<std::string> names_;
  std::vector<torch::Tensor> tensors_;
};

}  // namespace

std::shared_ptr<Stateful> module_state(torch::nn::Module& module) { return std::make_shared<ModuleState>(module); }
std::shared_ptr<Stateful> scheduler_state(torch::optim::LRScheduler& scheduler) {
  return std::make_shared<SchedulerState>(scheduler);
}
std::shared_ptr<Stateful> sampler_state(const std::string& name, DistributedSampler& sampler,
                                        int64_t& samples_in_epoch) {
  return std::make_shared<SamplerState>(name, sampler, samples_in_epoch);
}
std::shared_ptr<Stateful> rng_state() { return std::make_shared<RngState>(); }

}  // namespace cohort::detail::ckpt
