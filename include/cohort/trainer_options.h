// cohort::TrainerOptions: what a cohort::Trainer does, with PyTorch Lightning's names where the
// meaning is the same (accelerator, devices, strategy, precision, max_epochs, ...). Every value is
// checked when the Trainer is made: a bad one is a cohort::Error of one line naming the option, the
// value and the accepted values. See docs/trainer.md.
#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort {

/// Lightning's limit_train_batches / limit_val_batches, an int or a float: an integer is a number of
/// batches (at most the loader's), a floating-point number a fraction of the loader's batches (1.0:
/// all of them; rounded down, and at least one batch must remain).
struct BatchLimit {
  BatchLimit(double fraction) : value(fraction) {}  // NOLINT: implicit, as Lightning's float
  template <typename T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
  BatchLimit(T batches) : value(static_cast<double>(batches)), is_count(true) {}  // NOLINT: Lightning's int
  double value = 1.0;
  bool is_count = false;
};

struct TrainerOptions {
  /// "cpu", "cuda" or "auto" (cuda when LibTorch has CUDA and a GPU is visible).
  TORCH_ARG(std::string, accelerator) = "auto";
  /// Processes (one per device) on this node: a positive number, or "auto" (the launcher's local
  /// world, else 1). Without a launcher and above 1 the Trainer starts the other workers itself.
  /// Under strategy "dp": replicas in this one process (auto: every visible GPU, or 1 on the CPU).
  TORCH_ARG(std::string, devices) = "auto";

