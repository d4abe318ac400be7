// The GPT of models/gpt.h split by gpt_tensor_parallel_plan: 20 AdamW steps (fp32, no dropout) on tp2
// with sequence parallel and on tp4 without (13 tokens over 4 ranks: an uneven vocabulary) give the
// losses of the unsplit GPT at every step, and at the end each rank's parameters are its cut of the
// unsplit GPT's within 1e-5; greedy generation gives the same tokens. DDP over the other axis of a
// {dp 2, tp 2} mesh, each replica on half the batch, trains as one process on the whole batch.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cohort/ddp.h"
#include "cohort/mesh.h"
#include "cohort/world.h"
#include "models/gpt.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace gpt_tensor_parallel_test {

using cohort::models::GPT;
using cohort::models::GPTConfig;
using cohort::testing::run_ranks;

namespace {

// No biases: a key's bias has no effect on attention, so its gradient is float noise, which Adam
// scales up to whole steps of different signs on one process and on several.
GPTConfig tiny() {
  return GPTConfig().n_layer(2).n_head(4).n_embd(16).block_size(8).vocab_size(13).dropout(0.0).bias(false);
}

bool ends_with(const std::string& name, const std::string& tail) {
  return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
}

// This rank's rows of `dim`, in `fused` equal parts each cut alone (as the plan cuts c_attn).
torch::Tensor cut(const torch::Tensor& whole, int64_t dim, int64_t fused, int ranks, int rank) {
  std::vector<torch::Tensor> pieces;
  for (const torch::Tensor& part : whole.chunk(fused, dim)) {
    const auto [first, count] = cohort::shard_range(part.size(dim), ranks, rank);
    pieces.push_back(part.narrow(dim, first, count));
  }
  return torch::cat(pieces, dim);
}

// The unsplit parameter `name` as the plan leaves it on this rank.
torch::Tensor as_split(const std::string& name, const torch::Tensor& whole, bool sequence_parallel, int n, int rank) {
  if (name == "transformer.wte.weight" || (sequence_parallel && name == "transformer.wpe.weight"))
    return cut(whole, 0, 1, n, rank);
  if (ends_with(name, "attn.c_attn.weight") || ends_with(name, "attn.c_attn.bias")) return cut(whole, 0, 3, n, rank);
  if (ends_with(name, "mlp.c_fc.weight") || ends_with(name, "mlp.c_fc.bias")) return cut(whole, 0, 1, n, rank);
  if (ends_with(name, "c_proj.weight")) return cut(whole, 1, 1, n, rank);
  return whole;
}

void train_and_compare(bool sequence_parallel, int rank, int n) {
  auto comm = cohort::init().comm_ptr();
  torch::manual_seed(0);
  GPT whole(tiny());
  torch::manual_seed(0);
  GPT split(tiny());
  cohort::tp::parallelize_module(*split, comm, cohort::models::gpt_tensor_parallel_plan(sequence_parallel));
  torch::optim::AdamW whole_opt(whole->parameters(), torch::optim::AdamWOptions(1e-3));
  torch::optim::AdamW split_opt(split->parameters(), torch::optim::AdamWOptions(1e-3));
  torch::manual_seed(1);
  for (int step = 0; step < 20; ++step) {
    const torch::Tensor idx = torch::randint(13, {2, 8});
    const torch::Tensor targets = torch::randint(13, {2, 8});
    whole_opt.zero_grad();
    split_opt.zero_grad();
    const torch::Tensor whole_loss = whole->loss_of(whole(idx), targets);
    const torch::Tensor split_loss = split->loss_of(split(idx), targets);
    whole_loss.backward();
    split_loss.backward();
    whole_opt.step();
    split_opt.step();
    EXPECT_NEAR(split_loss.item<double>(), whole_loss.item<double>(), 1e-5) << "step " << step;
  }
  const auto whole_params = whole->named_parameters();
  for (const auto& p : split->named_parameters()) {
    const torch::Tensor want = as_split(p.key(), whole_params[p.key()], sequence_parallel, n, rank);
    ASSERT_EQ(p.value().sizes(), want.sizes()) << p.key();
    EXPECT_LT((p.value() - want).abs().max().item<double>(), 1e-5) << p.key();
  }
  const torch::Tensor prompt = torch::randint(13, {1, 3});
  EXPECT_TRUE(torch::equal(split->generate(prompt, 4, 1.0, 1), whole->generate(prompt, 4, 1.0, 1)));
}

}  // namespace

TEST(GptTensorParallel, TwoRanksWithSequenceParallelTrainAsOne) {
  run_ranks(2, [](int rank, int n) { train_and_compare(true, rank, n); });
}

TEST(GptTensorParallel, FourRanksWithAnUnevenVocabularyTrainAsOne) {
  cohort::testing::RanksOptions options;
  options.deadline = std::chrono::seconds(120);
  run_ranks(
      4, [](int rank, int n) { train_and_compare(false, rank, n); }, options);
}

TEST(GptTensorParallel, DataParallelOverTheOtherMeshAxisTrainsAsOne) {
  cohort::testing::RanksOptions options;
  options.deadline = std::chrono::seconds(120);
  run_ranks(
      4,
      [](int, int) {
        auto world = cohort::init();
        cohort::Mesh mesh(world.comm(), {{"dp", 2}, {"tp", 2}});
        torch::manual_seed(0);
        GPT whole(tiny());
        torch::manual_seed(0);
        GPT split(tiny());
        cohort::tp::parallelize_module(*split, mesh.group_ptr("tp"), cohort::models::gpt_tensor_parallel_plan(true));
        cohort::DistributedDataParallel ddp(split, cohort::DDPOptions().comm(mesh.group_ptr("dp")));
        torch::optim::AdamW whole_opt(whole->parameters(), torch::optim::AdamWOptions(1e-3));
        torch::optim::AdamW split_opt(split->parameters(), torch::optim::AdamWOptions(1e-3));
        torch::manual_seed(1);
        const int64_t half = mesh.coordinate("dp") * 2;  // this replica's rows of the batch of 4
        for (int step = 0; step < 10; ++step) {
          const torch::Tensor idx = torch::randint(13, {4, 8});
          const torch::Tensor targets = torch::randint(13, {4, 8});
          whole_opt.zero_grad();
          split_opt.zero_grad();
          const torch::Tensor whole_loss = whole->loss_of(whole(idx), targets);
          const torch::Tensor split_loss = split->loss_of(ddp(idx.narrow(0, half, 2)), targets.narrow(0, half, 2));
          whole_loss.backward();
          split_loss.backward();
          whole_opt.step();
          split_opt.step();
        }
        const auto whole_params = whole->named_parameters();
        for (const auto& p : split->named_parameters()) {
          const torch::Tensor want = as_split(p.key(), whole_params[p.key()], true, 2, mesh.coordinate("tp"));
          EXPECT_LT((p.value() - want).abs().max().item<double>(), 1e-5) << p.key();
        }
      },
      options);
}

}  // namespace gpt_tensor_parallel_test
