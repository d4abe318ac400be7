// tensor_parallel_rank_state (see tensor_parallel_rank_state.h).
#include "trainer/tensor_parallel_rank_state.h"

#include <string>
#include <utility>
#include <vector>

namespace cohort::detail {
namespace {

class TensorParallelRankState : public Stateful {
 public:
  TensorParallelRankState(Stateful& inner, int tp_rank)
      : inner_(inner), prefix_("tp" + std::to_string(tp_rank) + ".") {}

  void prepare_load() override { inner_.prepare_load(); }
  std::vector<StateTensor> state_tensors() override { return renamed(inner_.state_tensors()); }
  std::vector<StateTensor> lend_part(int64_t part) override { return renamed(inner_.lend_part(part)); }
  void give_back_part(int64_t part, bool changed) override { inner_.give_back_part(part, changed); }
  StateValues state_values() const override { return inner_.state_values(); }
  void check_state_values(const StateValues& values, int saved_world_size) const override {
    inner_.check_state_values(values, saved_world_size);
  }
  void load_state_values(const StateValues& values) override { inner_.load_state_values(values); }
  bool tensors_optional() const override { return inner_.tensors_optional(); }

 private:
  std::vector<StateTensor> renamed(std::vector<StateTensor> tensors) const {
    for (StateTensor& t : tensors) {
      t.name = prefix_ + t.name;
      if (t.kind == StateKind::kReplicated) t.kind = StateKind::kOwned;  // this tp rank's replicas hold it
    }
    return tensors;
  }

  Stateful& inner_;
  std::string prefix_;
};

}  // namespace

std::shared_ptr<Stateful> tensor_parallel_rank_state(Stateful& inner, int tp_rank) {
  return std::make_shared<TensorParallelRankState>(inner, tp_rank);
}

}  // namespace cohort::detail
