// The models of models/ against PyTorch's definitions and on real rank processes. Parameter names,
// shapes and counts must equal models/pytorch_models.py's (torchvision's layouts, e.g.
// resnet18() 11,689,512 parameters; nanoGPT's names, GPT-2's counts); ResNet-18 (CIFAR stem) and the
// ViT must train on 2 ranks with DDP, ZeRO-2 and ZeRO-3 with sharding units to a falling loss and to
// the parameters of one process stepping on the global batch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <sstream>

#include "cohort/ddp.h"
#include "cohort/world.h"
#include "cohort/zero.h"
#include "models/fashion_mnist_net.h"
#include "models/gpt.h"
#include "models/resnet.h"
#include "models/vit.h"
#include "support/multiproc.h"
#include "support/python.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace models_test {

using cohort::models::GPT;
using cohort::models::GPTConfig;
using cohort::models::ResNet18;
using cohort::models::ResNet18Options;
using cohort::models::ViT;
using cohort::models::ViTOptions;
using cohort::testing::report;
using cohort::testing::run_ranks;

namespace {

using Shapes = std::map<std::string, std::vector<int64_t>>;

Shapes shapes_of(const torch::nn::Module& model) {
  Shapes shapes;
  for (const auto& p : model.named_parameters()) shapes[p.key()] = p.value().sizes().vec();
  return shapes;
}

// The C++ twin of each entry of models/pytorch_models.py's MODELS.
std::map<std::string, std::shared_ptr<torch::nn::Module>> cpp_models() {
  return {
      {"resnet18_imagenet", ResNet18().ptr()},
      {"resnet18_10", ResNet18(ResNet18Options().num_classes(10)).ptr()},
      {"resnet18_cifar", ResNet18(ResNet18Options().num_classes(10).cifar_stem(true)).ptr()},
      {"vit_small_cifar", ViT().ptr()},
      {"vit_b_16", ViT(ViTOptions().image_size(224).patch_size(16).hidden_dim(768).depth(12).num_heads(12)
                           .mlp_dim(3072).num_classes(1000)).ptr()},
      {"vit_tiny_16px", ViT(ViTOptions().image_size(16).patch_size(4).hidden_dim(32).depth(2).num_heads(2)
                                .mlp_dim(64)).ptr()},
      {"fashion_mnist_cnn", fashion_mnist::Net().ptr()},
      {"gpt_mini_chars", GPT(GPTConfig().n_layer(6).n_head(6).n_embd(192).block_size(256).vocab_size(96)).ptr()},
      {"gpt_tiny_nobias", GPT(GPTConfig().n_layer(2).n_head(2).n_embd(16).block_size(8).vocab_size(11).bias(false)).ptr()},
  };
}

// Runs the reference script: model name -> parameter name -> shape.
std::map<std::string, Shapes> python_shapes() {
  const char* root = std::getenv("COHORT_SOURCE_DIR");
  const std::string here = __FILE__;
  const std::string source = root != nullptr && *root != '\0' ? std::string(root)
                                                                : here.substr(0, here.find_last_of('/')) + "/..";
  const std::string command = cohort::testing::python_with_torch() + " " + source + "/models/pytorch_models.py 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr) << command;
  if (pipe == nullptr) return {};
  std::string output;
  char buffer[4096];
  for (size_t got; (got = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) output.append(buffer, got);
  const int status = pclose(pipe);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << command << " failed:\n" << output.substr(0, 2000);
  std::map<std::string, Shapes> models;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream in(line);
    std::string tag, model, name;
    in >> tag >> model >> name;
    if (tag != "param") continue;
    auto& shape = models[model][name];
    for (int64_t size; in >> size;) shape.push_back(size);
  }
  return models;
}

int64_t count(const torch::nn::Module& model) {
  int64_t total = 0;
  for (const auto& p : model.parameters()) total += p.numel();
  return total;
}

TEST(Models, ParametersEqualPyTorchsDefinitionsNameForName) {
  const auto expected = python_shapes();
  const auto models = cpp_models();
  ASSERT_EQ(expected.size(), models.size()) << "models/pytorch_models.py and cpp_models() list different models";
  for (const auto& [name, model] : models) {
    ASSERT_EQ(expected.count(name), 1u) << name << " is missing from models/pytorch_models.py's output";
    EXPECT_EQ(shapes_of(*model), expected.at(name)) << name;
  }
}

TEST(Models, CountsEqualTorchvisions) {
  // torchvision.models.resnet18() and (num_classes=10), vit_b_16(): their published counts.
  EXPECT_EQ(count(*ResNet18()), 11689512);
  EXPECT_EQ(count(*ResNet18(ResNet18Options().num_classes(10))), 11181642);
  EXPECT_EQ(count(*ViT(ViTOptions().image_size(224).patch_size(16).hidden_dim(768).depth(12).num_heads(12)
                           .mlp_dim(3072).num_classes(1000))),
            86567656);
}

TEST(Models, ForwardGivesLogitsPerImage) {
  torch::NoGradGuard no_grad;
  EXPECT_EQ(ResNet18(ResNet18Options().num_classes(10).cifar_stem(true))->forward(torch::randn({2, 3, 32, 32})).sizes(),
            (std::vector<int64_t>{2, 10}));
  EXPECT_EQ(ResNet18()->forward(torch::randn({1, 3, 64, 64})).sizes(), (std::vector<int64_t>{1, 1000}));
  EXPECT_EQ(ViT()->forward(torch::randn({3, 3, 32, 32})).sizes(), (std::vector<int64_t>{3, 10}));
}

TEST(Models, ViTRejectsAnImageThatPatchesDoNotTile) {
  try {
    ViT(ViTOptions().image_size(30).patch_size(4));
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("ViT: image_size 30 is not a multiple of patch_size 4"));
  }
}

