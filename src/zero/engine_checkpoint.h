// What the ZeRO engine saves and loads (cohort::Stateful): the master weight and optimizer state
// shards, the model's buffers and frozen parameters, the counters and the loss scaler; and the full
// parameters it gathers from the masters on demand (a digest, a consolidated file).
#pragma once

#include <torch/nn/module.h>

#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "cohort/stateful.h"
#include "cohort/zero.h"
#include "zero/engine_settings.h"
#include "zero/shard_optimizer.h"
#include "zero/state_store.h"
#include "zero/trainable_parameters.h"

namespace cohort::detail {

class EngineCheckpoint {
 public:
  /// The parts whose state it reads and writes (ZeroEngineImpl owns them; they outlive it).
  struct Parts {
    torch::nn::Module& module;
    const TrainableParameters& params;
    StateStore& store;
    ShardOptimizer& optimizer;
  };
  EngineCheckpoint(const EngineSettings& settings, Parts parts) : settings_(settings), parts_(parts) {}

  /// The full parameters by name, fp32, on every rank (a collective at stage 1-3).
  std::vector<std::pair<std::string, torch::Tensor>> full_parameters();
  /// The same one at a time, in the module's order, a group gathered at its first parameter and
  /// dropped after its last.
  void for_each_full_parameter(const ParameterVisitor& visit);
  /// This rank's shard of every parameter through `read`, then the compute parameters from them.
  void load_full_parameters(const ParameterReader& read);

  /// ZeroEngineCore::parameter_states, for_each_whole_parameter_state, shard_position.
  std::vector<ParameterState> parameter_states();
  void for_each_whole_parameter_state(const ParameterStateVisitor& visit);
  std::pair<int, int> shard_position() const;

  void prepare_load();
  /// Masters on file: each group's tensors are part g, listed as meta tensors (StateTensor::part).
  std::vector<StateTensor> state_tensors();
  /// Masters on file: group g read (the next buffer_count groups read ahead) and its tensors live
  /// until give_back_part, which writes them back when `changed`.
  std::vector<StateTensor> lend_part(int64_t g);
  void give_back_part(int64_t g, bool changed);
  StateValues state_values() const;
  /// The counters, then the compute-precision parameters derived from the loaded masters.
  void load_state_values(const StateValues& values);

 private:
  /// Group g's master and optimizer state, this rank's real elements; as meta tensors when `meta`.
  void add_group(int64_t g, bool meta, std::vector<StateTensor>& out);
  /// Group g's master elements this rank keeps, each parameter's through `read`.
  void read_group(int64_t g, const ParameterReader& read);
  struct Places {
    std::vector<std::pair<size_t, size_t>> of;  ///< parameter -> (group, index in it)
    std::vector<size_t> last;                   ///< group -> its last parameter
  };
  Places places() const;
  struct Kept {
    int64_t begin = 0, end = 0;  ///< the elements of the parameter this rank keeps
    int64_t at = 0;              ///< where `begin` lies in this rank's shard of the group
  };
  Kept kept(const GroupLayout& layout, size_t k) const;
  std::vector<std::pair<std::string, torch::Tensor>> group_fields(int64_t g);
  /// Whether this rank keeps a shard of each group (else the whole of it).
  bool sharded() const { return settings_.stage != 0 && settings_.world > 1; }
  /// Group g's flat tensor whole (padding included), on the CPU, from this rank's `shard` of it.
  torch::Tensor whole_group(int64_t g, const torch::Tensor& shard);
  void check_in_memory(const char* what) const;
  /// Every rank learns whether any failed (`failure` null: this one did not); each then throws, a
  /// failed rank its own error.
  void agree_on_failure(const std::exception_ptr& failure) const;

  const EngineSettings& settings_;
  Parts parts_;
};

}  // namespace cohort::detail
