// cohort::ZeroConfig: the subset of DeepSpeed's ds_config.json that cohort's ZeRO engine reads, with
// DeepSpeed's defaults, so an existing config file works unchanged. parse_ds_config/load_ds_config
// validate it (errors name the key path and the value) and resolve the batch-size triple; keys
// cohort does not support are listed in one warning. See docs/zero.md for every key.
#pragma once

#include <torch/arg.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort {

enum class OffloadDevice { kNone, kCpu, kNvme };

/// "offload_optimizer" (ZeRO-Offload; ZeRO-Infinity with device nvme): where the fp32 master weights
/// and the optimizer state live between steps, and the step with them.
struct OffloadOptimizerConfig {
  /// kCpu: host memory; kNvme: a swap file per rank under nvme_path, read and written a group at a time.
  TORCH_ARG(OffloadDevice, device) = OffloadDevice::kNone;
  /// kNvme: the directory of the swap files (a local disk; created files are removed at the end).
  TORCH_ARG(std::string, nvme_path) = "";
  /// Page-locked host buffers (on CUDA: faster copies; no effect on a CPU run).
  TORCH_ARG(bool, pin_memory) = false;
  /// kNvme: groups read ahead or being written at once, beyond the one the step works on.
  TORCH_ARG(int, buffer_count) = 4;
  /// Accepted for DeepSpeed's configs: cohort's start already writes each group once.
  TORCH_ARG(bool, fast_init) = false;
};

/// "offload_param" (stage 3; ZeRO-Infinity with device nvme): where each sharding unit's parameter
/// shard lives between the unit's gathers.
struct OffloadParamConfig {
  /// kCpu: host memory (a GPU run copies a unit's shard up for its gather); kNvme: a swap file per
  /// rank under nvme_path, each unit's shard read ahead of its gather.
  TORCH_ARG(OffloadDevice, device) = OffloadDevice::kNone;
  /// kNvme: the directory of the swap files (a local disk; created files are removed at the end).
  TORCH_ARG(std::string, nvme_path) = "";
  /// Page-locked host buffers (on CUDA: faster copies; no effect on a CPU run).
  TORCH_ARG(bool, pin_memory) = false;
  /// kNvme: units read ahead of their gather, beyond the one being gathered.
  TORCH_ARG(int, buffer_count) = 5;
  /// kNvme: elements of the largest unit shard a buffer holds (a larger shard is refused).
  TORCH_ARG(int64_t, buffer_size) = 100000000;
  /// kNvme: parameter elements kept in host memory anyway (the first units', in order); the rest go
  /// on file. DeepSpeed's default 1e9 keeps every model under a billion elements per rank in memory:
  /// set 0 to put every unit on file.
  TORCH_ARG(int64_t, max_in_cpu) = 1000000000;
};

/// "aio": how swap files are read and written (ZeRO-Infinity). Sizes in bytes.
struct AioConfig {
  /// Bytes per request (a multiple of 4096).
  TORCH_ARG(int64_t, block_size) = 1048576;
  /// Requests in flight at once.
  TORCH_ARG(int, queue_depth) = 8;
  /// DeepSpeed's I/O threads; cohort submits from the engine's thread through io_uring (accepted, >= 1).
  TORCH_ARG(int, thread_count) = 1;
  /// Submit requests one at a time instead of in batches.
  TORCH_ARG(bool, single_submit) = false;
  /// Keep the queue full while waiting for completions.
  TORCH_ARG(bool, overlap_events) = true;
};

