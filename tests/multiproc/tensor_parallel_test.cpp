// cohort::tp on real rank processes: a model split by a plan (column- and row-parallel Linears, a
// vocabulary-parallel Embedding, sequence-parallel LayerNorms, loss parallel) computes the loss of
// the unsplit model, and each rank's gradients are its cut of the unsplit model's gradients, on 2
// ranks (sequence parallel) and 3 (uneven shards); SGD steps on the split model keep it equal to the
// unsplit one. A plan that names what it cannot split is a one-line error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cohort/tensor_parallel.h"
#include "cohort/world.h"
#include "support/errors.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace tensor_parallel_test {

using cohort::Placement;
using cohort::testing::error_of;
using cohort::testing::run_ranks;
using ::testing::HasSubstr;
namespace tp = cohort::tp;

namespace {

constexpr int64_t kVocab = 11, kEmbd = 6, kBatch = 2, kSeq = 6;

// A one-block language model of splittable layers (the same on every rank: a fixed seed).
struct TinyLmImpl : torch::nn::Module {
  TinyLmImpl() {
    torch::manual_seed(3);
    wte = register_module("wte", tp::Embedding(kVocab, kEmbd));
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kEmbd})));
    fc = register_module("fc", tp::Linear(kEmbd, 4 * kEmbd));
    proj = register_module("proj", tp::Linear(4 * kEmbd, kEmbd));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kEmbd})));
    head = register_module("head", tp::Linear(torch::nn::LinearOptions(kEmbd, kVocab).bias(false)));
    to(torch::kDouble);
    for (auto& p : parameters()) {  // LayerNorms start at 1 and 0: make their gradients tell
      torch::NoGradGuard no_grad;
      p.add_(torch::randn_like(p) * 0.1);
    }
  }
  torch::Tensor forward(const torch::Tensor& idx) {
    torch::Tensor x = wte(idx);
    x = x + proj(torch::gelu(fc(ln1(x))));
    return head(ln2(x));
  }
  tp::Embedding wte{nullptr};
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  tp::Linear fc{nullptr}, proj{nullptr}, head{nullptr};
};
TORCH_MODULE(TinyLm);

tp::ParallelizePlan plan(bool sequence_parallel) {
  const Placement seq = sequence_parallel ? Placement::shard(1) : Placement::replicate();
  tp::ParallelizePlan p{
      {"wte", tp::RowwiseParallel().output_layout(seq)},
      {"fc", tp::ColwiseParallel().input_layout(seq)},
      {"proj", tp::RowwiseParallel().output_layout(seq)},
      {"head", tp::ColwiseParallel().input_layout(seq)},
  };
  if (sequence_parallel) {
    p.push_back({"ln1", tp::SequenceParallel()});
    p.push_back({"ln2", tp::SequenceParallel()});
  }
  return p;
}

// How the plan cuts each parameter: the dimension, or -1 for a whole (replicated) one.
int64_t cut_dim(const std::string& name) {
  if (name == "wte.weight" || name == "fc.weight" || name == "fc.bias" || name == "head.weight") return 0;
  if (name == "proj.weight") return 1;
  return -1;
}

torch::Tensor cut_of(const torch::Tensor& whole, int64_t dim, int ranks, int rank) {
  if (dim < 0) return whole;
  const auto [first, count] = cohort::shard_range(whole.size(dim), ranks, rank);
  return whole.narrow(dim, first, count);
}

void expect_close(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_TRUE(torch::allclose(got, want, 1e-10, 1e-12)) << what << ": max diff " << (got - want).abs().max();
}

