// cohort::SyncBatchNorm: parity with PyTorch's torch.nn.SyncBatchNorm on 2 ranks (tests/python/
// syncbn_reference.py runs it on 2 Gloo processes) for the forward output, the input, weight and bias
// gradients, the running statistics and eval mode, with different batch sizes per rank and a rank with
// an empty batch; eval mode without communication; a world of one equal to BatchNorm; input errors;
// convert_sync_batchnorm on containers and its refusal of member holders.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cohort/sampler.h"
#include "cohort/sync_batchnorm.h"
#include "cohort/trainer.h"
#include "cohort/world.h"
#include "support/command.h"
#include "support/errors.h"
#include "support/multiproc.h"
#include "support/python.h"
#include "support/tiny_trainer_module.h"
#include "trainer/options.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace sync_batchnorm_test {

using cohort::testing::error_of;
using cohort::testing::run_ranks;

namespace {

constexpr const char* kDirVariable = "COHORT_SYNCBN_DIR";
constexpr double kTolerance = 1e-6;
// Rows of each rank per step: uneven, and rank 1 has none in the last step.
const std::vector<std::vector<int64_t>> kRows{{5, 3}, {2, 6}, {4, 0}};

struct Parity {
  std::vector<int64_t> sample;  // [C, ...] of one row
  torch::Dtype dtype = torch::kFloat;
  c10::optional<double> momentum = 0.1;
  bool affine = true, track = true;
};

std::string source_root() {
  const char* root = std::getenv("COHORT_SOURCE_DIR");
  if (root != nullptr && *root != '\0') return root;
  std::string here = __FILE__;  // tests/multiproc/sync_batchnorm_test.cpp
  for (int up = 0; up < 3; ++up) here = here.substr(0, here.find_last_of('/'));
  return here;
}

void save(const c10::Dict<std::string, torch::Tensor>& values, const std::string& path) {
  const std::vector<char> bytes = torch::pickle_save(values);
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

// The same inputs, output gradients and initial state on every rank (fixed seed).
c10::Dict<std::string, torch::Tensor> make_data(const Parity& p) {
  torch::manual_seed(0);
  c10::Dict<std::string, torch::Tensor> data;
  const auto shape = [&](int64_t rows) {
    std::vector<int64_t> s{rows};
    s.insert(s.end(), p.sample.begin(), p.sample.end());
    return s;
  };
  for (size_t step = 0; step < kRows.size(); ++step) {
    for (size_t r = 0; r < 2; ++r) {
      const std::string key = std::to_string(r) + "_" + std::to_string(step);
      data.insert("x" + key, (torch::randn(shape(kRows[step][r])) * 2 + 1).to(p.dtype));
      data.insert("g" + key, torch::randn(shape(kRows[step][r])).to(p.dtype));
    }
  }
  const int64_t c = p.sample[0];
  data.insert("weight", torch::randn({c}).to(p.dtype));
  data.insert("bias", torch::randn({c}).to(p.dtype));
  data.insert("running_mean", torch::randn({c}).to(p.dtype));
  data.insert("running_var", (torch::rand({c}) + 0.5).to(p.dtype));
  data.insert("xe", torch::randn(shape(2)).to(p.dtype));
  return data;
}

// One rank: the steps syncbn_reference.py runs, results saved as cpp_<rank>.pt.
void run_parity_rank(int rank, const Parity& p) {
  const std::string dir = std::getenv(kDirVariable);
  cohort::init();
  const auto data = make_data(p);
  if (rank == 0) save(data, dir + "/data.pt");
  cohort::SyncBatchNorm bn(cohort::SyncBatchNormOptions(p.sample[0]).momentum(p.momentum).affine(p.affine)
                               .track_running_stats(p.track));
  bn->to(p.dtype);
  {
    torch::NoGradGuard no_grad;
    if (p.affine) {
      bn->weight.copy_(data.at("weight"));
      bn->bias.copy_(data.at("bias"));
    }
    if (p.track) {
      bn->running_mean.copy_(data.at("running_mean"));
      bn->running_var.copy_(data.at("running_var"));
    }
  }
  c10::Dict<std::string, torch::Tensor> out;
  const auto zero_if_none = [](const torch::Tensor& grad, const torch::Tensor& like) {
    return grad.defined() ? grad.detach().clone() : torch::zeros_like(like);
  };
  for (size_t step = 0; step < kRows.size(); ++step) {
    const std::string key = std::to_string(rank) + "_" + std::to_string(step);
    auto x = data.at("x" + key).clone().requires_grad_(true);
    bn->zero_grad();
    auto y = bn(x);
    y.backward(data.at("g" + key));
    out.insert("y" + key, y.detach());
    out.insert("dx" + key, zero_if_none(x.grad(), x));
    if (p.affine) {
      out.insert("dw" + key, zero_if_none(bn->weight.grad(), bn->weight));
      out.insert("db" + key, zero_if_none(bn->bias.grad(), bn->bias));
    }
  }
  if (p.track) {
    out.insert("running_mean" + std::to_string(rank), bn->running_mean.clone());
    out.insert("running_var" + std::to_string(rank), bn->running_var.clone());
  }
  bn->eval();
  torch::NoGradGuard no_grad;
  out.insert("ye" + std::to_string(rank), bn(data.at("xe")));
  save(out, dir + "/cpp_" + std::to_string(rank) + ".pt");
}

void check_parity(const Parity& p) {
  const auto body = [&](int rank, int) { run_parity_rank(rank, p); };
  if (cohort::testing::is_rank_process()) {
    run_ranks(2, body);
    return;
  }
  const std::string python = cohort::testing::python_with_torch();
  ASSERT_EQ(access(python.c_str(), X_OK), 0) << python << " not found: this test compares with PyTorch's SyncBatchNorm";
  char dir_template[] = "/tmp/cohort-syncbn-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  cohort::testing::RanksOptions options;
  options.env[kDirVariable] = dir;
  run_ranks(2, body, options);
  ASSERT_FALSE(::testing::Test::HasFailure()) << "the cohort ranks failed; files kept in " << dir;

  std::ostringstream command;
  command << "timeout -k 5 120 " << python << " " << source_root() << "/tests/python/syncbn_reference.py --dir "
          << dir << " --steps " << kRows.size() << " --momentum "
          << (p.momentum ? std::to_string(*p.momentum) : std::string("none")) << " --affine " << p.affine
          << " --track " << p.track << " --tolerance " << kTolerance;
  const auto run = cohort::testing::run_command(command.str());
  const double diff = cohort::testing::value_after(run.out, "max-diff: ");
  const double diff_bn = cohort::testing::value_after(run.out, "max-diff-batchnorm: ");
  std::cout << "max-diff " << diff << " (SyncBatchNorm), " << diff_bn << " (BatchNorm on the whole batch)\n";
  EXPECT_EQ(run.code, 0) << command.str() << "\nfiles kept in " << dir << ". Output:\n" << run.out.substr(0, 4000);
  ASSERT_GE(diff, 0) << "no 'max-diff:' line in the output:\n" << run.out.substr(0, 4000);
  EXPECT_LT(diff, kTolerance);
  EXPECT_LT(diff_bn, kTolerance);
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir);
}

}  // namespace

