// The GPT example on cohort::Trainer: a TrainingModule with its own layers (the GPT, whose blocks are
// sharding units) trained under --strategy ddp, zero1, zero2, zero3 or fsdp (zero3 and fsdp are the
// same for this model: its blocks are the units either way). The Trainer starts the workers
// (--devices N), builds the GPT in configure_model (sharded as it is made under zero3 and fsdp), shards
// the windows over ranks, validates every --eval-interval steps and saves checkpoints (--checkpoint-dir);
// this file picks the options and prints the header (report.cpp prints the rest). --tensor-parallel N
// splits each block over N consecutive ranks (configure_model runs the GPT's plan), ddp over the rest; --pp N cuts
// the GPT into N pipeline stages (models/gpt_pipeline.h: the Trainer's strategy "pipeline", --strategy per stage).
// A model too big for this node's memory is refused before it is built, as fashion_mnist refuses a batch.
#include "train.h"

#include <cohort/mesh.h>
#include <cohort/safetensors.h>
#include <cohort/trainer.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "../common/cli_paths.h"
#include "../common/command_line_error.h"
#include "../common/memory.h"
#include "../common/threads.h"
#include "model_flags.h"
#include "models/gpt.h"
#include "models/gpt_pipeline.h"
#include "report.h"

namespace gpt_example {
namespace {

using cohort::models::GPT;
using cohort::models::GPTConfig;

// The GPT is made in configure_model (Lightning's hook), which the Trainer runs inside a ShardedInit
// under fsdp and zero3: each block is sharded as it is made, so no rank ever holds the whole model.
struct GptModule : cohort::TrainingModule {
  GptModule(const GPTConfig& config, const Flags& flags) : config_(config), flags_(flags) {}
  void configure_model() override {
    torch::manual_seed(static_cast<uint64_t>(flags_.seed));  // the seed alone fixes the initial weights
    gpt = register_module("gpt", GPT(config_));
    // Megatron's split over the mesh's tensor-parallel group, before any strategy sees the parameters.
    if (flags_.tensor_parallel > 1)
      cohort::tp::parallelize_module(*gpt, device_mesh().group_ptr("tensor_parallel"),
                                     cohort::models::gpt_tensor_parallel_plan(flags_.sequence_parallel));
  }
  // loss_of: loss parallel when the head is split by vocabulary, plain cross-entropy otherwise.
  torch::Tensor training_step(cohort::Batch& batch, int64_t) override {
    auto loss = gpt->loss_of(gpt->forward(batch.data), batch.target);
    log("train_loss", loss, cohort::LogOptions().sync_dist(true));  // the global batch's, whatever the mesh
    return loss;
  }
  // --pp: training_step is not called; the pipeline's loss of the batch is logged here instead.
  void on_train_batch_end(const torch::Tensor& loss, int64_t) override {
    if (flags_.pipeline_parallel > 1) log("train_loss", loss, cohort::LogOptions().sync_dist(true));
  }
  // --pp: the Trainer runs the step itself, stage by stage, with this loss of each microbatch.
  torch::Tensor loss(const torch::Tensor& logits, const torch::Tensor& target) override {
    return gpt->loss_of(logits, target);
  }
  PipelineLayers pipeline_layers() override {
    return {cohort::models::gpt_pipeline_layers(gpt),
            [](const std::string& name) { return "gpt." + cohort::models::gpt_pipeline_name(name); }};
  }
  // The logits through the strategy: under --pp the stages in turn (TrainingModule::forward), else the GPT.
  torch::Tensor logits(const torch::Tensor& idx) {
    return flags_.pipeline_parallel > 1 ? TrainingModule::forward(idx) : gpt->forward(idx);
  }
  void validation_step(cohort::Batch& batch, int64_t) override {
    log("val_loss", gpt->loss_of(logits(batch.data), batch.target), cohort::LogOptions().sync_dist(true));
  }
  std::unique_ptr<torch::optim::Optimizer> configure_optimizers(std::vector<torch::Tensor> parameters) override {
    if (flags_.optimizer == "sgd")
      return std::make_unique<torch::optim::SGD>(
          std::move(parameters),
          torch::optim::SGDOptions(flags_.lr).momentum(flags_.momentum).weight_decay(flags_.weight_decay));
    return std::make_unique<torch::optim::AdamW>(
        std::move(parameters),
        torch::optim::AdamWOptions(flags_.lr).betas({0.9, 0.99}).weight_decay(flags_.weight_decay));
  }
  GPT gpt{nullptr};
  GPTConfig config_;
  Flags flags_;
};

int zero_stage_of(const std::string& strategy) {
  if (strategy == "ddp") return 0;
  return strategy == "zero1" ? 1 : strategy == "zero2" ? 2 : 3;
}

cohort::TrainerOptions trainer_options(const Flags& flags) {
  const bool pipelined = flags.pipeline_parallel > 1;
  return cohort::TrainerOptions()
      .devices(flags.devices)
      .accelerator("cpu")
      .strategy(pipelined ? "pipeline" : flags.strategy)
      .pipeline_stages(pipelined ? flags.pipeline_parallel : 0)
      .pipeline_zero_stage(pipelined ? zero_stage_of(flags.strategy) : 0)
      .pipeline_chunks(flags.pp_microbatches > 0 ? flags.pp_microbatches : flags.pipeline_parallel)
      .pipeline_schedule(flags.pp_schedule)
      .precision(flags.precision)
      .tensor_parallel_size(flags.tensor_parallel)
      .data_parallel_replicate_size(flags.dp_replicate)
      .data_parallel_shard_size(flags.dp_shard)
      .max_steps(flags.max_steps)
      .val_check_interval(static_cast<double>(flags.eval_interval))
      .num_sanity_val_steps(0)
      .seed(flags.seed)
      .enable_progress_bar(false)
      .enable_checkpointing(false)
      .logger(false)
      .offload_optimizer(flags.offload_optimizer != "none")
      .offload_optimizer_device(flags.offload_optimizer == "nvme" ? "nvme" : "cpu")
      .offload_parameters(flags.offload_params != "none")
      .offload_params_device(flags.offload_params == "nvme" ? "nvme" : "cpu")
      .max_in_cpu(0)  // --offload-params nvme: every block's shard on file (read only with "nvme")
      .nvme_path(flags.nvme_path)
      .pretrained_weights(flags.init_from)
      .pretrained_prefix("gpt.");  // the module keeps its GPT as "gpt"; the file has the GPT's own names
}

GPTConfig model_config(const Flags& flags, const Text& text) {
  return GPTConfig()
      .n_layer(flags.n_layer)
      .n_head(flags.n_head)
      .n_embd(flags.n_embd)
      .block_size(flags.block_size)
      .vocab_size(static_cast<int64_t>(text.vocabulary.size()))
      .dropout(flags.dropout)
      .bias(flags.bias)
      .unit(cohort::UnitOptions()
                .reshard_after_forward(!flags.keep_gathered)
                .activation_checkpointing(flags.activation_checkpointing));
}

// Bytes per rank that training `config` needs at least, on the CPU in fp32: the weights (4 bytes a
// parameter; zero3 and fsdp build them sharded, a 1/ranks slice), their gradients (4, divided over the
// ranks by zero2, zero3 and fsdp) and the optimizer's state (AdamW's two moments 8, SGD's momentum 4;
// divided by every ZeRO strategy); under zero3 and fsdp the engine's buffers, which it keeps for
// reuse: the running block, the blocks gathered ahead (fsdp: one; zero3: DeepSpeed's prefetch bucket
// of 5e7 elements) and the staged gradients of the two reductions in flight; and what autograd keeps
// for backward (gpt_activation_bytes). --offload-optimizer cpu keeps an fp32 master copy beside the
// weights (4 more; host memory is the device on the CPU), nvme keeps masters and moments on disk but
// for the block stepped and those read ahead (offload_optimizer.buffer_count, 4) and written behind,
// the gradient shards too at zero3 and fsdp (a group per block; zero2's one group is the whole shard);
// with --offload-params the master is a copy (4 more per parameter, or on disk with nvme). In double:
// a GPT at the flags' limits overflows int64. cohort-plan (src/zero/step_memory_plan.h) follows the
// engine's limits more closely; this is the example's quick check before anything is built.
int64_t estimated_bytes(const GPTConfig& config, const Flags& flags, int world_size) {
  // Tensor parallel: nearly every parameter is cut over the group (the LayerNorms are not: a few).
  // Under --pp every rank builds the whole GPT (the other stages' layers stay allocated) and trains its stage.
  const double p = static_cast<double>(cohort::models::gpt_num_parameters(config)) / double(flags.tensor_parallel);
  // The ranks each tensor is sharded over: one HSDP replica's when the flags say it (the default's one
  // replica per node is not known here: the check then counts every data-parallel rank).
  const double data_parallel = world_size / double(flags.tensor_parallel * flags.pipeline_parallel);
  const double ranks = flags.dp_shard > 0       ? double(flags.dp_shard)
                       : flags.dp_replicate > 0 ? data_parallel / double(flags.dp_replicate)
                                                : data_parallel;
  // Under --pp a rank's gradients and optimizer state are its stage's: about 1 / pp of them.
  const double stage = double(flags.pipeline_parallel);
  const double all_grads = (flags.strategy == "ddp" || flags.strategy == "zero1" ? 4 * p : 4 * p / ranks) / stage;
  const double e = static_cast<double>(config.n_embd()), layers = static_cast<double>(config.n_layer());
  const double block = 12 * e * e + 13 * e;
  // AdamW keeps two fp32 moments, SGD one momentum buffer (none without momentum).
  const double state = flags.optimizer == "sgd" ? (flags.momentum != 0 ? 4 : 0) : 8;
  double moments = (flags.strategy == "ddp" ? state * p : state * p / ranks) / stage;
  if (flags.offload_optimizer == "cpu" || (flags.offload_params != "none" && flags.offload_optimizer == "none"))
    moments += 4 * p / ranks;
  const bool per_block = flags.strategy == "zero3" || flags.strategy == "fsdp";  // a group per block
  if (flags.offload_optimizer == "nvme")
    moments = per_block ? (4 + state) * block / ranks * (1 + 4) : (4 + state) * p / ranks;
  // Past stage 1 the reduced gradient shards go to the swap file too: lent one block at a time.
  const double grads = flags.offload_optimizer == "nvme" && per_block ? 4 * block / ranks * (1 + 4) : all_grads;
  // Under tensor parallelism the blocks are cut first, then sharded whole by the engine.
  const bool sharded = (flags.strategy == "zero3" || flags.strategy == "fsdp") && flags.tensor_parallel == 1;
  const double ahead = flags.strategy == "fsdp"
                           ? 1
                           : std::min(
                                 layers,
                                 std::floor(cohort::ZeroOptimizationConfig().stage3_prefetch_bucket_size() / block));
  // --offload-params nvme: of the shards only the one being gathered and those read ahead
  // (offload_param.buffer_count, 5) are in memory.
  const double shards = flags.offload_params == "nvme" ? 4 * block / ranks * 6 : 4 * p / ranks;
  const double weights = sharded ? shards + 4 * block * (1 + ahead + 2) : 4 * p;
  const double activations = static_cast<double>(
      cohort::models::gpt_activation_bytes(config, flags.batch_size, flags.block_size, flags.activation_checkpointing));
  const double total = weights + grads + moments + activations;
  return total >= 9e18 ? INT64_MAX : static_cast<int64_t>(total);
}

// A GPT too big for this node is refused in one line before it is built (it was LibTorch's allocator
// text); every rank takes part, so all refuse together (examples/common/memory.h).
void check_memory(const GPTConfig& config, const Flags& flags, const cohort::World& world) {
  if (flags.no_memory_check) return;
  std::ostringstream asked, what;
  asked << "--n-layer " << flags.n_layer << " --n-embd " << flags.n_embd << " (a GPT of "
        << cohort::models::gpt_num_parameters(config) << " parameters)";
  what << "for its weights, gradients and optimizer state (--strategy " << flags.strategy << " on " << world.size()
       << " rank(s)) and the activations of --batch-size " << flags.batch_size << " x --block-size "
       << flags.block_size;
  const examples::MemoryNeed need{asked.str(), estimated_bytes(config, flags, world.size()), what.str(),
                                  "lower --n-layer, --n-embd, --batch-size or --block-size"};
  examples::refuse_together(examples::memory_refusal(need, world.local_size(), examples::available_memory_bytes()),
                            "the GPT");
}

// --checkpoint-dir: a ModelCheckpoint every --checkpoint-every steps (and at the end); --resume auto
// continues from its newest checkpoint, and a launcher's restart (cohortrun --max-restarts) resumes by
// itself (FitOptions::resume_on_restart).
std::string add_checkpoints(cohort::Trainer& trainer, const Flags& flags) {
  if (!flags.checkpoint.dir.empty())
    trainer.add_callback(std::make_shared<cohort::ModelCheckpoint>(cohort::ModelCheckpointOptions()
                                                                       .dirpath(flags.checkpoint.dir)
                                                                       .every_n_train_steps(flags.checkpoint.every)
                                                                       .async(flags.checkpoint.async)
                                                                       .every_n_epochs(0)
                                                                       .keep_last(3)));
  return flags.checkpoint.trainer_ckpt_path();
}

void print_header(const cohort::World& world, const Flags& flags, const Text& text, const GPTConfig& config,
                  int64_t threads) {
  if (!world.is_main()) return;
  // Under tensor parallelism the blocks are cut first, then sharded whole by the engine.
  const bool sharded = (flags.strategy == "zero3" || flags.strategy == "fsdp") && flags.tensor_parallel == 1 &&
                       flags.pipeline_parallel == 1;
  std::string split;
  const int64_t data_parallel = world.size() / (flags.tensor_parallel * flags.pipeline_parallel);
  if (flags.tensor_parallel > 1 || flags.pipeline_parallel > 1)
    split = " (" + (flags.pipeline_parallel > 1 ? std::to_string(flags.pipeline_parallel) + " pipeline stages x " : "") +
            std::to_string(data_parallel) + " data parallel" +
            (flags.tensor_parallel > 1 ? " x " + std::to_string(flags.tensor_parallel) + " tensor parallel" : "") +
            (flags.sequence_parallel ? ", sequence parallel)" : ")");
  const int64_t shard = flags.dp_shard > 0 ? flags.dp_shard : flags.dp_replicate > 0 ? data_parallel / flags.dp_replicate : 0;
  if (shard > 0 && data_parallel % shard == 0 && shard < data_parallel)  // the Trainer refuses the rest
    split += " (HSDP: " + std::to_string(data_parallel / shard) + " replicas x " + std::to_string(shard) + " shards)";
  std::printf(
      "text: %s, %d file(s), %lld bytes, vocabulary %zu; GPT %lld parameters%s; %s on %d rank(s)%s, %lld "
      "thread(s) each\n",
      flags.data.c_str(), text.files, static_cast<long long>(text.bytes.size()), text.vocabulary.size(),
      static_cast<long long>(cohort::models::gpt_num_parameters(config)),
      sharded ? " (each block sharded as it is made)" : "", flags.strategy.c_str(), world.size(), split.c_str(),
      static_cast<long long>(threads));
  std::fflush(stdout);
}

// The mesh the flags ask for against the world, in the flags' names (the Trainer says the same in its
// options' names): once, by rank 0, exit status 2 (hostile pass 15, m-2: once per rank, status 1).
void check_mesh(const Flags& flags, const cohort::World& world) {
  const auto fail = [](const std::string& text) { throw examples::CommandLineError(text); };
  const int64_t ranks = world.size(), tp = flags.tensor_parallel, shard = flags.dp_shard, replicas = flags.dp_replicate;
  const int64_t pp = flags.pipeline_parallel;
  const std::string pp_text = pp > 1 ? " x --pp " + std::to_string(pp) : "";
  if (ranks % (tp * pp) != 0)
    fail("--tp " + std::to_string(tp) + pp_text + " does not divide the world's " + std::to_string(ranks) + " rank(s)");
  const int64_t data_parallel = ranks / (tp * pp);
  if (pp > 1 && flags.strategy != "ddp" && data_parallel < 2)
    fail("--pp " + std::to_string(pp) + " with --strategy " + flags.strategy + " shards each stage over its replicas, but "
         "the world's " + std::to_string(ranks) + " rank(s) leave one per stage (world / (--tp x --pp)): use --strategy "
         "ddp or more ranks");
  const std::string of = " the " + std::to_string(data_parallel) + " data-parallel rank(s) (world " +
                         std::to_string(ranks) + " / --tp " + std::to_string(tp) + pp_text + ")";
  if (shard > 0 && replicas > 0 && replicas * shard != data_parallel)
    fail("--dp-replicate " + std::to_string(replicas) + " x --dp-shard " + std::to_string(shard) + " is not" + of);
  if (shard > 0 && data_parallel % shard != 0) fail("--dp-shard " + std::to_string(shard) + " does not divide" + of);
  if (replicas > 0 && data_parallel % replicas != 0)
    fail("--dp-replicate " + std::to_string(replicas) + " does not divide" + of);
}

// --export, checked before the run, which is not to be lost to a path it cannot write at its end: a
// file in an existing directory, not the text it reads nor inside the checkpoint directory (hostile
// pass 15, M-2: it wrote over `latest`), not a link or a device.
void check_export_path(const Flags& flags) {
  namespace fs = std::filesystem;
  const auto fail = [&](const std::string& why) {
    throw examples::CommandLineError("--export " + flags.export_path + ": " + why);
  };
  const fs::path path = fs::absolute(flags.export_path).lexically_normal();
  std::error_code error;
  if (!fs::is_directory(path.parent_path(), error)) fail("its directory " + path.parent_path().string() + " does not exist");
  const auto status = fs::symlink_status(path, error);
  if (fs::exists(status) && !fs::is_regular_file(status)) fail("is there and is not a regular file");
  const auto inside = [&](const std::string& dir) {
    const std::string root = fs::weakly_canonical(dir, error).string() + "/";
    return fs::weakly_canonical(path, error).string().rfind(root, 0) == 0;
  };
  if (!flags.checkpoint.dir.empty() && inside(flags.checkpoint.dir))
    fail("is inside --checkpoint-dir " + flags.checkpoint.dir + ": write the model beside the checkpoints");
  if (fs::weakly_canonical(path, error) == fs::weakly_canonical(flags.data, error) || inside(flags.data))
    fail("is the --data it reads");
  // The weights it starts from are not to be written over by the ones it ends with (hostile pass 20, m-5).
  if (!flags.init_from.empty() && fs::weakly_canonical(path, error) == fs::weakly_canonical(flags.init_from, error))
    fail("is the --init-from file it starts from: export beside it");
}

// --export: the whole parameters under the unsplit GPT's names, gathered one at a time on every rank
// (a collective) and kept by rank 0 alone, which writes them: the one-file model for Python.
void export_model(cohort::Trainer& trainer, const Flags& flags, const ModelFlags& model_flags) {
  const bool main = trainer.world().is_main();
  std::map<std::string, torch::Tensor> whole;
  torch::NoGradGuard no_grad;
  trainer.for_each_full_parameter([&](const std::string& name, const torch::Tensor& value) {
    // The module holds the GPT as "gpt": the file keeps the GPT's own names, as PyTorch's twin has them.
    const std::string own = name.rfind("gpt.", 0) == 0 ? name.substr(4) : name;
    if (main) whole[own] = value.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true);
  });
  if (!main) return;
  // With the model flags and the vocabulary, which --init-from checks (hostile pass 20, S-1).
  std::map<std::string, std::string> metadata = model_flags.model_values();
  metadata["format"] = "cohort examples/gpt";
  metadata["step"] = std::to_string(trainer.global_step());
  cohort::save_safetensors(whole, flags.export_path, metadata);
  std::printf("exported %zu tensors to %s\n", whole.size(), flags.export_path.c_str());
}

}  // namespace

