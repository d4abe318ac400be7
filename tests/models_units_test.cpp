// models/resnet.h's ResNet-18 (unchanged: its BasicBlocks become units through a policy) and
// models/vit.h's ViT (its blocks are units in its own code) under ZeRO stage 3 on 2 and 4 rank
// processes: 10 steps end at the parameters of one process on the global batch (1e-5), once with
// SGD-momentum, reshard_after_forward and activation checkpointing on, once with AdamW and both off.
// Small inputs (8x8 images, 2 per rank) keep it lean; the widths are the real models'.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cohort/fsdp.h"
#include "cohort/world.h"
#include "cohort/zero.h"
#include "models/resnet.h"
#include "models/vit.h"
#include "support/multiproc.h"

namespace models_units_test {

using cohort::testing::report;
using cohort::testing::run_ranks;

namespace {

constexpr int kSteps = 10, kRows = 2, kImage = 8;

struct Variant {
  bool adamw = false, reshard = true, recompute = false;
};

std::shared_ptr<torch::nn::Module> make_model(const std::string& name, cohort::UnitOptions unit) {
  torch::manual_seed(7);
  if (name == "resnet18") return cohort::models::ResNet18(cohort::models::ResNet18Options().num_classes(10).cifar_stem(true)).ptr();
  return cohort::models::ViT(cohort::models::ViTOptions().image_size(kImage).patch_size(4).hidden_dim(32).depth(2)
                                 .num_heads(2).mlp_dim(64).unit(unit)).ptr();
}

torch::Tensor run(torch::nn::Module& model, const torch::Tensor& x) {
  if (auto* resnet = dynamic_cast<cohort::models::ResNet18Impl*>(&model)) return resnet->forward(x);
  return dynamic_cast<cohort::models::ViTImpl&>(model).forward(x);
}

std::pair<torch::Tensor, torch::Tensor> global_batch(int step, int size) {
  torch::manual_seed(100 + step);
  return {torch::randn({int64_t(size) * kRows, 3, kImage, kImage}), torch::randint(0, 10, {int64_t(size) * kRows})};
}

torch::Tensor chunk_loss(torch::nn::Module& model, const std::pair<torch::Tensor, torch::Tensor>& batch, int k) {
  return torch::nn::functional::cross_entropy(run(model, batch.first.narrow(0, k * kRows, kRows)),
                                              batch.second.narrow(0, k * kRows, kRows));
}

// One process, the global batch in the ranks' chunks (BatchNorm sees what each rank sees), each
// chunk's loss divided by their number: what averaging the gradients over ranks computes.
std::map<std::string, torch::Tensor> train_reference(const std::string& name, const Variant& v, int size) {
  auto model = make_model(name, {});
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (v.adamw)
    opt = std::make_unique<torch::optim::AdamW>(model->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
  else
    opt = std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.002).momentum(0.9));
  for (int step = 0; step < kSteps; ++step) {
    const auto batch = global_batch(step, size);
    opt->zero_grad();
    for (int k = 0; k < size; ++k) (chunk_loss(*model, batch, k) / size).backward();
    opt->step();
  }
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : model->named_parameters()) out[item.key()] = item.value().detach().clone();
  return out;
}

void sharded_equals_one_process(const std::string& name, int rank, int size) {
  cohort::init();
  for (const Variant v : {Variant{false, true, true}, Variant{true, false, false}}) {
    const auto unit = cohort::UnitOptions().reshard_after_forward(v.reshard).activation_checkpointing(v.recompute);
    auto model = make_model(name, unit);
    auto optimizer = v.adamw ? cohort::OptimizerConfig().type(cohort::OptimizerType::kAdamW).lr(1e-3).weight_decay(0.01)
                             : cohort::OptimizerConfig().type(cohort::OptimizerType::kSgd).lr(0.002).momentum(0.9);
    auto config = cohort::ZeroConfig().world_size(size).optimizer(optimizer).zero_optimization(
        cohort::ZeroOptimizationConfig().stage(3).overlap_comm(true));
    cohort::EngineOptions options;
    if (name == "resnet18")  // the model's code is unchanged: a policy makes its blocks units
      options.unit_policy(cohort::units_of_type<cohort::models::BasicBlockImpl>()).unit_options(unit);
    auto engine = cohort::initialize(config, model, options);
    for (int step = 0; step < kSteps; ++step) {
      const auto batch = global_batch(step, size);
      engine.backward(engine.run_forward([&] { return chunk_loss(*model, batch, rank); }));
      engine.step();
    }
    const auto full = engine.full_parameters();  // a collective: every rank takes part
    if (rank != 0) continue;  // one reference is enough: the other ranks wait (asleep) in the next collective
    const auto reference = train_reference(name, v, size);
    const auto initial = make_model(name, {})->named_parameters();
    double worst = 0, moved = 0;
    for (const auto& [key, value] : full) {
      worst = std::max(worst, (value - reference.at(key)).abs().max().item<double>());
      moved = std::max(moved, (value - initial[key]).abs().max().item<double>());
    }
    const std::string what = name + (v.adamw ? " adamw" : " sgd-m") + (v.reshard ? " reshard" : " keep") +
                             (v.recompute ? " recompute" : "") + " on " + std::to_string(size) + " ranks";
    report(what + ": max diff " + std::to_string(worst) + ", moved " + std::to_string(moved));
    EXPECT_LT(worst, 1e-5) << what;
    EXPECT_GT(moved, 1e-3) << what << ": it did not train";
  }
}

void print_reports(const std::vector<cohort::testing::RankResult>& results) {
  for (const auto& line : results.at(0).reports) std::printf("%s\n", line.c_str());
}

}  // namespace

class ModelUnits : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(ModelUnits, Stage3MatchesOneProcessOverTenSteps) {
  const auto [name, ranks] = GetParam();
  cohort::testing::RanksOptions options;
  options.deadline = std::chrono::seconds(240);
  print_reports(run_ranks(ranks, [name = name](int rank, int size) { sharded_equals_one_process(name, rank, size); },
                          options));
}

INSTANTIATE_TEST_SUITE_P(Models, ModelUnits,
                         ::testing::Combine(::testing::Values("resnet18", "vit"), ::testing::Values(2, 4)));

}  // namespace models_units_test