 public:
  TrainerOptions& devices(int64_t count) {
    devices_ = std::to_string(count);
    return *this;
  }
  TORCH_ARG(int64_t, num_nodes) = 1;
  /// "ddp" (cohort::DistributedDataParallel), "dp" (DataParallel / MirroredStrategy: one process,
  /// a replica per device on its own thread, gradients summed in process), "zero1", "zero2", "zero3"
  /// (the ZeRO engine at that stage), "fsdp" (Lightning's name for zero3: parameters, gradients and
  /// optimizer state sharded unit by unit over the units the module names: cohort::fully_shard and
  /// TrainingModule::shard_units()), "deepspeed" (the ZeRO engine as deepspeed_config says),
  /// "pipeline" (the network cut into stages across ranks, cohort::pipeline; fp32; the module's
  /// loss() gives each microbatch's loss), "single" (one device, no reduction), or "auto" (ddp).
  TORCH_ARG(std::string, strategy) = "auto";
  /// Lightning's sync_batchnorm: before the strategy wraps the model, cohort::convert_sync_batchnorm
  /// turns its BatchNorm1d/2d/3d into cohort::SyncBatchNorm over the world's ranks (batch statistics
  /// of the global batch). Strategies ddp, single, zero1-3, fsdp and deepspeed; not dp or pipeline.
  TORCH_ARG(bool, sync_batchnorm) = false;
  /// Strategy "ddp": gradient compression by a DDP communication hook (Lightning's
  /// DDPStrategy(ddp_comm_hook=...), cohort/comm_hooks.h): "" (none), "fp16", "bf16", "powersgd" or
  /// "batched_powersgd". Its state (PowerSGD's error and Q) is not in checkpoints, as in PyTorch.
  /// ZeRO strategies compress with communication_data_type in the deepspeed_config instead.
  TORCH_ARG(std::string, ddp_comm_hook) = "";
  /// ddp_comm_hook "powersgd" / "batched_powersgd": PowerSGDOptions' matrix_approximation_rank (>= 1)
  /// and start_iteration (>= 0: steps of plain averaging first; PyTorch's default 1000).
  TORCH_ARG(int64_t, powersgd_rank) = 1;
  TORCH_ARG(int64_t, powersgd_start_iteration) = 1000;
  /// Strategy "pipeline": stages per pipeline, one per rank (0: every rank of the world, or of a
  /// tensor-parallel coordinate, is a stage). When it divides the world, the world is a mesh {pipe,
  /// data, tensor_parallel} (the stages outermost): (world / (stages x tensor_parallel_size)) pipelines
  /// side by side, each stage averaging its gradients with its replicas (DDP), each pipeline reading its
  /// own share of the data.
  TORCH_ARG(int64_t, pipeline_stages) = 0;
  /// Strategy "pipeline": microbatches per batch (split as torch.tensor_split does).
  TORCH_ARG(int64_t, pipeline_chunks) = 4;
  /// Strategy "pipeline": "1f1b" or "gpipe" (cohort/pipeline_schedule.h).
  TORCH_ARG(std::string, pipeline_schedule) = "1f1b";
  /// Strategy "pipeline": each stage's replicas (world / pipeline_stages of them, at least 2) under the
  /// ZeRO engine at this stage instead of DDP: 1 or 2 shard the optimizer state (and gradients), 3 the
  /// parameters too (FSDP per stage, torchtitan's pipeline x FSDP). The engines step the module's
  /// configure_optimizers over their shards; accumulate_grad_batches 1, no gradient_clip_val (an
  /// engine sees one stage's gradients). 0: DDP.
  TORCH_ARG(int64_t, pipeline_zero_stage) = 0;
  /// Tensor parallelism (Lightning's ModelParallelStrategy): the world becomes a mesh with the axes
  /// "data_parallel" and "tensor_parallel", tensor_parallel_size consecutive ranks in each
  /// tensor-parallel group (one node's when it divides the node's ranks). The module's configure_model
  /// splits its layers with cohort::tp::parallelize_module(*this,
  /// device_mesh().group_ptr("tensor_parallel"), plan); the data is split over "data_parallel", where
  /// strategy ddp averages the gradients. Checkpoints hold whole tensors, so any tensor_parallel_size
  /// resumes them. It must divide the world size; strategies ddp (or auto), zero1-3, fsdp, deepspeed
  /// and pipeline (inside each stage), not dp.
  TORCH_ARG(int64_t, tensor_parallel_size) = 1;
  /// HSDP (torchtitan's dp_replicate, FSDP2 on a 2-D mesh): under zero1-3, fsdp or deepspeed the
  /// data-parallel ranks form this many replicas of (data-parallel ranks / replicas) consecutive
  /// ranks each; the engine shards within a replica and allreduces each gradient shard across the
  /// replicas, so parameter gathers stay inside one. 0 (auto): on several nodes of equally many ranks
  /// (numbered node by node) at stage 3, one replica per node (shard within a node, replicate across
  /// nodes), else 1. It must divide the data-parallel ranks (world / tensor_parallel_size).
  TORCH_ARG(int64_t, data_parallel_replicate_size) = 0;
  /// HSDP (torchtitan's dp_shard): the ranks of each replica; -1: the data-parallel ranks /
  /// data_parallel_replicate_size. Given alone, the replicas are the data-parallel ranks / this.
  TORCH_ARG(int64_t, data_parallel_shard_size) = -1;
  /// Strategy fsdp / zero3, for the units TrainingModule::shard_units() makes (and each entry of a
  /// network without marked units): free each unit's gathered parameters after its forward and
  /// gather them again for backward (false: keep them until backward, FSDP's SHARD_GRAD_OP), and
  /// recompute each unit's activations in backward instead of keeping them. Units the module marked
  /// with cohort::fully_shard keep the UnitOptions they were given.
  TORCH_ARG(bool, reshard_after_forward) = true;
  TORCH_ARG(bool, activation_checkpointing) = false;
  /// A DeepSpeed ds_config.json for strategy "deepspeed", or for "zero1-3" (whose stage overrides the
  /// file's).
  TORCH_ARG(std::string, deepspeed_config) = "";
  /// Pretrained weights loaded at the start of fit, once the strategy holds the model, when no checkpoint
  /// resumes (a checkpoint replaces them; a resume neither reads nor needs the file): a safetensors file, or a Hugging
  /// Face sharded set's `model.safetensors.index.json`, by the model's parameter names. Under zero / fsdp each rank
  /// reads only its own shards' bytes (cohort::load_pretrained). Empty: the model's own initialisation.
  TORCH_ARG(std::string, pretrained_weights) = "";
  /// The part of the model pretrained_weights holds: only names beginning with this are loaded, named
  /// without it in the file ("gpt." for a module that keeps its GPT as "gpt").
  TORCH_ARG(std::string, pretrained_prefix) = "";
  /// Lightning's DeepSpeedStrategy offload options, for the ZeRO strategies (zero1-3, fsdp,
  /// deepspeed; they override the ds_config's): keep the fp32 masters and optimizer state off the
  /// device (ZeRO-Offload), in host memory ("cpu") or in a swap file per rank under nvme_path
  /// ("nvme", ZeRO-Infinity), stepped there a group at a time (docs/zero.md, "Offload").
  TORCH_ARG(bool, offload_optimizer) = false;
  TORCH_ARG(std::string, offload_optimizer_device) = "cpu";
  TORCH_ARG(std::string, nvme_path) = "";
  /// Groups read ahead or written behind at once with offload_optimizer_device "nvme".
  TORCH_ARG(int64_t, optimizer_buffer_count) = 4;
  /// Stage 3 (zero3, fsdp, deepspeed at stage 3): keep each sharding unit's parameter shard off the
  /// device between its gathers (ds_config offload_param), in host memory ("cpu") or in a swap file
  /// per rank under nvme_path ("nvme"), read ahead of its gather.
  TORCH_ARG(bool, offload_parameters) = false;
  TORCH_ARG(std::string, offload_params_device) = "cpu";
  /// Units read ahead at once with offload_params_device "nvme".
  TORCH_ARG(int64_t, params_buffer_count) = 5;
  /// Elements of the largest unit shard a read-ahead buffer holds.
  TORCH_ARG(int64_t, params_buffer_size) = 100000000;
  /// Parameter elements kept in host memory with offload_params_device "nvme" (the first units'; the
  /// rest on file). Lightning's default, 1e9, keeps a model under a billion elements per rank in memory.
  TORCH_ARG(int64_t, max_in_cpu) = 1000000000;
  /// "32-true", "bf16-mixed", "16-mixed", or the aliases "32", "16", "bf16".
  TORCH_ARG(std::string, precision) = "32-true";
  /// -1: no limit by epochs (then max_steps must be set); Lightning's default is 1000.
  TORCH_ARG(int64_t, max_epochs) = 1000;
  /// Optimizer steps in all; -1: no limit.
  TORCH_ARG(int64_t, max_steps) = -1;
  TORCH_ARG(int64_t, accumulate_grad_batches) = 1;
  /// false (Lightning's behaviour): the training sampler pads each rank's share by repeating samples
  /// so every rank runs as many batches. true: no padding, every sample once per epoch over all ranks
  /// (shares differ by at most one sample); each epoch runs as many steps as the largest share has
  /// batches, and a rank whose share has ended replays its last batch with weight zero in its loss,
  /// so it adds nothing to the gradient (divided by the world size, as cohort::Join's default) while
  /// every collective of the step still lines up (ddp, zero1-3, fsdp, deepspeed, dp; not pipeline).
  TORCH_ARG(bool, uneven_inputs) = false;
  /// Clip the global gradient norm to this; 0: no clipping.
  TORCH_ARG(double, gradient_clip_val) = 0.0;
  /// Validate every this many training batches (an integer above 1) or fraction of the epoch (at most
  /// 1.0); 1.0: at the end of each epoch.
  TORCH_ARG(double, val_check_interval) = 1.0;
  TORCH_ARG(int64_t, check_val_every_n_epoch) = 1;
  /// Training / validation batches per epoch on each rank: an integer count or a fraction of the
  /// loader's (see BatchLimit); limit_val_batches 0 turns validation off.
  TORCH_ARG(BatchLimit, limit_train_batches) = 1.0;
  TORCH_ARG(BatchLimit, limit_val_batches) = 1.0;
  /// A smoke test (Lightning's fast_dev_run): n > 0 (true: 1) runs n training batches of one epoch, n
  /// validation batches and, in test(), n test batches; no sanity check, checkpoints or loggers.
  TORCH_ARG(int64_t, fast_dev_run) = 0;
  /// Validation batches run before training starts, to fail early on a broken validation_step
  /// (their metrics are not logged); -1: the whole validation loader; 0: none.
  TORCH_ARG(int64_t, num_sanity_val_steps) = 2;
  /// Stop training after this long (checked after each optimizer step; the last checkpoint is saved
  /// as at any end of fit): "DD:HH:MM:SS" (Lightning's string) or a number of seconds; "": no limit.
  TORCH_ARG(std::string, max_time) = "";

 public:
  TrainerOptions& max_time(double seconds);
  /// Logged step values go to the loggers every this many optimizer steps.
  TORCH_ARG(int64_t, log_every_n_steps) = 50;
  /// Where logs and checkpoints go by default ("" = the working directory).
  TORCH_ARG(std::string, default_root_dir) = "";
  /// Seeds torch's generator before the module's weights exist (-1: leave it) and the training
  /// sampler's shuffle (-1: 0).
  TORCH_ARG(int64_t, seed) = -1;
  /// torch's deterministic algorithms (at::globalContext().setDeterministicAlgorithms).
  TORCH_ARG(bool, deterministic) = false;
  /// Rank 0's progress bar (a cohort::ProgressBar callback unless one is given).
  TORCH_ARG(bool, enable_progress_bar) = true;
  /// A ModelCheckpoint saving the last state under default_root_dir/checkpoints unless one is given.
  TORCH_ARG(bool, enable_checkpointing) = true;
  /// A CSVLogger under default_root_dir unless loggers are given.
  TORCH_ARG(bool, logger) = true;
};

}  // namespace cohort
COHORT_EXPORT_END
