// Loading a pretrained GPT into fsdp (issue 42, "pretrained weights streamed into shards"): peak RSS per
// rank when each rank reads only its shards' bytes (ShardedInit, then cohort::load_pretrained into the
// stage 3 engine) against what a program does without it (every rank builds the whole model, reads the
// whole file into tensors, load_state_dict, then the engine shards it). bench/gpt/pretrained.sh runs it.
//
//   pretrained_load --write DIR --files 4 ...                 (one process: the model as a sharded set)
//   cohortrun --standalone --nproc-per-node 4 pretrained_load --load DIR/model.safetensors.index.json \
//       --mode streamed|whole ...
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "cohort/cohort.h"
#include "cohort/safetensors.h"
#include "models/gpt.h"
#include "proc_status.h"

namespace {

// COHORT_BENCH_PHASES: rank 0's peak and resident memory after each phase, on stderr.
void phase(const char* name) {
  if (std::getenv("COHORT_BENCH_PHASES") && std::getenv("RANK") && std::string(std::getenv("RANK")) == "0")
    std::fprintf(stderr, "%s: peak %.0f MiB, resident %.0f MiB\n", name, status_mib("VmHWM"), status_mib("VmRSS"));
}

struct Flags {
  std::string write, load, mode = "streamed";
  int64_t files = 4, n_layer = 12, n_head = 16, n_embd = 1024, block_size = 64, vocab_size = 256, threads = 1;
};

cohort::models::GPTConfig config_of(const Flags& f) {
  return cohort::models::GPTConfig()
      .n_layer(f.n_layer)
      .n_head(f.n_head)
      .n_embd(f.n_embd)
      .block_size(f.block_size)
      .vocab_size(f.vocab_size);
}

// The model (seed 0) as `files` safetensors files and Hugging Face's index naming each tensor's file.
void write_set(const Flags& f) {
  torch::manual_seed(0);
  cohort::models::GPT model(config_of(f));
  std::vector<std::map<std::string, torch::Tensor>> parts(size_t(f.files));
  nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
  size_t i = 0;
  const auto params = model->named_parameters();
  for (const auto& item : params) {
    const size_t part = i++ * parts.size() / params.size();  // consecutive tensors per file, as Hugging Face does
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", part + 1, parts.size());
    parts[part][item.key()] = item.value().detach();
    index["weight_map"][item.key()] = name;
  }
  for (size_t p = 0; p < parts.size(); ++p) {
    char name[64];
    std::snprintf(name, sizeof name, "/model-%05zu-of-%05zu.safetensors", p + 1, parts.size());
    cohort::save_safetensors(parts[p], f.write + name);
  }
  std::ofstream(f.write + "/model.safetensors.index.json") << index.dump(1);
  std::printf("wrote %zu tensors in %lld files to %s\n", params.size(), static_cast<long long>(f.files),
              f.write.c_str());
}

// Without streaming: the whole file in memory as tensors, then into the whole model.
std::map<std::string, torch::Tensor> read_whole(const std::string& path) {
  if (path.size() < 5 || path.substr(path.size() - 5) != ".json") return cohort::load_safetensors(path);
  nlohmann::json index;
  std::ifstream(path) >> index;
  std::map<std::string, torch::Tensor> out;
  std::set<std::string> files;
  for (const auto& [name, file] : index["weight_map"].items()) files.insert(file.get<std::string>());
  const std::string dir = path.substr(0, path.rfind('/') + 1);
  for (const std::string& file : files) out.merge(cohort::load_safetensors(dir + file));
  return out;
}

int load(const Flags& f) {
  auto world = cohort::init();
  const double runtime = status_mib("VmHWM");
  const auto config = cohort::ZeroConfig()
                          .optimizer(cohort::OptimizerConfig().type(cohort::OptimizerType::kAdamW).lr(1e-4))
                          .zero_optimization(cohort::ZeroOptimizationConfig().stage(3));
  cohort::models::GPT model{nullptr};
  std::unique_ptr<cohort::ZeroEngine<cohort::models::GPTImpl>> engine;
  if (f.mode == "streamed") {
    {
      cohort::ShardedInit sharded;  // no rank ever holds the whole model
      model = cohort::models::GPT(config_of(f));
    }
    phase("built");
    engine = std::make_unique<cohort::ZeroEngine<cohort::models::GPTImpl>>(cohort::initialize(config, model));
    phase("engine");
    cohort::load_pretrained(*engine, f.load);
    phase("loaded");
  } else {
    model = cohort::models::GPT(config_of(f));
    cohort::load_state_dict(*model, read_whole(f.load));
    engine = std::make_unique<cohort::ZeroEngine<cohort::models::GPTImpl>>(cohort::initialize(config, model));
  }
  const double peak = status_mib("VmHWM");  // the load's (before the digest's gathers below)
  // A digest of the loaded parameters, the same for both modes when both loaded the file.
  double sum = 0;
  engine->for_each_full_parameter([&](const std::string&, const torch::Tensor& value) {
    sum += value.to(torch::kDouble).abs().sum().item<double>();
  });
  const auto report = engine->memory_report();
  // The engine's own state (shards of the parameters, gradients and AdamW's moments), made either way.
  auto mine = torch::tensor({runtime, peak, double(report.total()) / (1 << 20)}, torch::kDouble);
  auto all = world.comm().allgather(mine).reshape({world.size(), 3});
  if (world.rank() == 0) {
    const double unit_mib = 12.0 * double(f.n_embd * f.n_embd) * 4 / (1 << 20);  // one block's weights, fp32
    std::printf(
        "RESULT mode=%s ranks=%d n_layer=%lld n_embd=%lld params=%lld runtime_mib=%.0f peak_max_mib=%.0f "
        "state_mib=%.0f unit_mib=%.0f abs_sum=%.6e\n",
        f.mode.c_str(), world.size(), static_cast<long long>(f.n_layer), static_cast<long long>(f.n_embd),
        static_cast<long long>(cohort::models::gpt_num_parameters(config_of(f))), all.select(1, 0).max().item<double>(),
        all.select(1, 1).max().item<double>(), all.select(1, 2).max().item<double>(), unit_mib, sum);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app("Peak memory of loading a pretrained GPT into fsdp, streamed or whole");
  app.add_option("--write", f.write, "write the model (seed 0) as a sharded set into this directory");
  app.add_option("--files", f.files, "files of the sharded set");
  app.add_option("--load", f.load, "a safetensors file or a sharded set's index to load");
  app.add_option("--mode", f.mode, "streamed (ShardedInit + load_pretrained) or whole")
      ->check(CLI::IsMember({"streamed", "whole"}));
  app.add_option("--n-layer", f.n_layer);
  app.add_option("--n-head", f.n_head);
  app.add_option("--n-embd", f.n_embd);
  app.add_option("--block-size", f.block_size);
  app.add_option("--vocab-size", f.vocab_size);
  app.add_option("--threads", f.threads);
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(int(f.threads));
  if (!f.write.empty()) {
    write_set(f);
    return 0;
  }
  return load(f);
}
