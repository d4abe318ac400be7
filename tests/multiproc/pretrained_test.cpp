// cohort::load_pretrained into a ZeRO engine (issue 42, "pretrained weights streamed into shards"): a
// model built under ShardedInit and loaded from a safetensors file (or a sharded set's index) holds
// the file's parameters exactly and trains exactly as the same model loaded whole before the engine
// took it, at stages 1-3 and HSDP; each rank reads about its shard's bytes, not the file's; a
// tensor missing from the file fails every rank with its name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "cohort/fsdp.h"
#include "cohort/mesh.h"
#include "cohort/safetensors.h"
#include "cohort/world.h"
#include "cohort/zero.h"
#include "support/errors.h"
#include "support/multiproc.h"

namespace pretrained_test {

using cohort::testing::error_of;
using cohort::testing::run_ranks;
using ::testing::HasSubstr;

namespace {

constexpr int64_t kWidth = 256;
constexpr int kUnits = 4;

struct LayersImpl : torch::nn::Module {
  explicit LayersImpl(int seed) {
    torch::manual_seed(seed);
    for (int i = 0; i < kUnits; ++i)
      units.push_back(cohort::fully_shard(register_module("l" + std::to_string(i), torch::nn::Linear(kWidth, kWidth))));
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kWidth})));
    scale = register_buffer("scale", torch::full({kWidth}, 0.5f + float(seed)));
  }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& unit : units) x = torch::tanh(unit(x));
    return norm->forward(x) * scale;
  }
  std::vector<cohort::Unit<torch::nn::LinearImpl>> units;
  torch::nn::LayerNorm norm{nullptr};
  torch::Tensor scale;
};
TORCH_MODULE(Layers);

// The "pretrained" model every rank writes alike to its own file (seed 7).
std::map<std::string, torch::Tensor> pretrained_tensors() {
  Layers model(7);
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : model->named_parameters()) out[item.key()] = item.value().detach().clone();
  for (const auto& item : model->named_buffers()) out[item.key()] = item.value().clone();
  return out;
}

std::string temp_dir() {
  char name[] = "/tmp/pretrained_test_XXXXXX";
  return ::mkdtemp(name);
}

cohort::ZeroConfig config_of(int stage) {
  return cohort::ZeroConfig()
      .optimizer(cohort::OptimizerConfig().type(cohort::OptimizerType::kAdamW).lr(0.01))
      .zero_optimization(cohort::ZeroOptimizationConfig().stage(stage));
}

// Two AdamW steps on each rank's own batch; the full parameters after them.
std::map<std::string, torch::Tensor> train(cohort::ZeroEngine<LayersImpl>& engine, int rank) {
  for (int step = 0; step < 2; ++step) {
    torch::manual_seed(100 * step + rank);
    engine.backward(engine.forward(torch::randn({3, kWidth})).pow(2).mean());
    engine.step();
  }
  std::map<std::string, torch::Tensor> out;
  for (const auto& [name, value] : engine.full_parameters()) out[name] = value;
  return out;
}

double max_difference(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b) {
  double worst = 0;
  for (const auto& [name, value] : a) worst = std::max(worst, (value - b.at(name)).abs().max().item<double>());
  return worst;
}

// Bytes this process has read through read(2)/pread(2) so far (/proc/self/io's rchar).
int64_t bytes_read() {
  std::ifstream io("/proc/self/io");
  std::string key;
  int64_t value = 0;
  while (io >> key >> value)
    if (key == "rchar:") return value;
  return -1;
}

}  // namespace

TEST(LoadPretrained, ShardedInitModelsHoldTheFilesParametersAndTrainAsOnesLoadedWhole) {
  run_ranks(2, [](int rank, int) {
    cohort::init();
    const std::string dir = temp_dir();
    const auto file = pretrained_tensors();
    cohort::save_safetensors(file, dir + "/model.safetensors");
    for (int stage : {1, 2, 3}) {
      Layers whole(7);  // the file's model, whole, before the engine takes it
      auto reference = cohort::initialize(config_of(stage), whole);
      Layers sharded{nullptr};
      if (stage == 3) {
        cohort::ShardedInit scope;
        sharded = Layers(50 + rank);  // each rank's own (wrong) initialisation, never whole
      } else {
        sharded = Layers(50 + rank);
      }
      auto engine = cohort::initialize(config_of(stage), sharded);
      cohort::load_pretrained(engine, dir + "/model.safetensors");
      std::map<std::string, torch::Tensor> loaded;
      for (const auto& [name, value] : engine.full_parameters()) loaded[name] = value;
      EXPECT_EQ(max_difference(loaded, file), 0.0) << "stage " << stage;
      EXPECT_TRUE(torch::equal(sharded->scale, file.at("scale"))) << "stage " << stage;  // a buffer, whole
      EXPECT_EQ(max_difference(train(engine, rank), train(reference, rank)), 0.0) << "stage " << stage;
    }
    std::filesystem::remove_all(dir);
  });
}

