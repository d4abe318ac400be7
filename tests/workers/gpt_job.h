// examples/gpt on a small text a test writes: a tiny GPT (2 layers, 2 heads, 16 wide, 16 tokens of
// context, batches of 4 per data-parallel rank), 6 steps, validation at 3 and 6; a run adds its flags.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "launch_helpers.h"
#include "synthetic_fashion_mnist.h"  // build_path

namespace cohort::testing {

struct GptJob {
  static constexpr int kLines = 200;
  static std::string line(int i) { return "The quick brown fox " + std::to_string(i) + " jumps over the lazy dog.\n"; }
  std::string root = make_temp_dir("gpt_example_");
  GptJob() {
    std::ofstream text(root + "/text.txt");
    for (int i = 0; i < kLines; ++i) text << line(i);
  }
  ~GptJob() { remove_tree(root); }
  /// `batch`: --batch-size, rows per data-parallel rank (the example refuses a flag given twice).
  ProcResult run(const std::vector<std::string>& extra, const std::string& devices = "2",
                 const std::string& batch = "4") const {
    std::vector<std::string> args = {build_path("/examples/gpt"),
                                     "--data",
                                     root + "/text.txt",
                                     "--devices",
                                     devices,
                                     "--n-layer",
                                     "2",
                                     "--n-head",
                                     "2",
                                     "--n-embd",
                                     "16",
                                     "--block-size",
                                     "16",
                                     "--batch-size",
                                     batch,
                                     "--max-steps",
                                     "6",
                                     "--eval-interval",
                                     "3",
                                     "--eval-iters",
                                     "2",
                                     "--sample-tokens",
                                     "40",
                                     "--threads",
                                     "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_process(args, clean_env(), std::chrono::seconds(180));
  }
  /// The text's distinct characters: the model's vocabulary size.
  int64_t vocabulary() const {
    std::set<char> seen;
    for (int i = 0; i < kLines; ++i)
      for (char c : line(i)) seen.insert(c);
    return static_cast<int64_t>(seen.size());
  }
};

}  // namespace cohort::testing
