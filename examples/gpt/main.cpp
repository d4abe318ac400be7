// gpt: trains a character-level (byte-level) GPT (models/gpt.h, nanoGPT's layout) on a real text,
// Debian's fortunes by default, with any of cohort's strategies: ddp, zero1, zero2, zero3 or fsdp
// (each GPT block a sharding unit), with or without activation checkpointing, and tensor parallel
// (--tensor-parallel N, Megatron's split, with --sequence-parallel) under any of them. --devices N starts N
// local workers (or run it under cohortrun, torchrun, srun or mpirun). It prints "val loss X" and the
// memory per rank at each validation, a sample of generated text and params-sha256 at the end, and
// saves checkpoints a restart resumes from (--checkpoint-dir). See docs/gpt.md.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>

#include "../common/cli_choices.h"
#include "../common/cli_main.h"
#include "../common/cli_numbers.h"
#include "../common/cli_paths.h"
#include "../common/memory.h"
#include "train.h"

namespace {

// --pp: what the pipelined GPT runs with, said in the flags' names before anything starts.
void check_pipeline_flags(const gpt_example::Flags& flags) {
  const auto fail = [](const std::string& text) { throw cohort::Error(text, cohort::ErrorKind::kInvalidArgument); };
  if (flags.pipeline_parallel == 1) {
    if (flags.pp_microbatches > 0) fail("--pp-microbatches is for --pp N (pipeline stages), which is 1");
    return;
  }
  const std::string pp = "--pp " + std::to_string(flags.pipeline_parallel);
  if (flags.pipeline_parallel > flags.n_layer + 4)
    fail(pp + ": the GPT has " + std::to_string(flags.n_layer + 4) +
         " layers to cut (embeddings, --n-layer blocks, final norm, head)");
  if (flags.strategy == "zero1" || flags.strategy == "zero2")
    fail(pp + " with --strategy " + flags.strategy +
         ": the head's weight is the token embedding's on another stage, which ZeRO stage 1/2 cannot keep tied; use "
         "fsdp (zero3) or ddp");
  const int64_t microbatches = flags.pp_microbatches > 0 ? flags.pp_microbatches : flags.pipeline_parallel;
  if (microbatches > flags.batch_size)
    fail(pp + ": " + std::to_string(microbatches) + " microbatches of --batch-size " + std::to_string(flags.batch_size) +
         " leave some empty; lower --pp-microbatches or raise --batch-size");
  if (flags.precision != "32-true" && flags.strategy == "ddp")
    fail(pp + " with --strategy ddp runs in fp32: --precision " + flags.precision +
         " needs --strategy fsdp (each stage's engine keeps bf16 parameters and fp32 masters)");
  const auto refuse = [&](bool set, const std::string& flag) {
    if (set) fail(flag + " with " + pp + " is not built (the pipeline's stages run without offload or HSDP)");
  };
  if (!flags.init_from.empty() && flags.strategy != "ddp")
    fail("--init-from with " + pp + " --strategy " + flags.strategy +
         " is not built (the stages' engines take the weights before they could be read): use --strategy ddp");
  refuse(flags.offload_optimizer != "none", "--offload-optimizer " + flags.offload_optimizer);
  refuse(flags.offload_params != "none", "--offload-params " + flags.offload_params);
  refuse(flags.dp_replicate > 0 || flags.dp_shard != -1, "--dp-replicate/--dp-shard");
  refuse(flags.activation_checkpointing, "--activation-checkpointing");
}

// How the ranks split the work: the strategy, the mesh's axes and where the states live.
void add_parallel_flags(CLI::App& app, gpt_example::Flags& flags) {
  using examples::add_integer;
  examples::add_choice(app, "--strategy", flags.strategy, {"ddp", "zero1", "zero2", "zero3", "fsdp"},
                       "ddp, zero1, zero2, zero3 or fsdp (ZeRO stage 3 with each GPT block a sharding unit; zero3 "
                       "is the same for this model)");
  add_integer(app, {"--tensor-parallel,--tp", 1, 4096}, flags.tensor_parallel,
              "Ranks per tensor-parallel group (Megatron's split of heads, MLP and vocabulary; consecutive ranks), "
              "with --strategy over the other ranks (zero*/fsdp shard each tensor-parallel rank's part over them); it "
              "must divide the world size and --n-head");
  add_integer(app, {"--dp-replicate", 0, 1 << 20}, flags.dp_replicate,
              "zero*/fsdp: HSDP's replicas (torchtitan's dp_replicate): the data-parallel ranks (world / --tp) form "
              "this many groups of consecutive ranks, each sharding the model, gradients allreduced across them "
              "(0: one per node on several nodes under zero3/fsdp, else 1)");
  add_integer(app, {"--dp-shard", -1, 1 << 20}, flags.dp_shard,
              "zero*/fsdp: ranks per HSDP replica (torchtitan's dp_shard; -1: data-parallel ranks / --dp-replicate); "
              "--dp-replicate x --dp-shard x --tp must be the world size");
  add_integer(app, {"--pipeline-parallel,--pp", 1, 4096}, flags.pipeline_parallel,
              "Pipeline stages (torchtitan's pipeline_parallel_degree): the GPT cut into this many stages of "
              "consecutive layers, the token embedding on the first and the head tied to it on the last; --strategy "
              "runs per stage over its replicas (ddp, or fsdp/zero3: FSDP per stage) and --tp inside each stage; "
              "--tp x --pp must divide the world size");
  add_integer(app, {"--pp-microbatches", 0, 1 << 20}, flags.pp_microbatches,
              "With --pp: microbatches per step (0: as many as stages; at most --batch-size)");
  examples::add_choice(app, "--pp-schedule", flags.pp_schedule, {"1f1b", "gpipe"}, "With --pp: the pipeline schedule");
  app.add_flag("--sequence-parallel", flags.sequence_parallel,
               "With --tensor-parallel: split the residual stream between the blocks' halves along the sequence "
               "(--block-size must divide by the tensor-parallel size)");
  app.add_flag("--activation-checkpointing", flags.activation_checkpointing,
               "Keep no activation inside a block: backward recomputes it (cohort::checkpoint)");
  app.add_flag("--keep-gathered", flags.keep_gathered,
               "zero3/fsdp: keep each block's gathered parameters from its forward to its backward "
               "(reshard_after_forward off)");
  examples::add_choice(app, "--offload-optimizer", flags.offload_optimizer, {"none", "cpu", "nvme"},
                       "zero1-3/fsdp: keep AdamW's fp32 masters and moments in host memory (cpu; on a GPU run) or in "
                       "a swap file per rank under --nvme-path (nvme), stepped a block at a time");
  examples::add_choice(
      app, "--offload-params", flags.offload_params, {"none", "cpu", "nvme"},
      "zero3/fsdp: keep each block's parameter shard in host memory (cpu; on a GPU run) or in a "
      "swap file per rank under --nvme-path (nvme; every block: max_in_cpu 0), read ahead of its gather");
  app.add_option("--nvme-path", flags.nvme_path,
                 "The directory of the swap files of --offload-optimizer/--offload-params nvme (a local disk)");
}

// The flags, nanoGPT's names where it has them; returns --momentum's option (checked against --optimizer).
CLI::Option* add_flags(CLI::App& app, gpt_example::Flags& flags) {
  using examples::add_integer;
  using examples::add_real;
  add_integer(app, {"--n-layer", 1, 1000}, flags.n_layer, "Transformer blocks");
  add_integer(app, {"--n-head", 1, 1000}, flags.n_head, "Attention heads per block (must divide --n-embd)");
  add_integer(app, {"--n-embd", 1, 1 << 16}, flags.n_embd, "Width of the residual stream");
  add_integer(app, {"--block-size", 1, 1 << 16}, flags.block_size, "Context length in tokens (bytes)");
  add_real(app, {"--dropout", 0, 0.99}, flags.dropout, "Dropout (0: off, as equal runs need)");
  app.add_flag("--no-bias{false}", flags.bias, "No biases in the Linears and LayerNorms");
  add_integer(app, {"--batch-size", 1, 1 << 20}, flags.batch_size, "Sequences per step on each rank");
  add_integer(app, {"--max-steps", 1, int64_t(1e12)}, flags.max_steps, "Optimizer steps");
  add_integer(app, {"--eval-interval", 2, int64_t(1e12)}, flags.eval_interval,
              "Validate every this many steps (and after the last)");
  add_integer(app, {"--eval-iters", 1, 100000}, flags.eval_iters, "Validation batches per rank");
  examples::add_choice(app, "--optimizer", flags.optimizer, {"adamw", "sgd"},
                       "adamw (betas 0.9, 0.99), or sgd with --momentum");
  add_real(app, {"--lr", 1e-12, 1000}, flags.lr, "Learning rate");
  add_real(app, {"--weight-decay", 0, 1000}, flags.weight_decay, "Weight decay");
  auto* momentum = add_real(app, {"--momentum", 0, 0.999}, flags.momentum, "Momentum of --optimizer sgd (0: none)");
  add_integer(app, {"--seed", 0, int64_t(1) << 40}, flags.seed,
              "Seed of the initial weights, the batches and the sample");
  examples::add_devices(app, flags.devices,
                        "Processes on this node: N (started by the program itself without a launcher) or auto");
  examples::add_choice(app, "--precision", flags.precision, {"32-true", "bf16-mixed"},
                       "32-true, or bf16-mixed (zero*/fsdp: bf16 parameters and gradients, fp32 masters and "
                       "reductions' sums; ddp: bf16 autocast)");
  add_parallel_flags(app, flags);
  add_integer(app, {"--sample-tokens", 0, 100000}, flags.sample_tokens, "Bytes of text to generate at the end");
  add_integer(app, {"--threads", 0, 1024}, flags.threads, "Torch threads per rank (0: cores / local ranks)");
  app.add_option("--data", flags.data,
                 "A text file, or a directory whose files without a '.' in their name are read in order")
      ->capture_default_str();
  examples::add_checkpoint_flags(app, flags.checkpoint);
  app.add_option("--export", flags.export_path,
                 "At the end, write the whole model (the unsplit GPT's parameter names, whatever the mesh) to this "
                 "safetensors file, for Python's safetensors.torch.load_file");
  app.add_option("--init-from", flags.init_from,
                 "Start from these weights: a safetensors file with the GPT's parameter names (what --export or "
                 "Python's safetensors.torch.save_file writes), or a sharded set's model.safetensors.index.json; "
                 "under zero1-3/fsdp each rank reads only its own shards");
  app.add_flag("--no-memory-check", flags.no_memory_check,
               "Skip the check that the model, its AdamW state and a step's activations fit in the memory available");
  return momentum;
}

// What the flags cannot mean together, one line each (exit status 2), before anything starts.
void check_flags(const gpt_example::Flags& flags, bool momentum_given) {
  flags.checkpoint.check();
  // A path that is there must be a regular file (a fifo would block); one that is not there is said
  // when the run would read it: a checkpoint that resumes needs no --init-from file.
  std::error_code error;
  if (!flags.init_from.empty() && std::filesystem::exists(flags.init_from, error) &&
      !std::filesystem::is_regular_file(flags.init_from, error))
    throw cohort::Error("--init-from " + flags.init_from + ": not a regular file (a .safetensors file, or a sharded "
                        "set's model.safetensors.index.json)",
                        cohort::ErrorKind::kInvalidArgument);
  if (momentum_given && flags.optimizer != "sgd")
    throw cohort::Error("--momentum is for --optimizer sgd, not --optimizer " + flags.optimizer,
                        cohort::ErrorKind::kInvalidArgument);
  if (flags.offload_optimizer != "none" && flags.strategy == "ddp")
    throw cohort::Error("--offload-optimizer " + flags.offload_optimizer +
                            " needs a ZeRO strategy (zero1, zero2, zero3, fsdp), not --strategy ddp",
                        cohort::ErrorKind::kInvalidArgument);
  if (flags.offload_optimizer == "nvme" && flags.nvme_path.empty())
    throw cohort::Error("--offload-optimizer nvme needs --nvme-path DIR (a directory on a local disk)",
                        cohort::ErrorKind::kInvalidArgument);
  if (flags.offload_params != "none" && flags.strategy != "zero3" && flags.strategy != "fsdp")
    throw cohort::Error("--offload-params " + flags.offload_params +
                            " needs a strategy that shards parameters (zero3, fsdp), not --strategy " +
                            flags.strategy,
                        cohort::ErrorKind::kInvalidArgument);
  if (flags.keep_gathered && flags.strategy != "zero3" && flags.strategy != "fsdp")
    throw cohort::Error(
        "--keep-gathered needs a strategy that gathers parameters (zero3, fsdp), not --strategy " + flags.strategy,
        cohort::ErrorKind::kInvalidArgument);
  if (flags.offload_params == "nvme" && flags.nvme_path.empty())
    throw cohort::Error("--offload-params nvme needs --nvme-path DIR (a directory on a local disk)",
                        cohort::ErrorKind::kInvalidArgument);
  if (!flags.nvme_path.empty() && flags.offload_optimizer != "nvme" && flags.offload_params != "nvme")
    throw cohort::Error("--nvme-path " + flags.nvme_path +
                            " is given but nothing goes there: add --offload-optimizer nvme or --offload-params nvme",
                        cohort::ErrorKind::kInvalidArgument);
  if ((flags.dp_replicate > 1 || flags.dp_shard != -1) && flags.strategy == "ddp")
    throw cohort::Error("--dp-replicate/--dp-shard split the ranks of a ZeRO strategy (zero1-3, fsdp); --strategy "
                        "ddp replicates every rank already",
                        cohort::ErrorKind::kInvalidArgument);
  if (flags.dp_shard == 0)
    throw cohort::Error("--dp-shard 0: a replica has at least one rank (-1: the data-parallel ranks / "
                        "--dp-replicate)",
                        cohort::ErrorKind::kInvalidArgument);
  const std::string tp = std::to_string(flags.tensor_parallel);
  if (flags.n_head % flags.tensor_parallel != 0)
    throw cohort::Error("--tensor-parallel " + tp + " must divide --n-head " + std::to_string(flags.n_head) +
                            " (each rank takes whole heads)",
                        cohort::ErrorKind::kInvalidArgument);
  if (flags.sequence_parallel && flags.tensor_parallel == 1)
    throw cohort::Error(
        "--sequence-parallel splits the sequence over a tensor-parallel group: add --tensor-parallel N",
        cohort::ErrorKind::kInvalidArgument);
  if (flags.sequence_parallel && flags.block_size % flags.tensor_parallel != 0)
    throw cohort::Error("--sequence-parallel: --tensor-parallel " + tp + " must divide --block-size " +
                            std::to_string(flags.block_size),
                        cohort::ErrorKind::kInvalidArgument);
  check_pipeline_flags(flags);
  // Each head attends over n_embd / n_head of the width: said now, not after the text is read.
  if (flags.n_embd % flags.n_head != 0)
    throw cohort::Error(
        "--n-head " + std::to_string(flags.n_head) + " must divide --n-embd " + std::to_string(flags.n_embd),
        cohort::ErrorKind::kInvalidArgument);
}

}  // namespace

int main(int argc, char** argv) {
  gpt_example::Flags flags;
  CLI::App app{
      "Trains a byte-level GPT on a text with cohort's strategies; --devices N starts N local workers, "
      "or run it under cohortrun, torchrun, srun or mpirun."};
  const auto* momentum = add_flags(app, flags);
  app.callback([&] { check_flags(flags, momentum->count() > 0); });
  return examples::parse_and_run(app, argc, argv, [&] {
    // With --no-memory-check a model too large is built anyway: its failed allocation in cohort's words.
    const std::string hint = flags.no_memory_check ? " (--no-memory-check skipped the estimate that refuses it first)"
                                                   : "";
    examples::run_reporting_memory("the GPT", hint, [&] { gpt_example::run_training(flags); });
  });
}
