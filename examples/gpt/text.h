// The example's data: a text read as bytes (a file, or every plain-text file of a directory such as
// Debian's /usr/share/games/fortunes from the `fortunes` package), its vocabulary (the distinct bytes,
// sorted, as nanoGPT's shakespeare_char), a 90/10 train/validation split, and the windows a GPT is
// trained on (a cohort::Dataset): block_size tokens and the same shifted by one (the next token at
// each position).
#pragma once

#include <cohort/data_loader.h>
#include <torch/types.h>

#include <array>
#include <cstdint>
#include <string>

namespace gpt_example {

/// The corpus the example trains on by default: Debian's `fortunes` package.
inline constexpr const char* kDefaultText = "/usr/share/games/fortunes";

struct Text {
  std::string bytes;                  ///< the whole text
  std::string vocabulary;             ///< its distinct bytes, sorted: token i is vocabulary[i]
  std::array<int64_t, 256> token_of;  ///< byte -> token (-1: not in the text)
  torch::Tensor train, val;           ///< int64 tokens: the first 90% and the rest
  int files = 0;                      ///< files read
};

/// Reads `path` (a file, or a directory's regular files without a '.' in their name, in name order:
/// the fortune files without their .dat indexes) and splits it. Throws naming the path when it holds
/// no text or less than `min_tokens` validation tokens.
Text load_text(const std::string& path, int64_t min_tokens);

/// Tokens back to text (bytes outside printable ASCII shown as they are).
std::string decode(const Text& text, const torch::Tensor& tokens);

/// The windows starting at `starts` of `tokens`: x = tokens[s, s + block), y = tokens[s + 1, s + block + 1),
/// each [starts, block].
std::pair<torch::Tensor, torch::Tensor> windows(const torch::Tensor& tokens, const torch::Tensor& starts, int64_t block);

/// The windows of `tokens` starting at `starts` as the Trainer's dataset: sample i is windows(tokens,
/// starts[i]) (data: block tokens, target: the next token at each position).
class WindowDataset : public cohort::Dataset {
 public:
  WindowDataset(torch::Tensor tokens, torch::Tensor starts, int64_t block)
      : tokens_(std::move(tokens)), starts_(std::move(starts)), block_(block) {}
  int64_t size() const override { return starts_.numel(); }
  cohort::Batch get(int64_t index) const override;
  cohort::Batch get_batch(const torch::Tensor& indices) const override;

 private:
  torch::Tensor tokens_, starts_;
  int64_t block_;
};

}  // namespace gpt_example