TEST(Models, GptParameterCountIsTheFormula) {
  // GPT-2's published sizes (the tied head counted once), and the ones built here counted.
  EXPECT_EQ(cohort::models::gpt_num_parameters(cohort::models::gpt_config("gpt2")), 124439808);
  EXPECT_EQ(cohort::models::gpt_num_parameters(cohort::models::gpt_config("gpt2-medium")), 354823168);
  EXPECT_EQ(cohort::models::gpt_num_parameters(cohort::models::gpt_config("gpt2-large")), 774030080);
  EXPECT_EQ(cohort::models::gpt_num_parameters(cohort::models::gpt_config("gpt2-xl")), 1557611200);
  EXPECT_EQ(cohort::models::gpt_num_parameters(cohort::models::gpt_config("gpt-1b")), 1017302272);
  for (const auto& config : {cohort::models::gpt_config("gpt-nano"), cohort::models::gpt_config("gpt-micro").vocab_size(65),
                             GPTConfig().n_layer(3).n_head(2).n_embd(20).block_size(9).vocab_size(7).bias(false)})
    EXPECT_EQ(count(*GPT(config)), cohort::models::gpt_num_parameters(config)) << config.n_layer() << " layers";
  EXPECT_EQ(cohort::models::gpt_configs().size(), 8u);
}

TEST(Models, GptLogitsAtAPositionIgnoreLaterTokens) {
  torch::manual_seed(0);
  GPT gpt(GPTConfig().n_layer(2).n_head(2).n_embd(16).block_size(8).vocab_size(11));
  gpt->eval();
  torch::NoGradGuard no_grad;
  auto tokens = torch::randint(0, 11, {2, 8});
  auto logits = gpt->forward(tokens);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 8, 11}));
  auto changed = tokens.clone();
  changed.index_put_({torch::indexing::Slice(), 5}, (tokens.select(1, 5) + 1) % 11);
  auto again = gpt->forward(changed);
  EXPECT_TRUE(torch::allclose(again.narrow(1, 0, 5), logits.narrow(1, 0, 5)));  // causal
  EXPECT_FALSE(torch::allclose(again.narrow(1, 5, 3), logits.narrow(1, 5, 3)));
  EXPECT_EQ(gpt->generate(tokens.narrow(1, 0, 6), 5, 1.0, 3).sizes(), (std::vector<int64_t>{2, 11}));
}

