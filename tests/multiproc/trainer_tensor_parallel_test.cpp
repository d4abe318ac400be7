// The Trainer with tensor_parallel_size (Lightning's ModelParallelStrategy) on real rank processes: 4
// ranks as 2 data parallel x 2 tensor parallel train a module whose configure_model splits its layers
// over device_mesh()'s tensor_parallel group to the weights one process reaches stepping on the same
// global batches, gradient clipping by the whole norm included; a checkpoint holds whole tensors, so
// a fit resumed from it ends at the uninterrupted weights at tensor_parallel_size 2 and at 1 (4 data
// parallel ranks, half the batch: the same global batches). ZeRO 1-3 and fsdp over the data-parallel
// axis train to the same weights, clipped by the whole model's norm too, and resume on the same mesh
// and at another tensor_parallel_size (the engine's state is saved by parameter);
// sizes and strategies it cannot run are one-line errors. HSDP (data_parallel_replicate_size, by
// default one replica per node at stage 3) trains as one process too and resumes flat.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cohort/mesh.h"
#include "cohort/tensor_parallel.h"
#include "cohort/trainer.h"
#include "support/errors.h"
#include "support/multiproc.h"
#include "support/tiny_trainer_module.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace trainer_tensor_parallel_test {

using cohort::testing::error_of;
using cohort::testing::run_ranks;
using ::testing::HasSubstr;
namespace tp = cohort::tp;

constexpr int64_t kSamples = 64, kEpochs = 2;
constexpr double kClip = 0.5;  // below the early gradients' norm: clipping acts

// Six features to three classes through 16 hidden units: "up" column-parallel, "down" row-parallel.
struct TpMlp : cohort::TrainingModule {
  explicit TpMlp(bool split) : split_(split) {}
  void configure_model() override {
    torch::manual_seed(5);
    up = register_module("up", tp::Linear(6, 16));
    down = register_module("down", tp::Linear(16, 3));
    if (split_)
      tp::parallelize_module(*this, device_mesh().group_ptr("tensor_parallel"),
                             {{"up", tp::ColwiseParallel()}, {"down", tp::RowwiseParallel()}});
  }
  torch::Tensor forward(const torch::Tensor& x) { return down(torch::relu(up(x))); }
  torch::Tensor training_step(cohort::Batch& batch, int64_t) override {
    return torch::nn::functional::cross_entropy(forward(batch.data), batch.target);
  }
  std::unique_ptr<torch::optim::Optimizer> configure_optimizers(std::vector<torch::Tensor> parameters) override {
    return std::make_unique<torch::optim::Adam>(std::move(parameters), torch::optim::AdamOptions(0.01));
  }
  bool split_;
  tp::Linear up{nullptr}, down{nullptr};
};

// One process over the global batches `shares` data-parallel ranks of `batch` read together: the mean
// of their mean losses, the gradient's norm clipped to `clip` (0: not clipped), Adam.
std::vector<torch::Tensor> one_process(int shares, int64_t batch, double clip = kClip) {
  auto data = cohort::testing::tiny_data(kSamples);
  TpMlp net(false);
  net.configure_model();
  torch::optim::Adam adam(net.parameters(), torch::optim::AdamOptions(0.01));
  for (int64_t epoch = 0; epoch < kEpochs; ++epoch) {
    std::vector<std::vector<torch::Tensor>> batches;
    for (int r = 0; r < shares; ++r) {
      cohort::DistributedSampler sampler(kSamples,
                                         cohort::SamplerOptions().num_replicas(shares).rank(r).shuffle(true).seed(0));
      sampler.set_epoch(epoch);
      batches.push_back(sampler.batch_tensors(batch));
    }
    for (size_t k = 0; k < batches[0].size(); ++k) {
      adam.zero_grad();
      torch::Tensor loss = torch::zeros({});
      for (int r = 0; r < shares; ++r) {
        auto b = data->get_batch(batches[r][k]);
        loss = loss + torch::nn::functional::cross_entropy(net.forward(b.data), b.target) / shares;
      }
      loss.backward();
      if (clip > 0) torch::nn::utils::clip_grad_norm_(net.parameters(), clip);
      adam.step();
    }
  }
  std::vector<torch::Tensor> out;
  for (const auto& p : net.parameters()) out.push_back(p.detach().clone());
  return out;
}

cohort::TrainerOptions options(int64_t tensor_parallel, int64_t max_steps = -1) {
  return cohort::TrainerOptions()
      .strategy("ddp")
      .accelerator("cpu")
      .tensor_parallel_size(tensor_parallel)
      .max_epochs(kEpochs)
      .max_steps(max_steps)
      .gradient_clip_val(kClip)
      .enable_progress_bar(false)
      .enable_checkpointing(false)
      .logger(false);
}