TEST(LoadPretrained, HsdpAndASplitSetReadOnlyTheirShardsBytes) {
  run_ranks(4, [](int rank, int) {
    const cohort::World world = cohort::init();
    const std::string dir = temp_dir();
    const auto file = pretrained_tensors();
    // Hugging Face's sharded layout: two files and the index naming each tensor's file.
    std::map<std::string, torch::Tensor> first, second;
    std::string map;
    for (const auto& [name, value] : file) {
      const bool early = name < "l2";
      (early ? first : second)[name] = value;
      map += std::string(map.empty() ? "" : ", ") + "\"" + name + "\": \"model-0000" + (early ? "1" : "2") +
             "-of-00002.safetensors\"";
    }
    cohort::save_safetensors(first, dir + "/model-00001-of-00002.safetensors");
    cohort::save_safetensors(second, dir + "/model-00002-of-00002.safetensors");
    std::ofstream(dir + "/model.safetensors.index.json") << "{\"metadata\": {}, \"weight_map\": {" << map << "}}";
    const int64_t file_bytes = int64_t(std::filesystem::file_size(dir + "/model-00001-of-00002.safetensors") +
                                       std::filesystem::file_size(dir + "/model-00002-of-00002.safetensors"));
    // HSDP: 2 replicas x 2 shards; each rank keeps half of every unit.
    cohort::Mesh mesh(world.comm(), {{"replicate", 2}, {"shard", 2}});
    Layers model{nullptr};
    {
      cohort::ShardedInit scope(
          cohort::ShardedInitOptions().comm(mesh.group_ptr("shard")).replicate_comm(mesh.group_ptr("replicate")));
      model = Layers(50 + rank);
    }
    auto engine = cohort::initialize(
        config_of(3), model,
        cohort::EngineOptions().comm(mesh.group_ptr("shard")).replicate_comm(mesh.group_ptr("replicate")));
    const int64_t before = bytes_read();
    cohort::load_pretrained(engine, dir + "/model.safetensors.index.json");
    const int64_t read = bytes_read() - before;
    cohort::testing::report("rank " + std::to_string(rank) + " read " + std::to_string(read) + " of " +
                            std::to_string(file_bytes) + " bytes");
    // Half the parameters, the two headers, the index, a buffer and LayerNorm whole: well under 60%.
    EXPECT_LT(read, file_bytes * 6 / 10);
    EXPECT_GT(read, file_bytes * 4 / 10);
    std::map<std::string, torch::Tensor> loaded;
    for (const auto& [name, value] : engine.full_parameters()) loaded[name] = value;
    EXPECT_EQ(max_difference(loaded, file), 0.0);
    std::filesystem::remove_all(dir);
  });
}

TEST(LoadPretrained, ATensorMissingFromTheFileFailsEveryRankNamingIt) {
  run_ranks(2, [](int rank, int) {
    cohort::init();
    const std::string dir = temp_dir();
    auto file = pretrained_tensors();
    file.erase("l3.weight");  // every rank is asked for every parameter (for none of its elements too)
    cohort::save_safetensors(file, dir + "/model.safetensors");
    Layers model{nullptr};
    {
      cohort::ShardedInit scope;
      model = Layers(50 + rank);
    }
    auto engine = cohort::initialize(config_of(3), model);
    const std::string error = error_of([&] { cohort::load_pretrained(engine, dir + "/model.safetensors"); });
    EXPECT_THAT(error, HasSubstr(dir + "/model.safetensors: no tensor 'l3.weight'"));
    EXPECT_EQ(error.find("[rank"), error.rfind("[rank")) << error;  // the reader's own error, prefixed once
    std::filesystem::remove_all(dir);
  });
}

}  // namespace pretrained_test
