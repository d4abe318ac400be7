// What CheckpointState holds per add(): a name and a Stateful (an adapter made here for modules,
// optimizers, schedulers and samplers, or the user's own).
#pragma once

#include <memory>
#include <string>

#include "cohort/checkpoint.h"

namespace cohort {

struct CheckpointState::Entry {
  std::string name;
  Stateful* stateful = nullptr;
  std::shared_ptr<Stateful> owned;  ///< keeps adapters and shared Statefuls alive
  /// Tensors the checkpoint may lack without being another model's (an optimizer saved before its
  /// first step has no moments; its adapter drops the ones it made in prepare_load()).
  bool tensors_optional = false;
};

namespace detail::ckpt {

std::shared_ptr<Stateful> module_state(torch::nn::Module& module);
/// `name` is the entry's, for the messages of its check_state_values().
std::shared_ptr<Stateful> optimizer_state(const std::string& name, torch::optim::Optimizer& optimizer);
std::shared_ptr<Stateful> scheduler_state(torch::optim::LRScheduler& scheduler);
/// `name` is the entry's, for the messages of its check_state_values().
std::shared_ptr<Stateful> sampler_state(const std::string& name, DistributedSampler& sampler,
                                        int64_t& samples_in_epoch);
/// This rank's generators: "cpu" and "cuda<i>" per CUDA device, all kPerRank.
std::shared_ptr<Stateful> rng_state();

}  // namespace detail::ckpt
}  // namespace cohort

namespace cohort::detail::ckpt {

/// The state's entries, plus "rng" (a fresh adapter, tensors optional) when state.rng() is on.
std::vector<CheckpointState::Entry> entries_with_rng(const CheckpointState& state);

/// `message` without this process's "[rank r/w] " prefix, to be sent to other ranks that add
/// "rank r: " themselves.
std::string without_rank_prefix(const std::string& message);

}  // namespace cohort::detail::ckpt