std::vector<torch::Tensor> fit(cohort::TrainerOptions opts, int64_t batch, const std::string& root = "",
                               const std::string& ckpt_path = "") {
  cohort::Trainer trainer(opts);
  if (!root.empty())
    trainer.add_callback(std::make_shared<cohort::ModelCheckpoint>(
        cohort::ModelCheckpointOptions().dirpath(root).every_n_train_steps(1).save_top_k(-1)));
  TpMlp module(opts.tensor_parallel_size() > 1);
  cohort::DataLoader loader(cohort::testing::tiny_data(kSamples),
                            cohort::LoaderOptions().batch_size(batch).shuffle(true));
  trainer.fit(module, loader, cohort::FitOptions().ckpt_path(ckpt_path));
  std::vector<torch::Tensor> out;
  for (const auto& [name, value] : trainer.full_parameters()) out.push_back(value);
  return out;
}

void expect_close(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].sizes(), want[i].sizes()) << what << ", parameter " << i;
    EXPECT_LT((got[i] - want[i]).abs().max().item<double>(), 1e-5) << what << ", parameter " << i;
  }
}

TEST(TrainerTensorParallel, TwoByTwoTrainsAsOneProcessAndResumesAtAnyTensorParallelSize) {
  cohort::testing::RanksOptions ranks;
  const std::string dir = cohort::testing::shared_temp_dir(ranks, "TP_TEST_DIR", "trainer_tp_");
  run_ranks(
      4,
      [](int, int) {
        cohort::init();
        const auto expected = one_process(2, 4);
        expect_close(fit(options(2), 4), expected, "2 x 2");
        const std::string root = std::string(std::getenv("TP_TEST_DIR")) + "/ckpt";
        fit(options(2, 5), 4, root);
        expect_close(fit(options(2), 4, root + "_resumed", root + "/step-5"), expected, "resumed at tensor parallel 2");
        expect_close(fit(options(1), 2, "", root + "/step-5"), expected, "resumed at tensor parallel 1");
      },
      ranks);
  std::filesystem::remove_all(dir);
}

// Each tensor-parallel rank's engine shards its parts of the cut layers over its data-parallel group
// (FSDP2 over a 2-D mesh); clipping's norm covers the whole model (summed over the tensor-parallel
// group, the row-wise layer's whole bias once): zero1, zero2 and fsdp clip as one process does.
TEST(TrainerTensorParallel, ZeroOverTheDataParallelAxisTrainsAsOneProcessAndResumesOnAnyMesh) {
  cohort::testing::RanksOptions ranks;
  const std::string dir = cohort::testing::shared_temp_dir(ranks, "TP_TEST_DIR", "trainer_tp_zero_");
  run_ranks(
      4,
      [](int, int) {
        cohort::init();
        const auto clipped = one_process(2, 4);
        for (const char* strategy : {"zero1", "zero2", "fsdp"})
          expect_close(fit(options(2).strategy(strategy), 4), clipped, std::string(strategy) + " clipped");
        const auto expected = one_process(2, 4, 0);
        const std::string root = std::string(std::getenv("TP_TEST_DIR")) + "/ckpt";
        const auto zero3 = options(2).strategy("zero3").gradient_clip_val(0);
        fit(cohort::TrainerOptions(zero3).max_steps(5), 4, root);
        expect_close(fit(zero3, 4, root + "_resumed", root + "/step-5"), expected, "zero3 resumed at 2 x 2");
        // The engine's state is saved by parameter, whole tensors' order: another tensor-parallel size
        // (1: 4 data-parallel ranks, half the batch) resumes it, and back.
        expect_close(fit(cohort::TrainerOptions(zero3).tensor_parallel_size(1), 2, "", root + "/step-5"), expected,
                     "zero3 at 2 x 2 resumed at tensor parallel 1");
        const auto zero2 = options(1).strategy("zero2").gradient_clip_val(0);
        fit(cohort::TrainerOptions(zero2).max_steps(5), 2, root + "_flat");
        expect_close(fit(cohort::TrainerOptions(zero2).tensor_parallel_size(2), 4, "", root + "_flat/step-5"), expected,
                     "zero2 on 4 resumed at 2 x 2");
      },
      ranks);
  std::filesystem::remove_all(dir);
}

