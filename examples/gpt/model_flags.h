// What a GPT checkpoint says of the model that saved it: the model flags (--n-layer, --n-head, --n-embd,
// --block-size, --no-bias), the text's vocabulary and --lr, saved as user values. A resume with another
// model is refused in one line naming the flag before anything loads (hostile pass 16, M-3: --n-head
// changes no shape, so another attention split trained on silently); another --lr, --weight-decay or
// --dropout applies and is said.
#pragma once

#include <cohort/trainer.h>

#include <map>
#include <optional>
#include <string>
#include <utility>

#include "models/gpt.h"
#include "train.h"

namespace gpt_example {

class ModelFlags : public cohort::Callback {
 public:
  ModelFlags(const Flags& flags, const cohort::models::GPTConfig& config, const std::string& vocabulary);
  void on_fit_start(cohort::Trainer& trainer, cohort::TrainingModule&) override { trainer_ = &trainer; }
  void save_state(std::map<std::string, std::string>& values) const override;
  void check_state(const std::map<std::string, std::string>& values) const override;
  void load_state(const std::map<std::string, std::string>& values) override;
  /// The model flags and the vocabulary, as saved ("gpt.n_head" -> "4"): --export's metadata too.
  const std::map<std::string, std::string>& model_values() const { return model_; }
  /// The --init-from file's metadata, when it says the model it holds (what --export writes), is this
  /// model's: else a refusal naming the flag.
  void check_pretrained(const std::map<std::string, std::string>& metadata) const override;

 private:
  /// The first model value `values` holds otherwise ("gpt.n_head"), if any.
  std::optional<std::string> first_difference(const std::map<std::string, std::string>& values) const;

  std::map<std::string, std::string> model_;  // "gpt.<flag>" -> value, as saved
  std::string init_from_;                     // --init-from
  std::map<std::string, std::pair<double, std::string>> training_;  // "gpt.lr" -> (value, its flag)
  cohort::Trainer* trainer_ = nullptr;
};

}  // namespace gpt_example