TEST(SyncBatchNormParity, Images2dFloat64MatchesPytorch) { check_parity({{3, 4, 4}, torch::kDouble}); }
TEST(SyncBatchNormParity, Sequences1dCumulativeAverageWithoutAffineMatchesPytorch) {
  check_parity({{4, 5}, torch::kFloat, c10::nullopt, /*affine=*/false});
}
TEST(SyncBatchNormParity, Volumes3dWithoutRunningStatsMatchesPytorch) {
  check_parity({{2, 2, 3, 3}, torch::kFloat, 0.3, /*affine=*/true, /*track=*/false});
}

TEST(SyncBatchNorm, RejectsInputsOfFewerThanTwoDimensions) {
  cohort::SyncBatchNorm bn(4);
  EXPECT_EQ(error_of([&] { bn(torch::randn({4})); }), "SyncBatchNorm: expected at least 2D input (got 1D input)");
}

TEST(SyncBatchNorm, RejectsInputsWhoseChannelsAreNotNumFeatures) {
  cohort::SyncBatchNorm bn(4);
  EXPECT_EQ(error_of([&] { bn(torch::randn({8, 3, 2, 2})); }),
            "SyncBatchNorm: the input of shape [8, 3, 2, 2] has 3 channels (dimension 1), but num_features is 4");
}