TEST(Models, GptAttentionIsSoftmaxOfMaskedScores) {
  torch::manual_seed(1);
  auto q = torch::randn({2, 3, 5, 4}), k = torch::randn({2, 3, 5, 4}), v = torch::randn({2, 3, 5, 4});
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / 2.0;  // sqrt(head size 4)
  scores = scores.masked_fill(torch::ones({5, 5}, torch::kBool).triu(1), -1e30);
  auto expected = torch::matmul(torch::softmax(scores, -1), v);
  EXPECT_TRUE(torch::allclose(cohort::models::causal_attention(q, k, v, 0.0), expected, 1e-5, 1e-6));
}

std::string c10_error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  ADD_FAILURE() << "expected an error";
  return "";
}

TEST(Models, GptRefusesBadConfigurations) {
  using ::testing::HasSubstr;
  EXPECT_THAT(c10_error_of([] { GPT(GPTConfig().n_layer(1).n_head(3).n_embd(16).block_size(4).vocab_size(5)); }),
              HasSubstr("GPT: n_embd 16 is not a multiple of n_head 3"));
  EXPECT_THAT(c10_error_of([] { GPT(GPTConfig().n_layer(1).n_head(2).n_embd(16).block_size(4).vocab_size(5).dropout(1)); }),
              HasSubstr("GPT: dropout 1 is not in [0, 1)"));
  EXPECT_THAT(c10_error_of([] { GPT(GPTConfig().n_layer(0).n_head(2).n_embd(16).block_size(4).vocab_size(5)); }),
              HasSubstr("GPT: n_layer, n_head, n_embd, block_size and vocab_size must be positive (got 0, 2, 16, 4, 5)"));
  GPT small(GPTConfig().n_layer(1).n_head(2).n_embd(16).block_size(4).vocab_size(5));
  EXPECT_THAT(c10_error_of([&] { small->forward(torch::zeros({1, 5}, torch::kLong)); }),
              HasSubstr("GPT: sequence length 5 is longer than block_size 4"));
  EXPECT_THAT(c10_error_of([] { cohort::models::gpt_config("gpt3"); }),
              HasSubstr("GPT: no configuration named \"gpt3\" (known: gpt-1b, gpt-micro, gpt-mini, gpt-nano, gpt2, "
                        "gpt2-large, gpt2-medium, gpt2-xl)"));
}

// ---- Training on 2 ranks ----

constexpr int kSteps = 4, kBatch = 4, kImage = 16;

std::shared_ptr<torch::nn::Module> make_model(const std::string& name) {
  torch::manual_seed(7);
  if (name == "resnet18") return ResNet18(ResNet18Options().num_classes(10).cifar_stem(true)).ptr();
  return ViT(ViTOptions().image_size(kImage).patch_size(4).hidden_dim(32).depth(2).num_heads(2).mlp_dim(64)).ptr();
}

torch::Tensor run(torch::nn::Module& model, const torch::Tensor& x) {
  if (auto* resnet = dynamic_cast<cohort::models::ResNet18Impl*>(&model)) return resnet->forward(x);
  return dynamic_cast<cohort::models::ViTImpl&>(model).forward(x);
}

// One fixed global batch (the loss must fall on it), the same on every rank.
std::pair<torch::Tensor, torch::Tensor> global_batch(int size) {
  torch::manual_seed(100);
  return {torch::randn({int64_t(size) * kBatch, 3, kImage, kImage}), torch::randint(0, 10, {int64_t(size) * kBatch})};
}

// One process on the global batch, in the ranks' chunks (BatchNorm sees the chunks the ranks see),
// each chunk's loss divided by the number of chunks: what averaging gradients over ranks computes.
std::shared_ptr<torch::nn::Module> train_reference(const std::string& name, int size) {
  auto model = make_model(name);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05));
  auto [x, y] = global_batch(size);
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad();
    for (int k = 0; k < size; ++k)
      (torch::nn::functional::cross_entropy(run(*model, x.narrow(0, k * kBatch, kBatch)), y.narrow(0, k * kBatch, kBatch)) /
       size).backward();
    opt.step();
  }
  return model;
}

double max_difference(const torch::nn::Module& a, const torch::nn::Module& b) {
  double worst = 0;
  auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, (pa[i] - pb[i]).abs().max().item<double>());
  return worst;
}