/// "zero_optimization": {...}. Sizes are in elements, as in DeepSpeed.
struct ZeroOptimizationConfig {
  /// 0 = plain data parallel, 1 = shard optimizer states, 2 = + gradients, 3 = + parameters.
  TORCH_ARG(int, stage) = 0;
  /// Reduce gradients while backward runs. DeepSpeed's default depends on the stage: true for
  /// stage 3, false otherwise; parse_ds_config applies that when the key is absent.
  TORCH_ARG(bool, overlap_comm) = false;
  /// Copy gradients into one contiguous buffer as they are produced.
  TORCH_ARG(bool, contiguous_gradients) = true;
  /// Elements reduced at a time.
  TORCH_ARG(int64_t, reduce_bucket_size) = 500000000;
  /// Elements all-gathered at a time.
  TORCH_ARG(int64_t, allgather_bucket_size) = 500000000;
  /// "offload_optimizer": {"device": "none"|"cpu"|"nvme", ...}: where optimizer states (and the step) live.
  TORCH_ARG(OffloadOptimizerConfig, offload_optimizer) = {};
  /// "offload_param": {"device": "none"|"cpu"|"nvme", ...}: stage 3's parameter shards (stage 3 only).
  TORCH_ARG(OffloadParamConfig, offload_param) = {};
  /// Stage 3: elements of the upcoming units gathered ahead of their turn (0: no prefetch).
  TORCH_ARG(int64_t, stage3_prefetch_bucket_size) = 50000000;
  /// Stage 3: at most this many elements gathered at once, counting prefetches (a unit about to run
  /// is always gathered).
  TORCH_ARG(int64_t, stage3_max_live_parameters) = 1000000000;
  /// Stage 3: a unit with at most this many elements stays gathered for the whole step (per unit;
  /// DeepSpeed applies it per parameter, default 1e5; cohort's default 0 shards every unit).
  TORCH_ARG(int64_t, stage3_param_persistence_threshold) = 0;
  /// Stage 3 with offload_optimizer nvme: the most elements a rank steps and swaps at a time (one
  /// optimizer sub-group). cohort's sub-group is a sharding unit's shard; a larger one is refused.
  TORCH_ARG(int64_t, sub_group_size) = 1000000000;
};

/// "fp16": {...}: fp16 training with a loss scaler.
struct Fp16Config {
  TORCH_ARG(bool, enabled) = false;
  /// 0 means dynamic loss scaling; any positive value is a fixed scale.
  TORCH_ARG(double, loss_scale) = 0.0;
  /// The dynamic scale starts at 2^initial_scale_power.
  TORCH_ARG(int, initial_scale_power) = 16;
  /// Steps without overflow before the dynamic scale doubles.
  TORCH_ARG(int, loss_scale_window) = 1000;
  /// Overflows tolerated before the dynamic scale halves.
  TORCH_ARG(int, hysteresis) = 2;
  /// The dynamic scale never goes below this.
  TORCH_ARG(double, min_loss_scale) = 1.0;
};

/// "bf16": {"enabled": ...} ("bfloat16" is accepted as DeepSpeed's older spelling).
struct Bf16Config {
  TORCH_ARG(bool, enabled) = false;
};

/// "communication_data_type": the dtype gradients are reduced in. kDefault: their own (the compute
/// dtype); otherwise each reduction casts to it, divides by the world size there, and casts back.
enum class CommDataType { kDefault, kFp32, kFp16, kBf16 };

enum class OptimizerType { kNone, kSgd, kAdam, kAdamW };
using AdamBetas = std::array<double, 2>;

/// "optimizer": {"type": "SGD"|"Adam"|"AdamW", "params": {...}}; the type is matched without case,
/// as DeepSpeed does. kNone: no "optimizer" key, the program brings its own.
struct OptimizerConfig {
  TORCH_ARG(OptimizerType, type) = OptimizerType::kNone;
  /// Adam/AdamW default 1e-3; SGD has no default (torch.optim.SGD requires lr), parse demands it.
  TORCH_ARG(double, lr) = 1e-3;
  TORCH_ARG(double, weight_decay) = 0.0;
  /// Adam/AdamW.
  TORCH_ARG(AdamBetas, betas) = AdamBetas{0.9, 0.999};
  TORCH_ARG(double, eps) = 1e-8;
  TORCH_ARG(bool, amsgrad) = false;
  /// DeepSpeed's "Adam" applies weight decay decoupled (AdamW-style) unless params.adam_w_mode is
  /// false; "AdamW" always does. This is the resolved answer for the chosen type.
  TORCH_ARG(bool, decoupled_weight_decay) = true;
  /// SGD.
  TORCH_ARG(double, momentum) = 0.0;
  TORCH_ARG(double, dampening) = 0.0;
  TORCH_ARG(bool, nesterov) = false;
};

