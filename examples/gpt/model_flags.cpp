// The GPT checkpoint's model flags (see model_flags.h).
#include "model_flags.h"

#include <cohort/error.h>
#include <cohort/number.h>

#include <cstdio>

namespace gpt_example {
namespace {

// A double that reads back bit for bit.
std::string exact_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

// The flag each saved value comes from, for the refusal.
const std::map<std::string, std::string> kFlagOf = {{"gpt.n_layer", "--n-layer"},       {"gpt.n_head", "--n-head"},
                                                    {"gpt.n_embd", "--n-embd"},         {"gpt.block_size", "--block-size"},
                                                    {"gpt.bias", "--no-bias"},          {"gpt.vocabulary", "--data"}};

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
    : lr_(flags.lr) {
  model_ = {{"gpt.n_layer", std::to_string(config.n_layer())},
            {"gpt.n_head", std::to_string(config.n_head())},
            {"gpt.n_embd", std::to_string(config.n_embd())},
            {"gpt.block_size", std::to_string(config.block_size())},
            {"gpt.bias", config.bias() ? "1" : "0"},
            {"gpt.vocabulary", hex_of(vocabulary)}};
}

void ModelFlags::save_state(std::map<std::string, std::string>& values) const {
  for (const auto& [key, value] : model_) values[key] = value;
  values["gpt.lr"] = exact_text(lr_);
}

// Before anything loads, so the refusal names the flag instead of a tensor's shape; a checkpoint saved
// before these values existed is taken as it is.
void ModelFlags::check_state(const std::map<std::string, std::string>& values) const {
  for (const auto& [key, value] : model_) {
    const auto saved = values.find(key);
    if (saved == values.end() || saved->second == value) continue;
    const std::string& flag = kFlagOf.at(key);
    if (key == "gpt.vocabulary")
      throw cohort::Error("the checkpoint's model was trained on a text with another vocabulary than --data's: "
                          "resume on the text it was saved with",
                          cohort::ErrorKind::kInvalidArgument);
    if (key == "gpt.bias")
      throw cohort::Error(std::string("the checkpoint's model was saved ") + (saved->second == "1" ? "with" : "without") +
                              " biases (--no-bias " + (saved->second == "1" ? "not given" : "given") +
                              "): resume with the model flags it was saved with",
                          cohort::ErrorKind::kInvalidArgument);
    throw cohort::Error(flag + " " + value + ", but the checkpoint's model was saved with " + flag + " " +
                            saved->second + ": resume with the model flags it was saved with",
                        cohort::ErrorKind::kInvalidArgument);
  }
  if (const auto found = values.find("gpt.lr"); found != values.end())
    cohort::parse_real(found->second, {"the checkpoint's gpt.lr", 0, 1e300});
}

void ModelFlags::load_state(const std::map<std::string, std::string>& values) {
  const auto found = values.find("gpt.lr");
  if (found == values.end() || trainer_ == nullptr || !trainer_->world().is_main()) return;
  const double saved = cohort::parse_real(found->second, {"the checkpoint's gpt.lr", 0, 1e300});
  if (saved == lr_) return;
  std::printf("lr: training continues with %g (--lr), not the checkpoint's %g: this run's setting wins, as setting "
              "a param group's lr after loading does in PyTorch\n",
              lr_, saved);
  std::fflush(stdout);
}

}  // namespace gpt_example