void check_against_reference(const std::string& what, const std::vector<double>& losses, double diff) {
  EXPECT_LT(losses.back(), losses.front()) << what << ": the loss did not fall";
  EXPECT_LT(diff, 2e-4) << what << ": parameters differ from one process on the global batch";
  std::ostringstream line;
  line << what << " loss " << losses.front() << " -> " << losses.back() << " max diff " << diff;
  report(line.str());
}

void train_ddp(const std::string& name, int rank, int size) {
  auto model = make_model(name);
  cohort::DistributedDataParallel ddp(model);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05));
  auto [x, y] = global_batch(size);
  std::vector<double> losses;
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(run(*model, x.narrow(0, rank * kBatch, kBatch)),
                                                     y.narrow(0, rank * kBatch, kBatch));
    loss.backward();
    opt.step();
    losses.push_back(loss.item<double>());
  }
  check_against_reference(name + " ddp", losses, max_difference(*model, *train_reference(name, size)));
}

// ZeRO stage 2, or stage 3 with units: the ViT's blocks are units of its own code (models/vit.h),
// ResNet-18's BasicBlocks become units through a policy, the model left unchanged, and recompute
// their forward in backward (activation checkpointing).
void train_zero(const std::string& name, int stage, int rank, int size) {
  auto model = make_model(name);
  auto config = cohort::ZeroConfig().world_size(size)
                    .zero_optimization(cohort::ZeroOptimizationConfig().stage(stage).overlap_comm(true))
                    .optimizer(cohort::OptimizerConfig().type(cohort::OptimizerType::kSgd).lr(0.05));
  cohort::EngineOptions options;
  if (name == "resnet18")
    options.unit_policy(cohort::units_of_type<cohort::models::BasicBlockImpl>())
        .unit_options(cohort::UnitOptions().activation_checkpointing(true));
  auto engine = cohort::initialize(config, model, options);
  auto [x, y] = global_batch(size);
  std::vector<double> losses;
  for (int step = 0; step < kSteps; ++step) {
    auto loss = engine.run_forward([&, &x = x, &y = y] {
      return torch::nn::functional::cross_entropy(run(*model, x.narrow(0, rank * kBatch, kBatch)),
                                                  y.narrow(0, rank * kBatch, kBatch));
    });
    engine.backward(loss);
    engine.step();
    losses.push_back(loss.item<double>());
  }
  // The engine's full parameters (gathered from the shards), by name.
  auto reference = train_reference(name, size)->named_parameters();
  double worst = 0;
  for (const auto& [key, value] : engine.full_parameters())
    worst = std::max(worst, (value - reference[key]).abs().max().item<double>());
  check_against_reference(name + " zero" + std::to_string(stage), losses, worst);
}

}  // namespace

class ModelsOnTwoRanks : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelsOnTwoRanks, DdpMatchesOneProcessWithTheGlobalBatch) {
  const std::string name = GetParam();
  auto results = run_ranks(2, [&](int rank, int size) {
    cohort::init();
    train_ddp(name, rank, size);
  });
  for (const auto& r : results)
    for (const auto& line : r.reports) std::printf("rank %d: %s\n", r.rank, line.c_str());
}

TEST_P(ModelsOnTwoRanks, Zero2MatchesOneProcessWithTheGlobalBatch) {
  const std::string name = GetParam();
  auto results = run_ranks(2, [&](int rank, int size) {
    cohort::init();
    train_zero(name, 2, rank, size);
  });
  for (const auto& r : results)
    for (const auto& line : r.reports) std::printf("rank %d: %s\n", r.rank, line.c_str());
}

TEST_P(ModelsOnTwoRanks, Zero3UnitsMatchOneProcessWithTheGlobalBatch) {
  const std::string name = GetParam();
  auto results = run_ranks(2, [&](int rank, int size) {
    cohort::init();
    train_zero(name, 3, rank, size);
  });
  for (const auto& r : results)
    for (const auto& line : r.reports) std::printf("rank %d: %s\n", r.rank, line.c_str());
}

INSTANTIATE_TEST_SUITE_P(Models, ModelsOnTwoRanks, ::testing::Values("resnet18", "vit"));

}  // namespace models_test
