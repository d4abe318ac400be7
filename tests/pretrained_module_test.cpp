// cohort::load_pretrained into a module (DDP, one process): a safetensors file or a Hugging Face
// sharded set loads each tensor straight into its parameter (bf16 on file converted), and every
// mismatch or hostile index is one line that changes nothing. The engine's streamed load is in
// tests/multiproc/pretrained_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "cohort/safetensors.h"
#include "support/errors.h"
#include "support/small_models.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace pretrained_unit_test {

namespace fs = std::filesystem;
using cohort::testing::error_of;
using ::testing::HasSubstr;

namespace {

struct Dir {
  Dir() {
    char name[] = "/tmp/pretrained_unit_XXXXXX";
    path = ::mkdtemp(name);
  }
  ~Dir() { fs::remove_all(path); }
  std::string path;
};

std::map<std::string, torch::Tensor> tensors_of(torch::nn::Module& module) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : module.named_parameters()) out[item.key()] = item.value().detach().clone();
  return out;
}

bool same_parameters(torch::nn::Module& module, const std::map<std::string, torch::Tensor>& tensors) {
  for (const auto& item : module.named_parameters())
    if (!torch::equal(item.value(), tensors.at(item.key()).to(torch::kFloat))) return false;
  return true;
}

// A sharded set of `tensors`: the index `weight_map` text written as given.
void write_index(const std::string& dir, const std::string& weight_map) {
  std::ofstream(dir + "/model.safetensors.index.json") << "{\"metadata\": {}, \"weight_map\": " << weight_map << "}";
}

}  // namespace

TEST(LoadPretrainedModule, AFileOrASplitSetLoadsEveryTensorConvertingItsDtype) {
  Dir dir;
  cohort::testing::Mlp source, target;
  const auto tensors = tensors_of(*source);
  cohort::save_safetensors(tensors, dir.path + "/model.safetensors");
  cohort::load_pretrained(*target, dir.path + "/model.safetensors");
  EXPECT_TRUE(same_parameters(*target, tensors));

  std::map<std::string, torch::Tensor> first, second;  // bf16 on file, the model's float32 in memory
  for (const auto& [name, value] : tensors) (name < "fc2" ? first : second)[name] = value.to(torch::kBFloat16);
  cohort::save_safetensors(first, dir.path + "/a.safetensors");
  cohort::save_safetensors(second, dir.path + "/b.safetensors");
  std::string map;
  for (const auto& [name, value] : tensors)
    map += std::string(map.empty() ? "{" : ", ") + "\"" + name + "\": \"" + (name < "fc2" ? "a" : "b") + ".safetensors\"";
  write_index(dir.path, map + "}");
  cohort::testing::Mlp other;
  cohort::load_pretrained(*other, dir.path + "/model.safetensors.index.json");
  std::map<std::string, torch::Tensor> rounded;
  for (const auto& [name, value] : tensors) rounded[name] = value.to(torch::kBFloat16);
  EXPECT_TRUE(same_parameters(*other, rounded));
}

TEST(LoadPretrainedModule, AMismatchIsOneLineAndChangesNothing) {
  Dir dir;
  cohort::testing::Mlp source, target;
  auto tensors = tensors_of(*source);
  const auto before = tensors_of(*target);
  const std::string path = dir.path + "/model.safetensors";
  auto fails_with = [&](const std::map<std::string, torch::Tensor>& file, const std::string& message) {
    cohort::save_safetensors(file, path);
    EXPECT_THAT(error_of([&] { cohort::load_pretrained(*target, path); }), HasSubstr(message));
    EXPECT_TRUE(same_parameters(*target, before)) << message;
  };
  auto missing = tensors;
  missing.erase("fc3.bias");
  fails_with(missing, path + ": no tensor 'fc3.bias'");
  auto reshaped = tensors;
  reshaped["fc2.weight"] = torch::zeros({32, 31});
  fails_with(reshaped, path + ": tensor 'fc2.weight' has shape [32, 31], the model's [32, 32]");
  auto extra = tensors;
  extra["fc4.weight"] = torch::zeros({2});
  fails_with(extra, path +
                        ": tensor 'fc4.weight' names nothing in the model (strict; StateDictOptions().strict(false) "
                        "ignores it)");
  cohort::load_pretrained(*target, path, cohort::StateDictOptions().strict(false));
  EXPECT_TRUE(same_parameters(*target, tensors));
}

TEST(LoadPretrainedModule, AHostileIndexIsRefusedBeforeAnythingIsRead) {
  Dir dir;
  cohort::testing::Mlp target;
  cohort::save_safetensors(tensors_of(*target), dir.path + "/a.safetensors");
  const std::string index = dir.path + "/model.safetensors.index.json";
  auto refused = [&](const std::string& weight_map, const std::string& message) {
    write_index(dir.path, weight_map);
    EXPECT_THAT(error_of([&] { cohort::load_pretrained(*target, index); }), HasSubstr(message)) << weight_map;
  };
  refused("{\"fc1.weight\": \"../a.safetensors\"}",
          index + ": weight_map gives tensor 'fc1.weight' the file \"../a.safetensors\": expected a file name beside "
                  "the index (no directory part)");
  refused("{\"fc1.weight\": \"/etc/passwd\"}", "expected a file name beside the index (no directory part)");
  refused("{\"fc1.weight\": 3}", "weight_map gives tensor 'fc1.weight' 3, not a file name");
  refused("[]", "weight_map is [], not a map of tensor names to files");
  refused("{\"nothing.here\": \"a.safetensors\"}",
          index + ": weight_map puts tensor 'nothing.here' in " + dir.path + "/a.safetensors, which does not hold it");
  refused("{\"fc1.weight\": \"missing.safetensors\"}", "cannot read safetensors file " + dir.path + "/missing.safetensors");
  refused("{\"a\": {\"b\": {\"c\": 1}}}", "no safetensors index nests so deep");
}

}  // namespace pretrained_unit_test
