// The fixed batch the GPT interop tests compute a loss on, in C++ as tests/python/gpt_interop.py makes
// it: tokens and next tokens from a formula, no random generator, so both languages see the same one.
#pragma once

#include <torch/torch.h>

#include <utility>

namespace cohort::testing {

inline std::pair<torch::Tensor, torch::Tensor> gpt_fixed_batch(int64_t block, int64_t vocab, int64_t rows = 3) {
  auto tokens = torch::empty({rows, block}, torch::kLong), targets = torch::empty({rows, block}, torch::kLong);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < block; ++j) {
      const int64_t t = 7 * i + 3 * j + i * j * j;
      tokens[i][j] = t % vocab;
      targets[i][j] = (5 * t + j + 1) % vocab;
    }
  return {tokens, targets};
}

}  // namespace cohort::testing
