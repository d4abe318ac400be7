// Checking TrainerOptions (see options.h). Names and accepted values follow Lightning's Trainer.
#include "trainer/options.h"

#include <cmath>
#include <sstream>

#include "cohort/error.h"
#include "core/check.h"
#include "core/text.h"

namespace cohort::detail {

void refuse(const std::string& option, const std::string& value, const std::string& accepted) {
  throw Error("TrainerOptions." + option + " \"" + printable(value) + "\" is not accepted: expected " + accepted,
              ErrorKind::kInvalidArgument);
}

namespace {

void check_at_least(const std::string& option, int64_t value, int64_t min, const std::string& accepted) {
  if (value < min) refuse(option, std::to_string(value), accepted);
}

bool resolve_cuda(const std::string& accelerator, bool cuda_available) {
  if (accelerator == "cpu") return false;
  if (accelerator == "auto") return cuda_available;
  if (accelerator == "cuda" || accelerator == "gpu") {
    COHORT_CHECK_KIND(
        kInvalidArgument, cuda_available, "TrainerOptions.accelerator \"", accelerator,
        "\" asks for a GPU, but LibTorch sees none (no CUDA build or no visible device): use \"cpu\" or \"auto\"");
    return true;
  }
  refuse("accelerator", accelerator, "one of cpu, cuda, gpu, auto");
}

int resolve_devices(const std::string& devices) {
  if (devices == "auto") return 0;
  const std::string accepted = "a number of devices from 1 to 4096, or auto";
  if (!all_digits(devices) || devices.size() > 4) refuse("devices", devices, accepted);
  const int count = std::stoi(devices);
  if (count < 1 || count > 4096) refuse("devices", devices, accepted);
  return count;
}

void resolve_strategy(const TrainerOptions& options, ResolvedOptions& out) {
  const std::string& name = options.strategy();
  if (name == "auto" || name == "ddp") {
    out.strategy = StrategyKind::kDdp;
  } else if (name == "zero1" || name == "zero2" || name == "zero3") {
    out.strategy = StrategyKind::kZero;
    out.zero_stage = name.back() - '0';
  } else if (name == "fsdp") {  // Lightning's name for ZeRO stage 3
    out.strategy = StrategyKind::kZero;
    out.zero_stage = 3;
    out.fsdp = true;
  } else if (name == "deepspeed") {
    out.strategy = StrategyKind::kDeepSpeed;
    COHORT_CHECK_KIND(kInvalidArgument, !options.deepspeed_config().empty(),
                      "TrainerOptions.strategy \"deepspeed\" needs "
                      "TrainerOptions.deepspeed_config: the path of a ds_config.json (or use zero1, zero2, zero3)");
  } else if (name == "single") {
    out.strategy = StrategyKind::kSingle;
  } else if (name == "dp") {
    out.strategy = StrategyKind::kDp;
  } else if (name == "pipeline") {
    out.strategy = StrategyKind::kPipeline;
  } else {
    refuse("strategy", name, "one of ddp, dp, fsdp, zero1, zero2, zero3, deepspeed, pipeline, single, auto");
  }
  COHORT_CHECK_KIND(kInvalidArgument,
                    options.deepspeed_config().empty() || out.strategy == StrategyKind::kDeepSpeed ||
                        out.strategy == StrategyKind::kZero,
                    "TrainerOptions.deepspeed_config \"", printable(options.deepspeed_config()),
                    "\" is given, but TrainerOptions.strategy is \"", name,
                    "\": a ds_config is read by strategy deepspeed (and zero1-3, whose stage wins)");
}

// Lightning's offload options: for the ZeRO strategies only, with a device and a path that go together.
void check_offload_options(const TrainerOptions& options, const ResolvedOptions& out) {
  const std::string& device = options.offload_optimizer_device();
  if (device != "cpu" && device != "nvme") refuse("offload_optimizer_device", device, "cpu or nvme");
  check_at_least("optimizer_buffer_count", options.optimizer_buffer_count(), 1, "an integer >= 1");
  if (options.optimizer_buffer_count() > 1024) {
    refuse("optimizer_buffer_count", std::to_string(options.optimizer_buffer_count()), "an integer from 1 to 1024");
  }
  const std::string& params_device = options.offload_params_device();
  if (params_device != "cpu" && params_device != "nvme") refuse("offload_params_device", params_device, "cpu or nvme");
  check_at_least("params_buffer_count", options.params_buffer_count(), 1, "an integer >= 1");
  if (options.params_buffer_count() > 1024) {
    refuse("params_buffer_count", std::to_string(options.params_buffer_count()), "an integer from 1 to 1024");
  }
  check_at_least("params_buffer_size", options.params_buffer_size(), 1, "an integer >= 1 (elements)");
  check_at_least("max_in_cpu", options.max_in_cpu(), 0, "an integer >= 0 (elements)");
  const bool zero = out.strategy == StrategyKind::kZero || out.strategy == StrategyKind::kDeepSpeed;
  if (options.offload_optimizer()) {
    COHORT_CHECK_KIND(kInvalidArgument, zero,
                      "TrainerOptions.offload_optimizer is for the ZeRO strategies (zero1, zero2, ",
                      "zero3, fsdp, deepspeed), not \"", options.strategy(), "\"");
    COHORT_CHECK_KIND(kInvalidArgument, device != "nvme" || !options.nvme_path().empty(),
                      "TrainerOptions.offload_optimizer_device \"nvme\" needs TrainerOptions.nvme_path: a directory "
                      "on a local disk for the swap files");
  }
  if (options.offload_parameters()) {
    // deepspeed's stage comes from its ds_config: checked when the config is read (strategy_zero.cpp).
    const bool stage3 = (out.strategy == StrategyKind::kZero && out.zero_stage == 3) ||
                        out.strategy == StrategyKind::kDeepSpeed;
    COHORT_CHECK_KIND(kInvalidArgument, stage3,
                      "TrainerOptions.offload_parameters is for ZeRO stage 3, where parameters are sharded (zero3, "
                      "fsdp, deepspeed at stage 3), not \"",
                      options.strategy(), "\"");
    COHORT_CHECK_KIND(kInvalidArgument, params_device != "nvme" || !options.nvme_path().empty(),
                      "TrainerOptions.offload_params_device \"nvme\" needs TrainerOptions.nvme_path: a directory "
                      "on a local disk for the swap files");
  }
}

// The pipeline options are read by strategy "pipeline" only; given to another, they are a mistake.
void check_pipeline_options(const TrainerOptions& options, const ResolvedOptions& out) {
  check_at_least("pipeline_stages", options.pipeline_stages(), 0,
                 "an integer >= 1 (stages per pipeline), or 0 for every rank");
  check_at_least("pipeline_chunks", options.pipeline_chunks(), 1, "an integer >= 1 (microbatches per batch)");
  const std::string& schedule = options.pipeline_schedule();
  if (schedule != "1f1b" && schedule != "gpipe") refuse("pipeline_schedule", schedule, "one of 1f1b, gpipe");
  const int64_t zero_stage = options.pipeline_zero_stage();
  if (zero_stage < 0 || zero_stage > 3)
    refuse("pipeline_zero_stage", std::to_string(zero_stage), "0 (DDP per stage) to 3 (FSDP per stage)");
  if (out.strategy == StrategyKind::kPipeline) {
    COHORT_CHECK_KIND(kInvalidArgument,
                      out.precision == Precision::k32 || (out.precision == Precision::kBf16Mixed && zero_stage > 0),
                      "TrainerOptions.precision \"", options.precision(),
                      "\" with strategy \"pipeline\": the pipeline trains in 32-true, or in bf16-mixed with "
                      "pipeline_zero_stage 1-3 (the engines' bf16 parameters and fp32 masters)");
    COHORT_CHECK_KIND(kInvalidArgument, zero_stage == 0 || options.accumulate_grad_batches() == 1,
                      "TrainerOptions.accumulate_grad_batches ", options.accumulate_grad_batches(),
                      " with pipeline_zero_stage ", zero_stage,
                      ": the pipeline's microbatches are the engines' accumulation (pipeline_chunks); use 1");
    COHORT_CHECK_KIND(kInvalidArgument, zero_stage == 0 || options.gradient_clip_val() == 0,
                      "TrainerOptions.gradient_clip_val ", options.gradient_clip_val(), " with pipeline_zero_stage ",
                      zero_stage,
                      ": each stage's ZeRO engine sees that stage's gradients only, not the whole "
                      "model's norm; use 0, or pipeline_zero_stage 0 (DDP per stage clips by the whole norm)");
    return;
  }
  if (options.pipeline_stages() != 0)
    refuse("pipeline_stages", std::to_string(options.pipeline_stages()),
           "0 unless strategy is \"pipeline\" (strategy is \"" + options.strategy() + "\")");
  if (zero_stage != 0)
    refuse("pipeline_zero_stage", std::to_string(zero_stage),
           "0 unless strategy is \"pipeline\" (strategy is \"" + options.strategy() + "\")");
}

// PowerSGD's options are read by its hooks only: changed without one, they would be silently ignored.
void check_powersgd_options(const TrainerOptions& options) {
  const std::string& hook = options.ddp_comm_hook();
  if (hook == "powersgd" || hook == "batched_powersgd") return;
  const TrainerOptions defaults;
  const std::string accepted = "its default unless ddp_comm_hook is powersgd or batched_powersgd (ddp_comm_hook is \"" +
                               printable(hook) + "\")";
  if (options.powersgd_rank() != defaults.powersgd_rank())
    refuse("powersgd_rank", std::to_string(options.powersgd_rank()),
           std::to_string(defaults.powersgd_rank()) + ", " + accepted);
  if (options.powersgd_start_iteration() != defaults.powersgd_start_iteration())
    refuse("powersgd_start_iteration", std::to_string(options.powersgd_start_iteration()),
           std::to_string(defaults.powersgd_start_iteration()) + ", " + accepted);
}

// The DDP comm hook options are read by strategy "ddp" only (ZeRO has communication_data_type).
void check_comm_hook_options(const TrainerOptions& options, const ResolvedOptions& out) {
  const std::string& hook = options.ddp_comm_hook();
  if (hook != "" && hook != "fp16" && hook != "bf16" && hook != "powersgd" && hook != "batched_powersgd")
    refuse("ddp_comm_hook", hook, "one of fp16, bf16, powersgd, batched_powersgd, or empty for none");
  check_at_least("powersgd_rank", options.powersgd_rank(), 1, "an integer >= 1 (PowerSGD's matrix_approximation_rank)");
  check_at_least("powersgd_start_iteration", options.powersgd_start_iteration(), 0,
                 "an integer >= 0 (steps of plain averaging before PowerSGD starts)");
  check_powersgd_options(options);
  if (hook.empty() || out.strategy == StrategyKind::kDdp) return;
  refuse("ddp_comm_hook", hook,
         "empty with strategy \"" + options.strategy() +
             "\" (comm hooks apply to strategy "
             "ddp; ZeRO compresses with communication_data_type in its deepspeed_config)");
}

Precision resolve_precision(const std::string& name) {
  if (name == "32-true" || name == "32") return Precision::k32;
  if (name == "bf16-mixed" || name == "bf16") return Precision::kBf16Mixed;
  if (name == "16-mixed" || name == "16") return Precision::k16Mixed;
  refuse("precision", name, "one of 32-true, bf16-mixed, 16-mixed (or 32, bf16, 16)");
}

void resolve_validation(const TrainerOptions& options, ResolvedOptions& out) {
  const double interval = options.val_check_interval();
  const std::string accepted = "a fraction of the epoch in (0, 1] or a whole number of batches >= 1";
  if (!std::isfinite(interval) || interval <= 0) refuse("val_check_interval", number_text(interval), accepted);
  if (interval > 1) {
    if (interval != std::floor(interval)) refuse("val_check_interval", number_text(interval), accepted);
    out.val_every_batches = static_cast<int64_t>(interval);
  } else {
    out.val_fraction = interval;
  }
  check_at_least("check_val_every_n_epoch", options.check_val_every_n_epoch(), 1, "an integer >= 1");
}

void check_loop_limits(const TrainerOptions& options) {
  check_at_least("max_epochs", options.max_epochs(), -1, "an integer >= 0, or -1 for no limit");
  check_at_least("max_steps", options.max_steps(), -1, "an integer >= 0, or -1 for no limit");
  COHORT_CHECK_KIND(kInvalidArgument, options.max_epochs() >= 0 || options.max_steps() >= 0,
                    "TrainerOptions.max_epochs -1 and max_steps -1: training would never end; set one of them");
  check_at_least("accumulate_grad_batches", options.accumulate_grad_batches(), 1, "an integer >= 1");
  check_at_least("log_every_n_steps", options.log_every_n_steps(), 1, "an integer >= 1");
  check_at_least("num_nodes", options.num_nodes(), 1, "an integer >= 1");
  check_at_least("seed", options.seed(), -1, "an integer >= 0, or -1 to leave the generator as it is");
  const double clip = options.gradient_clip_val();
  if (!std::isfinite(clip) || clip < 0)
    refuse("gradient_clip_val", number_text(clip), "a finite number >= 0 (0: no clipping)");
}

void check_tensor_parallel_options(const TrainerOptions& options, const ResolvedOptions& out) {
  check_at_least("tensor_parallel_size", options.tensor_parallel_size(), 1, "an integer >= 1");
  check_at_least("data_parallel_replicate_size", options.data_parallel_replicate_size(), 0,
                 "an integer >= 1, or 0 for one replica per node at stage 3");
  const int64_t shard = options.data_parallel_shard_size();
  if (shard == 0 || shard < -1) refuse("data_parallel_shard_size", std::to_string(shard), "an integer >= 1, or -1");
  const bool zero = out.strategy == StrategyKind::kZero || out.strategy == StrategyKind::kDeepSpeed;
  const bool hsdp = options.data_parallel_replicate_size() > 1 || shard != -1;
  COHORT_CHECK_KIND(
      kInvalidArgument, !hsdp || zero, "TrainerOptions.",
      options.data_parallel_replicate_size() > 1 ? "data_parallel_replicate_size " : "data_parallel_shard_size ",
      options.data_parallel_replicate_size() > 1 ? options.data_parallel_replicate_size() : shard, " with strategy \"",
      options.strategy(),
      "\": HSDP replicates sharded state, under zero1-3, fsdp or deepspeed (ddp replicates everything)");
  const bool composes = out.strategy == StrategyKind::kDdp || out.strategy == StrategyKind::kZero ||
                        out.strategy == StrategyKind::kDeepSpeed || out.strategy == StrategyKind::kPipeline;
  COHORT_CHECK_KIND(
      kInvalidArgument, options.tensor_parallel_size() == 1 || composes, "TrainerOptions.tensor_parallel_size ",
      options.tensor_parallel_size(), " with strategy \"", options.strategy(),
      "\": tensor parallelism runs under ddp, zero1-3, fsdp, deepspeed or pipeline (data parallel over the "
      "other ranks); dp over it is not built");
}

}  // namespace

ResolvedOptions resolve_options(const TrainerOptions& options, bool cuda_available) {
  ResolvedOptions out;
  out.raw = options;
  out.cuda = resolve_cuda(options.accelerator(), cuda_available);
  out.devices = resolve_devices(options.devices());
  resolve_strategy(options, out);
  out.processes = out.strategy == StrategyKind::kDp ? 1 : out.devices;
  out.precision = resolve_precision(options.precision());
  check_loop_limits(options);
  resolve_validation(options, out);
  check_pipeline_options(options, out);
  check_offload_options(options, out);
  check_comm_hook_options(options, out);
  check_tensor_parallel_options(options, out);
  resolve_limits(options, out);
  COHORT_CHECK_KIND(kInvalidArgument, out.precision != Precision::k16Mixed || out.cuda, "TrainerOptions.precision \"",
                    options.precision(),
                    "\" needs a GPU (LibTorch has no float16 autocast or convolution on the CPU): "
                    "use \"bf16-mixed\" on the CPU");
  COHORT_CHECK_KIND(kInvalidArgument,
                    out.precision != Precision::k16Mixed || out.strategy == StrategyKind::kZero ||
                        out.strategy == StrategyKind::kDeepSpeed,
                    "TrainerOptions.precision \"", options.precision(), "\" with strategy \"", options.strategy(),
                    "\": float16 needs loss scaling, which the ZeRO engine does; use strategy zero1/zero2/zero3 or "
                    "precision bf16-mixed");
  COHORT_CHECK_KIND(
      kInvalidArgument, !options.uneven_inputs() || out.strategy != StrategyKind::kPipeline,
      "TrainerOptions.uneven_inputs "
      "with strategy \"pipeline\": a pipeline's stages read the same batches and cannot run uneven shares; "
      "set uneven_inputs(false)");
  COHORT_CHECK_KIND(kInvalidArgument, out.strategy != StrategyKind::kSingle || out.devices <= 1,
                    "TrainerOptions.strategy \"single\" "
                    "runs on one device, but devices is ",
                    options.devices(), ": use devices 1, or strategy ddp");
  // dp's replicas are threads of this one process: there is nothing to place on other nodes.
  if (out.strategy == StrategyKind::kDp && options.num_nodes() != 1)
    refuse("num_nodes", std::to_string(options.num_nodes()),
           "1 with strategy dp (its replicas are threads of one process; use strategy ddp across nodes)");
  return out;
}

std::string precision_name(Precision precision) {
  switch (precision) {
    case Precision::k32: return "32-true";
    case Precision::kBf16Mixed: return "bf16-mixed";
    case Precision::k16Mixed: return "16-mixed";
  }
  return "?";
}

std::string strategy_name(const ResolvedOptions& options) {
  switch (options.strategy) {
    case StrategyKind::kDdp: return "ddp";
    case StrategyKind::kZero: return options.fsdp ? "fsdp" : "zero" + std::to_string(options.zero_stage);
    case StrategyKind::kDeepSpeed: return "deepspeed";
    case StrategyKind::kSingle: return "single";
    case StrategyKind::kDp: return "dp";
    case StrategyKind::kPipeline: return "pipeline";
  }
  return "?";
}

}  // namespace cohort::detail