void run_training(const Flags& flags) {
  if (!flags.checkpoint.dir.empty()) examples::check_writable_dir("--checkpoint-dir", flags.checkpoint.dir);
  if (!flags.export_path.empty()) check_export_path(flags);
  if (flags.offload_optimizer == "nvme" || flags.offload_params == "nvme")
    examples::check_writable_dir("--nvme-path", flags.nvme_path);
  cohort::Trainer trainer(trainer_options(flags));  // starts or joins the workers before anything else
  const cohort::World& world = trainer.world();
  check_mesh(flags, world);
  const int64_t threads = flags.threads > 0
                              ? flags.threads
                              : std::max<int64_t>(
                                    1, static_cast<int64_t>(std::thread::hardware_concurrency()) / world.local_size());
  examples::set_threads(static_cast<int>(threads));
  const Text text = load_text(flags.data, flags.block_size + 2);
  const GPTConfig config = model_config(flags, text);
  check_memory(config, flags, world);
  GptModule module(config, flags);  // its layers come in configure_model, when the Trainer takes it
  print_header(world, flags, text, config, threads);
  // Training: every window of the train split, shuffled each epoch. Validation: eval_iters batches
  // per rank of windows evenly spaced over the validation split, the same at every validation.
  const int64_t train_windows = text.train.numel() - flags.block_size - 1;
  cohort::DataLoader train(std::make_shared<WindowDataset>(text.train, torch::arange(train_windows), flags.block_size),
                           cohort::LoaderOptions().batch_size(flags.batch_size).shuffle(true).drop_last(true));
  const int64_t val_count =
      flags.eval_iters * flags.batch_size * (world.size() / (flags.tensor_parallel * flags.pipeline_parallel));
  auto val_starts = torch::linspace(0, static_cast<double>(text.val.numel() - flags.block_size - 1), val_count,
                                    torch::kFloat64)
                        .to(torch::kLong);
  cohort::DataLoader val(std::make_shared<WindowDataset>(text.val, val_starts, flags.block_size),
                         cohort::LoaderOptions().batch_size(flags.batch_size));
  trainer.add_callback(std::make_shared<ValidationReport>(flags));
  auto model_flags = std::make_shared<ModelFlags>(flags, config, text.vocabulary);
  trainer.add_callback(model_flags);
  const std::string resume = add_checkpoints(trainer, flags);
  trainer.fit(module, train, cohort::FitOptions().val(&val).ckpt_path(resume));
  if (trainer.global_step() % flags.eval_interval != 0) {
    print_validation(trainer, trainer.validate(module, val).at("val_loss"));
    print_memory(trainer, flags, "the end");
  }
  print_sample_and_digest(trainer, module.gpt, text, flags, [&](const torch::Tensor& context) {
    return flags.pipeline_parallel > 1 ? module.logits(context)
                                       : trainer.run_forward([&] { return module.gpt->forward(context); });
  });
  if (!flags.export_path.empty()) export_model(trainer, flags, *model_flags);
}

}  // namespace gpt_example
