// The GPT checkpoint's model flags (see model_flags.h).
#include "model_flags.h"

#include <cohort/error.h>
#include <cohort/number.h>

#include <cstdio>

#include "../common/exact_text.h"

namespace gpt_example {
namespace {

// The flag each saved value comes from, for the refusal.
const std::map<std::string, std::string> kFlagOf = {{"gpt.n_layer", "--n-layer"}, {"gpt.n_head", "--n-head"},
                                                    {"gpt.n_embd", "--n-embd"},   {"gpt.block_size", "--block-size"},
                                                    {"gpt.bias", "--no-bias"},    {"gpt.vocabulary", "--data"}};

// The vocabulary's bytes in hex: the same size with other bytes means other tokens.
std::string hex_of(const std::string& bytes) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char byte : bytes) {
    out += kHex[byte >> 4];
    out += kHex[byte & 15];
  }
  return out;
}

}  // namespace

ModelFlags::ModelFlags(const Flags& flags, const cohort::models::GPTConfig& config, const std::string& vocabulary)
    : init_from_(flags.init_from),
      training_{{"gpt.lr", {flags.lr, "--lr"}},
                {"gpt.weight_decay", {flags.weight_decay, "--weight-decay"}},
                {"gpt.dropout", {config.dropout(), "--dropout"}}} {
  model_ = {{"gpt.n_layer", std::to_string(config.n_layer())}, {"gpt.n_head", std::to_string(config.n_head())},
            {"gpt.n_embd", std::to_string(config.n_embd())},   {"gpt.block_size", std::to_string(config.block_size())},
            {"gpt.bias", config.bias() ? "1" : "0"},           {"gpt.vocabulary", hex_of(vocabulary)}};
}

void ModelFlags::save_state(std::map<std::string, std::string>& values) const {
  for (const auto& [key, value] : model_) values[key] = value;
  for (const auto& [key, value] : training_) values[key] = examples::exact_text(value.first);
}

// Before anything loads, so the refusal names the flag instead of a tensor's shape; a checkpoint saved
// before these values existed is taken as it is.
std::optional<std::string> ModelFlags::first_difference(const std::map<std::string, std::string>& values) const {
  for (const auto& [key, value] : model_) {
    const auto saved = values.find(key);
    if (saved != values.end() && saved->second != value) return key;
  }
  return std::nullopt;
}

void ModelFlags::check_state(const std::map<std::string, std::string>& values) const {
  if (const auto key = first_difference(values)) {
    const std::string &flag = kFlagOf.at(*key), &value = model_.at(*key), &saved = values.at(*key);
    if (key == "gpt.vocabulary")
      throw cohort::Error(
          "the checkpoint's model was trained on a text with another vocabulary than --data's: "
          "resume on the text it was saved with",
          cohort::ErrorKind::kInvalidArgument);
    if (key == "gpt.bias")
      throw cohort::Error(std::string("the checkpoint's model was saved ") + (saved == "1" ? "with" : "without") +
                              " biases (--no-bias " + (saved == "1" ? "not given" : "given") +
                              "): resume with the model flags it was saved with",
                          cohort::ErrorKind::kInvalidArgument);
    throw cohort::Error(flag + " " + value + ", but the checkpoint's model was saved with " + flag + " " + saved +
                            ": resume with the model flags it was saved with",
                        cohort::ErrorKind::kInvalidArgument);
  }
  for (const auto& [key, value] : training_)
    if (const auto found = values.find(key); found != values.end()) try {
        cohort::parse_real(found->second, {"the checkpoint's " + key, 0, 1e300});
      } catch (const cohort::Error& e) {  // damage (kIO: the load falls back), not a refusal
        throw cohort::Error(e.what(), cohort::ErrorKind::kIO);
      }
}

// A changed training setting applies, as setting it after loading does in PyTorch, and is said (hostile
// passes 16 m-3, 17 m-3: --lr, --weight-decay and --dropout changed without a word).
void ModelFlags::load_state(const std::map<std::string, std::string>& values) {
  if (trainer_ == nullptr || !trainer_->world().is_main()) return;
  for (const auto& [key, value] : training_) {
    const auto found = values.find(key);
    if (found == values.end()) continue;
    const double saved = cohort::parse_real(found->second, {"the checkpoint's " + key, 0, 1e300});
    if (saved == value.first) continue;
    std::printf("%s: training continues with %g (%s), not the checkpoint's %g: this run's setting wins, as setting "
                "it after loading does in PyTorch\n",
                key.substr(4).c_str(), value.first, value.second.c_str(), saved);
  }
  std::fflush(stdout);
}

// Weights --export wrote say the model they are (hostile pass 20, S-1: another vocabulary of the same
// size, or another --n-head, started silently); the Trainer asks before it loads them, only when no
// checkpoint resumed. A file without those values (Python's save_file) is taken as it is, its tensors'
// names and shapes checked by the load.
void ModelFlags::check_pretrained(const std::map<std::string, std::string>& metadata) const {
  const auto key = first_difference(metadata);
  if (!key) return;
  const std::string &flag = kFlagOf.at(*key), &value = model_.at(*key), &saved = metadata.at(*key);
  const std::string file = "--init-from " + init_from_;
  if (key == "gpt.vocabulary")
    throw cohort::Error(file + " holds a model trained on a text with another vocabulary than --data's (its tokens "
                               "would mean other bytes): train on the text it was trained on",
                        cohort::ErrorKind::kInvalidArgument);
  if (key == "gpt.bias")
    throw cohort::Error(file + " holds a model " + (saved == "1" ? "with" : "without") +
                            " biases: " + (saved == "1" ? "drop --no-bias" : "add --no-bias"),
                        cohort::ErrorKind::kInvalidArgument);
  throw cohort::Error(file + " holds a model of " + flag + " " + saved + ", this run has " + flag + " " + value +
                          ": give the model flags it was exported with",
                      cohort::ErrorKind::kInvalidArgument);
}

}  // namespace gpt_example