TEST(SyncBatchNorm, RejectsNonPositiveNumFeatures) {
  EXPECT_EQ(error_of([] { cohort::SyncBatchNorm bn(0); }),
            "SyncBatchNormOptions: num_features must be positive, got 0");
}

// A lone process is a world of one: SyncBatchNorm is BatchNorm, in training and in eval.
TEST(SyncBatchNorm, WorldOfOneIsBatchNorm) {
  for (const c10::optional<double> momentum : {c10::optional<double>(0.1), c10::optional<double>()}) {
    torch::manual_seed(5);
    cohort::SyncBatchNorm sync(cohort::SyncBatchNormOptions(3).momentum(momentum));
    torch::nn::BatchNorm2d plain(torch::nn::BatchNorm2dOptions(3).momentum(momentum));
    for (int step = 0; step < 3; ++step) {
      const auto x = torch::randn({4, 3, 2, 2}) * 3 + 1, g = torch::randn({4, 3, 2, 2});
      auto a = x.clone().requires_grad_(true), b = x.clone().requires_grad_(true);
      sync->zero_grad();
      plain->zero_grad();
      auto ya = sync(a), yb = plain(b);
      ya.backward(g);
      yb.backward(g);
      EXPECT_TRUE(torch::allclose(ya, yb, 1e-5, 1e-6));
      EXPECT_TRUE(torch::allclose(a.grad(), b.grad(), 1e-5, 1e-6));
      EXPECT_TRUE(torch::allclose(sync->weight.grad(), plain->weight.grad(), 1e-5, 1e-6));
    }
    EXPECT_TRUE(torch::allclose(sync->running_var, plain->running_var, 1e-5, 1e-6));
    EXPECT_EQ(sync->num_batches_tracked.item<int64_t>(), 3);
    sync->eval();
    plain->eval();
    const auto x = torch::randn({2, 3, 2, 2});
    EXPECT_TRUE(torch::allclose(sync(x), plain(x), 1e-5, 1e-6));
  }
}

// Eval mode normalizes with the running statistics and talks to no rank: rank 0 alone runs two eval
// forwards, and the next collective of both ranks still matches (a hidden allgather would not).
TEST(SyncBatchNorm, EvalModeMakesNoCollective) {
  run_ranks(2, [](int rank, int) {
    auto world = cohort::init();
    cohort::SyncBatchNorm bn(3);
    bn->eval();
    if (rank == 0) {
      torch::NoGradGuard no_grad;
      bn(torch::randn({4, 3}));
      EXPECT_TRUE(torch::allclose(bn(torch::ones({2, 3})), torch::ones({2, 3}) / std::sqrt(1 + 1e-5)));
    }
    EXPECT_EQ(world.comm().allreduce(torch::ones({1})).item<float>(), 2.0f);
  });
}

TEST(SyncBatchNorm, EveryRankWithAnEmptyBatchIsAnError) {
  run_ranks(2, [](int rank, int) {
    cohort::init();
    cohort::SyncBatchNorm bn(3);
    EXPECT_EQ(error_of([&] { bn(torch::randn({0, 3, 2})); }),
              "[rank " + std::to_string(rank) + "/2] SyncBatchNorm: every rank's batch is empty (2 ranks, 0 rows): "
              "there are no batch statistics to normalize with");
  });
}

