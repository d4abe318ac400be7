// TrainerOptions checked and resolved into what the Trainer acts on: every bad value is one line
// naming the option, the value and the accepted values (tested option by option).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cohort/trainer_options.h"

namespace cohort {
struct ZeroConfig;
}

namespace cohort::detail {

enum class StrategyKind { kDdp, kZero, kDeepSpeed, kSingle, kDp, kPipeline };
enum class Precision { k32, kBf16Mixed, k16Mixed };

struct ResolvedOptions {
  TrainerOptions raw;
  bool cuda = false;  // accelerator resolved
  int devices = 0;    // 0: "auto" (the launcher's local world, else 1)
  /// Processes on this node: devices, but 1 under "dp", whose devices are replicas on threads.
  int processes = 0;
  StrategyKind strategy = StrategyKind::kDdp;
  int zero_stage = 0;  // kZero
  bool fsdp = false;   // kZero named "fsdp" (stage 3)
  Precision precision = Precision::k32;
  /// val_check_interval as a whole number of batches (0: a fraction of the epoch, see below).
  int64_t val_every_batches = 0;
  double val_fraction = 1.0;
  /// max_time in seconds (0: no limit). fast_dev_run has set raw's limits, epochs, steps, sanity
  /// steps, checkpointing and logger (options_limits.cpp).
  double max_time_seconds = 0;
  /// zero and deepspeed: the ZeRO config (the ds_config read once, or built from the options) that
  /// configure_model and the strategy share; set by resolve_zero_config (strategy_zero.cpp).
  std::shared_ptr<const ZeroConfig> zero;
};

/// Checks `options` (cuda_available: whether LibTorch sees a GPU). Throws cohort::Error.
ResolvedOptions resolve_options(const TrainerOptions& options, bool cuda_available);

/// Part of resolve_options (options_limits.cpp): limit_*_batches, fast_dev_run, num_sanity_val_steps,
/// max_time and the fsdp unit options, checked; fast_dev_run applied to out.raw.
void resolve_limits(const TrainerOptions& options, ResolvedOptions& out);

/// Batches of a loader with `available` per epoch that `limit` lets run (a cohort::Error naming
/// `option` when a fraction leaves none of them).
int64_t limited_batches(const BatchLimit& limit, int64_t available, const std::string& option);

/// Throws the one-line refusal of an option: TrainerOptions.<option> "<value>" is not accepted: expected <accepted>.
[[noreturn]] void refuse(const std::string& option, const std::string& value, const std::string& accepted);

/// "32-true", "bf16-mixed", "16-mixed"; "ddp", "zero2", "deepspeed", ...
std::string precision_name(Precision precision);
std::string strategy_name(const ResolvedOptions& options);

}  // namespace cohort::detail
