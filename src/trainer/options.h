// TrainerOptions checked and resolved into what the Trainer acts on: every bad value is one line
// naming the option, the value and the accepted values (tested option by option).
#pragma once

#include <cstdint>
#include <string>

#include "cohort/trainer_options.h"

namespace cohort::detail {

enum class StrategyKind { kDdp, kZero, kDeepSpeed, kSingle, kDp, kPipeline };
enum class Precision { k32, kBf16Mixed, k16Mixed };

struct ResolvedOptions {
  TrainerOptions raw;
  bool cuda = false;         // accelerator resolved
  int devices = 0;           // 0: "auto" (the launcher's local world, else 1)
  /// Processes on this node: devices, but 1 under "dp", whose devices are replicas on threads.
  int processes = 0;
  StrategyKind strategy = StrategyKind::kDdp;
  int zero_stage = 0;        // kZero
  Precision precision = Precision::k32;
  /// val_check_interval as a whole number of batches (0: a fraction of the epoch, see below).
  int64_t val_every_batches = 0;
  double val_fraction = 1.0;
};

/// Checks `options` (cuda_available: whether LibTorch sees a GPU). Throws cohort::Error.
ResolvedOptions resolve_options(const TrainerOptions& options, bool cuda_available);

/// "32-true", "bf16-mixed", "16-mixed"; "ddp", "zero2", "deepspeed", ...
std::string precision_name(Precision precision);
std::string strategy_name(const ResolvedOptions& options);

}  // namespace cohort::detail