namespace {

// BatchNorms in each container LibTorch has, below a module that holds the containers as members.
struct Containers : torch::nn::Module {
  Containers() {
    features = register_module("features", torch::nn::Sequential(torch::nn::Conv2d(1, 3, 3),
                                                                 torch::nn::BatchNorm2d(3), torch::nn::ReLU()));
    heads = register_module("heads", torch::nn::ModuleList(torch::nn::BatchNorm1d(4)));
    extra = register_module("extra", torch::nn::ModuleDict(std::vector<std::pair<std::string, std::shared_ptr<Module>>>{
                                         {"norm", torch::nn::BatchNorm3d(2).ptr()}}));
  }
  torch::nn::Sequential features{nullptr};
  torch::nn::ModuleList heads{nullptr};
  torch::nn::ModuleDict extra{nullptr};
};

// A BatchNorm its parent calls through a typed member holder.
struct MemberHolder : torch::nn::Module {
  MemberHolder() {
    inner = register_module("inner", torch::nn::Sequential(torch::nn::BatchNorm1d(2)));
    bn = register_module("bn", torch::nn::BatchNorm2d(3));
  }
  torch::nn::Sequential inner{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
};

std::vector<std::string> names_of(const torch::OrderedDict<std::string, torch::Tensor>& items) {
  std::vector<std::string> names;
  for (const auto& item : items) names.push_back(item.key());
  return names;
}

}  // namespace

TEST(ConvertSyncBatchNorm, ReplacesTheBatchNormsOfSequentialModuleListAndModuleDict) {
  Containers model;
  model.eval();
  const auto parameters = names_of(model.named_parameters()), buffers = names_of(model.named_buffers());
  const torch::Tensor old_weight = model.features[1]->as<torch::nn::BatchNorm2d>()->weight;
  const auto converted = cohort::convert_sync_batchnorm(model);
  EXPECT_EQ(converted, (std::vector<std::string>{"features.1", "heads.0", "extra.norm"}));
  const auto sync = std::dynamic_pointer_cast<cohort::SyncBatchNormImpl>(model.features->ptr(1));  // what the Sequential calls
  ASSERT_NE(sync, nullptr);
  EXPECT_TRUE(sync->weight.is_same(old_weight));  // shared: an optimizer made before keeps working
  EXPECT_FALSE(sync->is_training());
  EXPECT_NE(std::dynamic_pointer_cast<cohort::SyncBatchNormImpl>(model.heads->ptr(0)), nullptr);
  EXPECT_NE(std::dynamic_pointer_cast<cohort::SyncBatchNormImpl>(model.extra["norm"]), nullptr);
  EXPECT_EQ(names_of(model.named_parameters()), parameters);
  EXPECT_EQ(names_of(model.named_buffers()), buffers);
  EXPECT_EQ(model.features->forward(torch::randn({2, 1, 5, 5})).sizes(), (std::vector<int64_t>{2, 3, 3, 3}));
}

TEST(ConvertSyncBatchNorm, RefusesABatchNormHeldByAMemberAndConvertsNothing) {
  MemberHolder model;
  EXPECT_EQ(error_of([&] { cohort::convert_sync_batchnorm(model); }),
            "convert_sync_batchnorm: 'bn' (BatchNorm2d) is also held outside its parent's registered children (a "
            "member holder such as `torch::nn::BatchNorm2d bn` keeps calling the old module), so converting it "
            "would leave plain BatchNorm running; declare it as cohort::SyncBatchNorm, or hold it in a Sequential, "
            "ModuleList or ModuleDict (nothing was converted)");
  EXPECT_NE(std::dynamic_pointer_cast<torch::nn::BatchNorm1dImpl>(model.inner->ptr(0)), nullptr);
}

TEST(ConvertSyncBatchNorm, RefusesABatchNormAsTheRoot) {
  torch::nn::BatchNorm2d bn(3);
  EXPECT_EQ(error_of([&] { cohort::convert_sync_batchnorm(*bn); }),
            "convert_sync_batchnorm: the module itself is a BatchNorm; construct a cohort::SyncBatchNorm in its "
            "place (the function converts the BatchNorms below a module)");
}

namespace {

constexpr int64_t kTrainerBatch = 4, kTrainerEpochs = 2;  // 64 samples, 2 ranks: 8 steps per epoch

torch::nn::Sequential bn_network() {
  torch::manual_seed(7);
  return torch::nn::Sequential(torch::nn::Linear(6, 8), torch::nn::BatchNorm1d(8), torch::nn::ReLU(),
                               torch::nn::Linear(8, 3));
}

struct BatchNormModule : cohort::TrainingModule {
  BatchNormModule() : TrainingModule(bn_network()) {}
  torch::Tensor training_step(cohort::Batch& batch, int64_t) override {
    return torch::nn::functional::cross_entropy(forward(batch.data), batch.target);
  }
  std::unique_ptr<torch::optim::Optimizer> configure_optimizers(std::vector<torch::Tensor> parameters) override {
    return std::make_unique<torch::optim::SGD>(parameters, torch::optim::SGDOptions(0.1));
  }
};

// One process with plain BatchNorm on the global batches: rank 0's and rank 1's k-th batches together.
std::vector<std::pair<std::string, torch::Tensor>> one_process_on_global_batches() {
  auto data = cohort::testing::tiny_data();
  auto net = bn_network();
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1));
  std::vector<cohort::DistributedSampler> samplers;
  for (int r = 0; r < 2; ++r)
    samplers.emplace_back(data->size(), cohort::SamplerOptions().num_replicas(2).rank(r).shuffle(true).seed(0));
  for (int64_t epoch = 0; epoch < kTrainerEpochs; ++epoch) {
    for (auto& sampler : samplers) sampler.set_epoch(epoch);
    const auto first = samplers[0].batch_tensors(kTrainerBatch), second = samplers[1].batch_tensors(kTrainerBatch);
    for (size_t k = 0; k < first.size(); ++k) {
      const auto batch = data->get_batch(torch::cat({first[k], second[k]}));
      sgd.zero_grad();
      torch::nn::functional::cross_entropy(net->forward(batch.data), batch.target).backward();
      sgd.step();
    }
  }
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : net->named_parameters()) out.emplace_back(item.key(), item.value().detach().clone());
  for (const auto& item : net->named_buffers()) out.emplace_back(item.key(), item.value().detach().clone());
  return out;
}

}  // namespace