enum class SchedulerType { kNone, kWarmupLR, kWarmupDecayLR };
enum class WarmupType { kLog, kLinear };

/// "scheduler": {"type": "WarmupLR"|"WarmupDecayLR", "params": {...}}.
struct SchedulerConfig {
  TORCH_ARG(SchedulerType, type) = SchedulerType::kNone;
  TORCH_ARG(double, warmup_min_lr) = 0.0;
  TORCH_ARG(double, warmup_max_lr) = 0.001;
  TORCH_ARG(int64_t, warmup_num_steps) = 1000;
  TORCH_ARG(WarmupType, warmup_type) = WarmupType::kLog;
  /// WarmupDecayLR only, and required there.
  TORCH_ARG(int64_t, total_num_steps) = 0;
};

/// A parsed ds_config.json. Build one in C++ with the chained setters, or with parse_ds_config.
struct ZeroConfig {
  /// The world the batch triple was resolved for.
  TORCH_ARG(int, world_size) = 1;
  /// train_batch_size = train_micro_batch_size_per_gpu * gradient_accumulation_steps * world_size.
  /// 0 in the two sizes means the config gave neither: the micro batch is whatever the training
  /// loop feeds (cohort accepts such configs, DeepSpeed does not).
  TORCH_ARG(int64_t, train_batch_size) = 0;
  TORCH_ARG(int64_t, train_micro_batch_size_per_gpu) = 0;
  TORCH_ARG(int64_t, gradient_accumulation_steps) = 1;
  TORCH_ARG(ZeroOptimizationConfig, zero_optimization) = {};
  TORCH_ARG(Fp16Config, fp16) = {};
  TORCH_ARG(Bf16Config, bf16) = {};
  /// "communication_data_type": "fp32", "fp16" or "bf16" (any case; "bfp16" is DeepSpeed's older
  /// spelling); absent or null: the gradients' own dtype.
  TORCH_ARG(CommDataType, communication_data_type) = CommDataType::kDefault;
  /// Clip the global gradient norm to this; 0 disables clipping.
  TORCH_ARG(double, gradient_clipping) = 0.0;
  TORCH_ARG(OptimizerConfig, optimizer) = {};
  TORCH_ARG(SchedulerConfig, scheduler) = {};
  TORCH_ARG(AioConfig, aio) = {};
  /// "activation_checkpointing": {...} present: every sharding unit recomputes its forward in
  /// backward (cohort::checkpoint) instead of keeping its activations.
  TORCH_ARG(bool, activation_checkpointing) = false;
  /// Keys of the file that cohort ignores, as dotted paths in file order ("wall_clock_breakdown",
  /// "zero_optimization.stage3_max_live_parameters"); parse_ds_config also warns about them.
  TORCH_ARG(std::vector<std::string>, unsupported_keys) = {};
};

/// Parses ds_config JSON text (comments and trailing commas allowed, as DeepSpeed's hjson reader
/// does) for a world of `world_size` ranks. Throws cohort::Error naming the key path and value of
/// an invalid entry, or the line and column of a JSON syntax error. A null value means the default.
ZeroConfig parse_ds_config(const std::string& json_text, int world_size);

/// Reads and parses the file at `path`; errors name the path.
ZeroConfig load_ds_config(const std::string& path, int world_size);

/// The learning rate DeepSpeed's WarmupLR / WarmupDecayLR gives after `step` scheduler steps
/// (its last_batch_iteration; step 0 is the first optimizer step). With W = max(2, warmup_num_steps)
/// and gamma = log(step + 1) / log(W) (log warmup) or step / W (linear), for step < W; after warmup
/// gamma = 1 (WarmupLR) or max(0, (total_num_steps - step) / max(1, total_num_steps - W))
/// (WarmupDecayLR). lr = warmup_min_lr + (warmup_max_lr - warmup_min_lr) * gamma. A negative step
/// (before the first step) gives 0, as DeepSpeed does. Throws for SchedulerType::kNone.
double warmup_lr(const SchedulerConfig& scheduler, int64_t step);

}  // namespace cohort
COHORT_EXPORT_END
