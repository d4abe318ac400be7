// Train in C++, use in Python, and back: models/gpt.h's GPT and its PyTorch twin
// (models/pytorch_models.py) exchange weights through safetensors files and give the same loss on a
// fixed batch (1e-5): a file PyTorch wrote loads into the C++ model (cohort::load_safetensors,
// load_state_dict), and the safetensors file cohort-ckpt consolidate makes from a C++ checkpoint loads
// into the Python model. Then the reader's refusals of malformed files, each message exact.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "checkpoint/inspect.h"
#include "cohort/checkpoint.h"
#include "cohort/safetensors.h"
#include "models/gpt.h"
#include "support/errors.h"
#include "support/gpt_fixed_batch.h"
#include "support/python.h"

namespace gpt_interop_test {

namespace fs = std::filesystem;
using cohort::models::GPT;
using cohort::models::GPTConfig;
using cohort::testing::error_of;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char name[] = "/tmp/gpt_interop_test_XXXXXX";
    path = ::mkdtemp(name);
  }
  ~TempDir() { fs::remove_all(path); }
};

using cohort::testing::gpt_fixed_batch;

double loss_of(GPT& gpt) {
  gpt->eval();
  torch::NoGradGuard no_grad;
  const auto& c = gpt->config;
  auto [tokens, targets] = gpt_fixed_batch(c.block_size(), c.vocab_size());
  auto logits = gpt->forward(tokens);
  return torch::nn::functional::cross_entropy(logits.reshape({-1, c.vocab_size()}), targets.reshape(-1)).item<double>();
}

// Runs tests/python/gpt_interop.py with `arguments` and returns the loss it prints.
double python_loss(const std::string& arguments) {
  const char* root = std::getenv("COHORT_SOURCE_DIR");
  const std::string here = __FILE__;
  const std::string source = root != nullptr && *root != '\0' ? root : here.substr(0, here.find_last_of('/')) + "/..";
  const std::string command =
      cohort::testing::python_with_torch() + " " + source + "/tests/python/gpt_interop.py " + arguments + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr) << command;
  if (pipe == nullptr) return -1;
  std::string output;
  char buffer[4096];
  for (size_t got; (got = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) output.append(buffer, got);
  const int status = pclose(pipe);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << command << " failed:\n" << output;
  const auto at = output.rfind("loss ");
  EXPECT_NE(at, std::string::npos) << output;
  return at == std::string::npos ? -1 : std::stod(output.substr(at + 5));
}

std::string config_arguments(const GPTConfig& c) {
  return std::to_string(c.n_layer()) + " " + std::to_string(c.n_head()) + " " + std::to_string(c.n_embd()) + " " +
         std::to_string(c.block_size()) + " " + std::to_string(c.vocab_size()) + " " + (c.bias() ? "1" : "0");
}

const GPTConfig kConfigs[] = {GPTConfig().n_layer(2).n_head(2).n_embd(16).block_size(8).vocab_size(11),
                              GPTConfig().n_layer(3).n_head(4).n_embd(32).block_size(12).vocab_size(29).bias(false)};

}  // namespace

TEST(GptInterop, WeightsSavedFromPythonGiveTheSameLossInCpp) {
  TempDir dir;
  for (const auto& config : kConfigs) {
    const std::string file = dir.path + "/python.safetensors";
    const double expected = python_loss("save " + file + " " + config_arguments(config));
    torch::manual_seed(0);  // other weights than Python's, all replaced
    GPT gpt(config);
    const double before = loss_of(gpt);
    cohort::load_state_dict(*gpt, cohort::load_safetensors(file));
    const double loss = loss_of(gpt);
    EXPECT_NEAR(loss, expected, 1e-5) << config_arguments(config);
    EXPECT_GT(std::abs(before - expected), 1e-3) << "the loss did not depend on the loaded weights";
  }
}

TEST(GptInterop, ConsolidatedCheckpointGivesTheSameLossInPython) {
  TempDir dir;
  for (const auto& config : kConfigs) {
    torch::manual_seed(5);
    GPT gpt(config);
    {  // a few steps, so the weights are not the initial ones
      torch::optim::AdamW opt(gpt->parameters(), torch::optim::AdamWOptions(1e-2));
      auto [tokens, targets] = gpt_fixed_batch(config.block_size(), config.vocab_size(), 2);
      for (int step = 0; step < 3; ++step) {
        opt.zero_grad();
        torch::nn::functional::cross_entropy(gpt->forward(tokens).reshape({-1, config.vocab_size()}), targets.reshape(-1))
            .backward();
        opt.step();
      }
    }
    cohort::CheckpointState state;
    state.add("model", *gpt).set_step(3);
    const std::string step_dir = cohort::save_checkpoint(dir.path + "/ckpt" + std::to_string(config.n_layer()), state);
    const std::string file = dir.path + "/consolidated.safetensors";
    cohort::detail::ckpt::consolidate_checkpoint(step_dir, file);  // what cohort-ckpt consolidate runs
    EXPECT_NEAR(python_loss("loss " + file + " model/ " + config_arguments(config)), loss_of(gpt), 1e-5)
        << config_arguments(config);
    // And back: the consolidated file loads into a fresh C++ model.
    GPT again(config);
    cohort::load_state_dict(*again, cohort::load_safetensors(file), cohort::StateDictOptions().prefix("model/").strict(false));
    EXPECT_EQ(loss_of(again), loss_of(gpt));
  }
}