// Lightning's sync_batchnorm: 2 ranks of 4 rows train as one process on batches of 8, running statistics
// included (plain BatchNorm would normalise each rank's 4 rows alone).
TEST(SyncBatchNormTrainer, TwoRanksTrainAsOneProcessOnTheGlobalBatch) {
  run_ranks(2, [](int, int) {
    cohort::init();
    const auto expected = one_process_on_global_batches();
    for (const std::string strategy : {"ddp", "zero2"}) {
      cohort::Trainer trainer(cohort::TrainerOptions().strategy(strategy).sync_batchnorm(true).accelerator("cpu")
                                  .max_epochs(kTrainerEpochs).enable_progress_bar(false)
                                  .enable_checkpointing(false).logger(false));
      BatchNormModule module;
      cohort::DataLoader loader(cohort::testing::tiny_data(),
                                cohort::LoaderOptions().batch_size(kTrainerBatch).shuffle(true));
      trainer.fit(module, loader);
      std::map<std::string, torch::Tensor> trained;
      for (const auto& [name, value] : trainer.full_parameters()) trained[name] = value;
      for (const auto& item : module.model().named_buffers()) trained[item.key()] = item.value();
      EXPECT_NE(std::dynamic_pointer_cast<cohort::SyncBatchNormImpl>(module.network()->ptr(1)), nullptr);
      for (const auto& [name, value] : expected) {
        ASSERT_EQ(trained.count(name), 1u) << strategy << ": " << name;
        EXPECT_TRUE(torch::allclose(trained[name].to(value.dtype()), value, 1e-5, 1e-5))
            << strategy << ": " << name << " differs by "
            << (trained[name].to(torch::kDouble) - value.to(torch::kDouble)).abs().max().item<double>();
      }
    }
  });
}

TEST(SyncBatchNormTrainer, RefusedWithStrategiesThatCannotSynchronise) {
  EXPECT_EQ(error_of([] { cohort::detail::resolve_options(cohort::TrainerOptions().strategy("dp").sync_batchnorm(true), false); }),
            "TrainerOptions.sync_batchnorm \"true\" is not accepted: expected false with strategy \"dp\" (ddp, "
            "zero1-3, fsdp and deepspeed synchronise BatchNorm)");
}

}  // namespace sync_batchnorm_test