// Three SGD steps on the split model and the whole one, batch by batch: losses, gradients and
// parameters compared at each.
void train_and_compare(bool sequence_parallel, int rank, int n) {
  auto comm = cohort::init().comm_ptr();
  TinyLm whole, split;
  tp::parallelize_module(*split, comm, plan(sequence_parallel));
  torch::optim::SGD whole_sgd(whole->parameters(), 0.5), split_sgd(split->parameters(), 0.5);
  torch::manual_seed(7);
  for (int step = 0; step < 3; ++step) {
    const torch::Tensor idx = torch::randint(kVocab, {kBatch, kSeq});
    const torch::Tensor targets = torch::randint(kVocab, {kBatch, kSeq});
    whole_sgd.zero_grad();
    split_sgd.zero_grad();
    const torch::Tensor whole_loss = torch::nn::functional::cross_entropy(whole(idx).reshape({-1, kVocab}),
                                                                          targets.reshape({-1}));
    const auto logits = cohort::DTensor::from_local(split(idx), comm, Placement::shard(-1), {kBatch, kSeq, kVocab});
    const torch::Tensor split_loss = tp::cross_entropy_parallel(logits, targets);
    whole_loss.backward();
    split_loss.backward();
    expect_close(split_loss, whole_loss, "loss at step " + std::to_string(step));
    const auto whole_params = whole->named_parameters();
    for (const auto& p : split->named_parameters()) {
      const torch::Tensor& w = whole_params[p.key()];
      expect_close(p.value(), cut_of(w, cut_dim(p.key()), n, rank), p.key() + " at step " + std::to_string(step));
      expect_close(p.value().grad(), cut_of(w.grad(), cut_dim(p.key()), n, rank),
                   p.key() + "'s gradient at step " + std::to_string(step));
    }
    whole_sgd.step();
    split_sgd.step();
  }
}

}  // namespace

TEST(TensorParallel, UnsplitModelIsTorchs) {
  TinyLm model;
  torch::nn::Embedding embedding(kVocab, kEmbd);
  embedding->weight.set_data(model->wte->weight.detach().to(torch::kFloat));
  const torch::Tensor idx = torch::randint(kVocab, {kBatch, kSeq});
  EXPECT_TRUE(torch::equal(model->wte(idx).to(torch::kFloat), embedding(idx)));
}

TEST(TensorParallel, SplitModelTrainsAsTheWholeOnThreeRanksUnevenly) {
  run_ranks(3, [](int rank, int n) { train_and_compare(false, rank, n); });
}

TEST(TensorParallel, SequenceParallelTrainsAsTheWholeOnTwoRanks) {
  run_ranks(2, [](int rank, int n) { train_and_compare(true, rank, n); });
}

TEST(TensorParallel, PlansThatCannotSplitAreOneLineErrors) {
  run_ranks(2, [](int, int) {
    auto comm = cohort::init().comm_ptr();
    struct Plain : torch::nn::Module {
      torch::nn::Linear fc{register_module("fc", torch::nn::Linear(4, 4))};
    } plain;
    EXPECT_THAT(error_of([&] {
                  tp::parallelize_module(plain, comm, {{"fc", tp::ColwiseParallel()}});
                }),
                HasSubstr("parallelize_module: 'fc' is a torch::nn::Linear; ColwiseParallel splits "
                          "cohort::tp::Linear or Embedding"));
    TinyLm model;
    EXPECT_THAT(error_of([&] {
                  tp::parallelize_module(*model, comm, {{"blocks.*.fc", tp::ColwiseParallel()}});
                }),
                HasSubstr("the plan names 'blocks.*.fc', which is no module of"));
    EXPECT_THAT(error_of([&] {
                  tp::parallelize_module(*model, comm, {{"ln1", tp::ColwiseParallel()}});
                }),
                HasSubstr("'ln1' is a torch::nn::LayerNorm; ColwiseParallel splits cohort::tp::Linear or Embedding"));
    tp::parallelize_module(*model, comm, {{"ln1", tp::SequenceParallel()}});
    EXPECT_THAT(error_of([&] {
                  tp::parallelize_module(*model, comm, {{"ln1", tp::SequenceParallel()}});
                }),
                HasSubstr("parallelize_module: 'ln1' is split already (SequenceParallel)"));
    EXPECT_THAT(error_of([&] {
                  tp::parallelize_module(*model, comm, {{"fc", tp::ColwiseParallel().fused(5)}});
                }),
                HasSubstr("ColwiseParallel on 'fc': fused 5 does not divide its 24 output features"));
    // Models made and freed one after another reuse addresses: a new model's LayerNorm is not "split
    // already" because a freed one lay there.
    for (int i = 0; i < 20; ++i) {
      TinyLm again;
      EXPECT_NO_THROW(tp::parallelize_module(*again, comm, plan(true))) << "model " << i;
    }
    TinyLm odd;  // a sequence of 5 positions does not split over 2 ranks
    tp::parallelize_module(*odd, comm, plan(true));
    EXPECT_THAT(error_of([&] {
                  odd(torch::zeros({1, 5}, torch::kLong));
                }),
                HasSubstr("RowwiseParallel (Embedding): an output of shape [1, 5, 6] split as Shard(1) over 2 tp "
                          "rank(s): sequence parallel needs that dimension divisible by the tp size"));
  });
}

}  // namespace tensor_parallel_test