// ---- the reader's refusals ----

namespace {

// A file of an 8-byte length, `header` and `data_bytes` zero bytes.
std::string write_file(const std::string& dir, const std::string& header, size_t data_bytes, uint64_t length = ~0ull) {
  const std::string path = dir + "/bad.safetensors";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (length == ~0ull) length = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((length >> (8 * i)) & 0xff));
  out << header << std::string(data_bytes, '\0');
  return path;
}

}  // namespace

TEST(Safetensors, ReadsEveryTensorWithItsDtypeAndShape) {
  TempDir dir;
  const std::string path = write_file(
      dir.path,
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("b":{"dtype":"I64","shape":[],"data_offsets":[24,32]},"c":{"dtype":"BF16","shape":[0],"data_offsets":[32,32]}})",
      32);
  const auto tensors = cohort::load_safetensors(path);
  ASSERT_EQ(tensors.size(), 3u);
  EXPECT_EQ(tensors.at("a").sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(tensors.at("a").dtype(), torch::kFloat32);
  EXPECT_EQ(tensors.at("b").dim(), 0);
  EXPECT_EQ(tensors.at("b").item<int64_t>(), 0);
  EXPECT_EQ(tensors.at("c").dtype(), torch::kBFloat16);
}

TEST(Safetensors, RefusesMalformedFilesNamingTheFileAndTensor) {
  TempDir dir;
  const std::string p = dir.path + "/bad.safetensors";
  auto tensor = [](const std::string& body) { return R"({"w":)" + body + "}"; };
  {
    std::ofstream(p, std::ios::binary) << "abc";
    EXPECT_EQ(error_of([&] { cohort::load_safetensors(p); }),
              p + ": not a safetensors file: 3 bytes, shorter than the 8-byte header length");
  }
  write_file(dir.path, "{}", 0, 200'000'000);
  EXPECT_EQ(error_of([&] { cohort::load_safetensors(p); }),
            p + ": header length 200000000 is above the format's limit of 100000000 bytes (not a safetensors file?)");
  write_file(dir.path, "{}", 0, 50);
  EXPECT_EQ(error_of([&] { cohort::load_safetensors(p); }),
            p + ": header length 50 is beyond the file's 10 bytes (a truncated file?)");
  write_file(dir.path, "[1, 2]", 0);
  EXPECT_EQ(error_of([&] { cohort::load_safetensors(p); }),
            p + ": the 6-byte header is not a JSON object (not a safetensors file?)");
  write_file(dir.path, tensor(R"({"dtype":"F8","shape":[1],"data_offsets":[0,1]})"), 1);
  EXPECT_EQ(error_of([&] { cohort::load_safetensors(p); }),
            p + ": tensor 'w' has dtype \"F8\" (known: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)");
  write_file(dir.path, tensor(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})"), 4);
  EXPECT_EQ(error_of([&] { cohort::load_safetensors(p); }),
            p + ": tensor 'w' has data_offsets [0, 8] outside the file's 4 bytes of data (a truncated file?)");
  write_file(dir.path, tensor(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"), 8);
  EXPECT_EQ(error_of([&] { cohort::load_safetensors(p); }), p + ": tensor 'w' has 8 bytes for a F32 [3] tensor of 12 bytes");
  write_file(dir.path, tensor(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,8]})"), 8);
  EXPECT_EQ(error_of([&] { cohort::load_safetensors(p); }),
            p + ": tensor 'w' has shape [-1]: sizes must be non-negative integers");
  write_file(dir.path, tensor(R"({"dtype":"U8","shape":[4000000000,4000000000,4000000000],"data_offsets":[0,8]})"), 8);
  EXPECT_EQ(error_of([&] { cohort::load_safetensors(p); }),
            p + ": tensor 'w' has shape [4000000000,4000000000,4000000000], larger than the file's 8 bytes of data");
  write_file(dir.path,
             R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
             12);
  EXPECT_EQ(error_of([&] { cohort::load_safetensors(p); }), p + ": tensors 'a' and 'b' overlap (bytes 4 < 8)");
  // Hostile pass 6: offsets backwards were called a truncated file, an empty header was JSON's error,
  // and a hole or bytes past the last tensor were read past unsaid (Python's safetensors refuses both).
  write_file(dir.path, tensor(R"({"dtype":"F32","shape":[0],"data_offsets":[8,4]})"), 8);
  EXPECT_EQ(error_of([&] { cohort::load_safetensors(p); }), p + ": tensor 'w' has data_offsets [8, 4]: it begins after it ends");
  write_file(dir.path, "", 0);
  EXPECT_EQ(error_of([&] { cohort::load_safetensors(p); }),
            p + ": header length 0 leaves no room for the header's JSON object (not a safetensors file?)");
  write_file(dir.path,
             R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
             12);
  EXPECT_EQ(error_of([&] { cohort::load_safetensors(p); }),
            p + ": tensor 'b' begins at byte 8 of the data, but the tensors before it end at 4: the format indexes every "
                "byte (a damaged file?)");
  write_file(dir.path, tensor(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})"), 10);
  EXPECT_EQ(error_of([&] { cohort::load_safetensors(p); }),
            p + ": 6 bytes of data follow the last tensor's end at byte 4: the format indexes every byte (a damaged "
                "file?)");
  EXPECT_EQ(error_of([&] { cohort::load_safetensors(dir.path + "/none.safetensors"); }),
            "cannot read safetensors file " + dir.path + "/none.safetensors: No such file or directory");
}

// Issue 39: a name given twice was read as the last one, and an 80 MB nested __metadata__ cost 3.2 GB.
// As Python's safetensors: names once, __metadata__ a flat map of strings, nesting refused while parsing.
TEST(Safetensors, RefusesRepeatedNamesNestedMetadataAndDeepHeaders) {
  TempDir dir;
  const std::string p = dir.path + "/bad.safetensors";
  const std::string w = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  auto header_error = [&](const std::string& header) {
    write_file(dir.path, header, 4);
    return error_of([&] { cohort::load_safetensors(p); });
  };
  auto header_of = [](const std::string& header) { return ": the " + std::to_string(header.size()) + "-byte header"; };
  const std::string twice = R"({"w":)" + w + R"(,"w":)" + w + "}";
  EXPECT_EQ(header_error(twice), p + header_of(twice) + ": duplicate key w");
  const std::string dtype_twice = R"({"w":{"dtype":"F32","dtype":"F64","shape":[1],"data_offsets":[0,4]}})";
  EXPECT_EQ(header_error(dtype_twice), p + header_of(dtype_twice) + ": duplicate key w.dtype");
  EXPECT_EQ(header_error(R"({"__metadata__":{"format":{"x":"pt"}},"w":)" + w + "}"),
            p + R"(: __metadata__ 'format' is {"x":"pt"}, not a string )"
                R"((the format's metadata maps strings to strings))");
  EXPECT_EQ(header_error(R"({"__metadata__":["pt"],"w":)" + w + "}"),
            p + R"(: __metadata__ is ["pt"], not a map of strings to strings)");
  const std::string deep =  // 2 MB here; the probe's 80 MB took 3.2 GB
      R"({"__metadata__":{"a":)" + std::string(1'000'000, '[') + std::string(1'000'000, ']') + "}}";
  EXPECT_EQ(header_error(deep), p + header_of(deep) +
                                    ": objects and arrays nested more than 3 levels deep: no safetensors header nests "
                                    "so deep");
  EXPECT_EQ(cohort::testing::kind_of([&] { cohort::load_safetensors(p); }), "kind=invalid argument ranks=");
  const std::string flat = R"({"__metadata__":{"format":"pt"},"w":)" + w + "}";
  EXPECT_EQ(cohort::load_safetensors(write_file(dir.path, flat, 4)).size(), 1u);
}

TEST(Safetensors, LoadStateDictRefusesMissingMisshapenAndUnexpectedTensors) {
  torch::nn::Linear linear(3, 2);
  const auto before = linear->weight.clone();
  std::map<std::string, torch::Tensor> tensors = {{"weight", torch::ones({2, 3})}};
  EXPECT_EQ(error_of([&] { cohort::load_state_dict(*linear, tensors); }),
            "load_state_dict: no tensor 'bias' for the module's 'bias'");
  tensors["bias"] = torch::ones({3});
  EXPECT_EQ(error_of([&] { cohort::load_state_dict(*linear, tensors); }),
            "load_state_dict: tensor 'bias' has shape [3], the module's 'bias' [2]");
  tensors["bias"] = torch::ones({2});
  tensors["extra"] = torch::ones({1});
  EXPECT_EQ(error_of([&] { cohort::load_state_dict(*linear, tensors); }),
            "load_state_dict: tensor 'extra' names nothing in the module (strict; StateDictOptions().strict(false) "
            "ignores it)");
  EXPECT_TRUE(torch::equal(linear->weight, before)) << "a refused load changed the module";
  cohort::load_state_dict(*linear, tensors, cohort::StateDictOptions().strict(false));
  EXPECT_TRUE(torch::equal(linear->weight, torch::ones({2, 3})));
  EXPECT_EQ(error_of([&] { cohort::load_state_dict(*linear, tensors, cohort::StateDictOptions().prefix("model/")); }),
            "load_state_dict: no tensor 'model/weight' for the module's 'weight'");
}

}  // namespace gpt_interop_test
