// Lends the parts of Statefuls (Stateful::lend_part) to a save or a load one at a time: state kept
// out of memory between uses (a ZeRO engine's optimizer state on NVMe) is in memory a part at a time
// while the checkpoint layer reads or fills it. A tensor of another part gives back the one lent.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <string>

#include "cohort/stateful.h"

namespace cohort::detail::ckpt {

class PartLender {
 public:
  /// `changes`: the lent tensors are filled (a load), so each part goes back changed.
  explicit PartLender(bool changes) : changes_(changes) {}
  /// Gives back the part still lent, unchanged: an error stopped the save or the load half way.
  ~PartLender();
  PartLender(const PartLender&) = delete;
  PartLender& operator=(const PartLender&) = delete;

  /// The live storage of `t`, a tensor of `owner` named `name` in errors: t.tensor itself, or for a
  /// part's tensor the one lend_part gave (any other part lent is given back first).
  torch::Tensor live(Stateful& owner, const StateTensor& t, const std::string& name);
  /// Gives back the part lent (changed when `changes`).
  void finish();

 private:
  void give_back(bool changed);

  bool changes_;
  Stateful* owner_ = nullptr;  // of the part lent, or null
  int64_t part_ = -1;
  std::map<std::string, torch::Tensor> tensors_;  // the lent part's, by StateTensor::name
};

}  // namespace cohort::detail::ckpt