// HSDP: 4 ranks as 2 nodes of 2 (GROUP_RANK, LOCAL_WORLD_SIZE) shard within a node and replicate
// across by default at stage 3 (zero2 when asked), clipped by the whole gradient's norm as one process
// over the same global batches; an HSDP checkpoint resumes flat.
TEST(TrainerHsdp, ShardsWithinANodeByDefaultTrainsAsOneProcessAndResumesFlat) {
  cohort::testing::RanksOptions ranks;
  ranks.local_size = 2;
  const std::string dir = cohort::testing::shared_temp_dir(ranks, "HSDP_TEST_DIR", "trainer_hsdp_");
  run_ranks(
      4,
      [](int, int) {
        cohort::init();
        const auto clipped = one_process(4, 2);
        {
          cohort::Trainer trainer(options(1).strategy("fsdp"));
          TpMlp module(false);
          cohort::DataLoader loader(cohort::testing::tiny_data(kSamples),
                                    cohort::LoaderOptions().batch_size(2).shuffle(true));
          trainer.fit(module, loader);
          EXPECT_THAT(trainer.describe(), HasSubstr("HSDP: 2 replicas x 2 shards"));
          EXPECT_EQ(trainer.shard_ranks(), 2);
          std::vector<torch::Tensor> got;
          for (const auto& [name, value] : trainer.full_parameters()) got.push_back(value);
          expect_close(got, clipped, "fsdp by node");
        }
        expect_close(fit(options(1).strategy("zero2").data_parallel_replicate_size(2), 2), clipped, "zero2 hsdp");
        const auto expected = one_process(4, 2, 0);
        const std::string root = std::string(std::getenv("HSDP_TEST_DIR")) + "/ckpt";
        const auto fsdp = options(1).strategy("fsdp").gradient_clip_val(0);
        fit(cohort::TrainerOptions(fsdp).max_steps(5), 2, root);
        expect_close(
            fit(cohort::TrainerOptions(fsdp).data_parallel_replicate_size(1), 2, root + "_flat", root + "/step-5"),
            expected, "hsdp resumed flat");
      },
      ranks);
  std::filesystem::remove_all(dir);
}

TEST(TrainerTensorParallel, SizesAndStrategiesItCannotRunAreOneLineErrors) {
  run_ranks(2, [](int, int) {
    cohort::init();
    EXPECT_THAT(error_of([] { cohort::Trainer trainer(options(1).tensor_parallel_size(0)); }),
                HasSubstr("TrainerOptions.tensor_parallel_size \"0\" is not accepted: expected an integer >= 1"));
    EXPECT_THAT(
        error_of([] { cohort::Trainer trainer(options(2).strategy("dp")); }),
        HasSubstr("TrainerOptions.tensor_parallel_size 2 with strategy \"dp\": tensor parallelism runs under ddp, "
                  "zero1-3, fsdp, deepspeed or pipeline (data parallel over the other ranks); dp over it is not built"));
    EXPECT_THAT(error_of([] { fit(options(3), 4); }),
                HasSubstr("TrainerOptions.tensor_parallel_size 3 does not divide the world's 2 rank(s)"));
    EXPECT_THAT(error_of([] { fit(options(1).strategy("zero3").data_parallel_replicate_size(3), 4); }),
                HasSubstr("TrainerOptions.data_parallel_replicate_size 3 does not divide the 2 data-parallel rank(s) "
                          "(world 2 / tensor_parallel_size 1)"));
    EXPECT_THAT(error_of([] { cohort::Trainer trainer(options(1).data_parallel_replicate_size(2)); }),
                HasSubstr("TrainerOptions.data_parallel_replicate_size 2 with strategy \"ddp\": HSDP replicates "
                          "sharded state, under zero1-3, fsdp or deepspeed (ddp replicates everything)"));
    EXPECT_THAT(error_of([] {
                  fit(options(1).strategy("zero1").data_parallel_shard_size(2).data_parallel_replicate_size(2), 4);
                }),
                HasSubstr("TrainerOptions.data_parallel_shard_size 2 x data_parallel_replicate_size 2 is not the 2 "
                          "data-parallel rank(s) (world 2 / tensor_parallel_size 1)"));
    TpMlp alone(true);
    EXPECT_THAT(error_of([&] { alone.configure_model(); }),
                HasSubstr("TrainingModule::device_mesh: the module is not run by a Trainer yet"));
    EXPECT_THAT(error_of([] {
                  cohort::Trainer trainer(options(1));
                  TpMlp module(true);
                  cohort::DataLoader loader(cohort::testing::tiny_data(kSamples),
                                            cohort::LoaderOptions().batch_size(4));
                  trainer.fit(module, loader);
                }),
                HasSubstr("TrainingModule::device_mesh: the Trainer has no mesh: set "
                          "TrainerOptions.tensor_parallel_size above 1"));
  });
}

}  // namespace trainer_tensor_parallel_test
