// ds_config.json -> cohort::ZeroConfig. Reads DeepSpeed's file as DeepSpeed does (hjson-style trailing
// commas and comments, duplicate keys refused, DeepSpeed's defaults and batch-size rules), checks every
// value it uses (errors name the key path and the value), and collects the keys it does not use into
// one warning. Also the WarmupLR / WarmupDecayLR formulas of deepspeed/runtime/lr_schedules.py.
#include <limits>
#include <mutex>
#include <set>
#include <string>

#include "cohort/error.h"
#include "cohort/zero_config.h"
#include "core/check.h"
#include "core/file_read.h"
#include "core/log.h"
#include "world/launch_env.h"
#include "zero/config_offload.h"
#include "zero/config_reader.h"

namespace cohort {
namespace {

// Once per file and keys, and on the first rank only: the Trainer and the engine both read the config,
// every rank reads it, and a warning said twice is one people learn to skip (it is the only sign of a
// typo'd key). At most 200 characters of keys, then how many more (50,000 made one line of 50,000).
void warn_unsupported(const std::string& source, const std::vector<std::string>& keys) {
  try {
    if (detail::detect_launch_env(detail::current_env()).rank != 0) return;
  } catch (const Error&) {  // a launcher's variables init() will refuse: warn here as a world of one
  }
  std::string list;
  size_t listed = 0;
  for (; listed < keys.size() && list.size() < 200; ++listed) list += (list.empty() ? "" : ", ") + keys[listed];
  if (listed < keys.size()) list += " and " + std::to_string(keys.size() - listed) + " more";
  static std::mutex mutex;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mutex);
  if (warned.insert(source + "\n" + list).second)
    COHORT_WARN(source, ": ignoring keys cohort does not support: ", list);
}

using namespace detail::ds_config;
using detail::str;

// DeepSpeed's _set_batch_related_parameters + _batch_assertion, except that a config with neither
// train_batch_size nor train_micro_batch_size_per_gpu is accepted (the loop's batch is the micro batch).
void resolve_batch(Section& top, const Context& ctx, ZeroConfig* config) {
  const int64_t world = config->world_size();
  std::optional<int64_t> train = top.integer("train_batch_size", 1);
  std::optional<int64_t> micro = top.integer("train_micro_batch_size_per_gpu", 1);
  std::optional<int64_t> accum = top.integer("gradient_accumulation_steps", 1);
  const bool given_train = train.has_value(), given_micro = micro.has_value();
  const bool given_accum = accum.has_value();
  // The engine counts micro-steps in an int: a count past it (given, or derived from a huge
  // train_batch_size) is refused here, naming it, not wrapped to a negative number later.
  const auto check_accum = [&](int64_t steps, bool given) {
    if (steps > std::numeric_limits<int32_t>::max())
      ctx.fail(str("gradient_accumulation_steps=", steps, given ? "" : " (derived)", " is out of range: at most ",
                   std::numeric_limits<int32_t>::max(), " micro-steps per step"));
  };
  if (!train && !micro) {
    check_accum(accum.value_or(1), given_accum);
    config->gradient_accumulation_steps(accum.value_or(1));
    return;
  }
  std::string undivided;  // why a derived value is off: a derived 0 read as if it were given (hostile pass 10)
  const auto derive = [&](int64_t divisor, const char* of) {
    if (divisor > 0 && *train % divisor != 0)
      undivided = str("; train_batch_size=", *train, " is no multiple of ", of, " = ", divisor);
    return divisor > 0 ? *train / divisor : 0;
  };
  int64_t divisor = 0;
  if (train && micro && !accum) {
    accum = __builtin_mul_overflow(*micro, world, &divisor)
                ? 0
                : derive(divisor, "train_micro_batch_size_per_gpu * world_size");
  } else if (train && accum && !micro) {
    micro = __builtin_mul_overflow(*accum, world, &divisor)
                ? 0
                : derive(divisor, "gradient_accumulation_steps * world_size");
  } else if (!train) {  // the micro batch, with or without accumulation: train_batch_size is derived
    accum = accum.value_or(1);
  } else if (!micro) {  // train_batch_size alone
    accum = 1;
    micro = derive(world, "world_size");
  }
  // Only given values can overflow (derived ones divide train_batch_size); the product is refused as
  // such, not shown as a train_batch_size of -1.
  int64_t product = 0;
  if (__builtin_mul_overflow(*micro, *accum, &product) || __builtin_mul_overflow(product, world, &product)) {
    ctx.fail(str("train_micro_batch_size_per_gpu=", *micro, " * gradient_accumulation_steps=", *accum,
                 " * world_size=", world, " overflows a 64-bit integer (more than ",
                 std::numeric_limits<int64_t>::max(), " samples per step); give smaller batch sizes"));
  }
  check_accum(*accum, given_accum);
  if (!train) train = product;
  if (product != *train || *micro < 1 || *accum < 1) {
    auto mark = [](bool given) { return given ? "" : " (derived)"; };
    ctx.fail(str("batch sizes do not fit: train_batch_size=", *train, mark(given_train),
                 " must equal train_micro_batch_size_per_gpu=", *micro, mark(given_micro),
                 " * gradient_accumulation_steps=", *accum, mark(given_accum), " * world_size=", world, " = ", product,
                 undivided, "; give two of the three and the third is derived"));
  }
  config->train_batch_size(*train).train_micro_batch_size_per_gpu(*micro);
  config->gradient_accumulation_steps(*accum);
}

ZeroOptimizationConfig read_zero(Section zero) {
  ZeroOptimizationConfig out;
  if (const Json* value = zero.take("stage")) {
    const std::optional<int64_t> stage = as_integer(*value);
    if (!stage || *stage < 0 || *stage > 3) zero.fail("stage", "is not one of 0, 1, 2, 3");
    out.stage(static_cast<int>(*stage));
  }
  out.overlap_comm(zero.boolean("overlap_comm", out.stage() == 3));  // DeepSpeed's stage-dependent default
  out.contiguous_gradients(zero.boolean("contiguous_gradients", out.contiguous_gradients()));
  out.reduce_bucket_size(zero.integer("reduce_bucket_size", 1).value_or(out.reduce_bucket_size()));
  out.allgather_bucket_size(zero.integer("allgather_bucket_size", 1).value_or(out.allgather_bucket_size()));
  out.stage3_prefetch_bucket_size(
      zero.integer("stage3_prefetch_bucket_size", 0).value_or(out.stage3_prefetch_bucket_size()));
  out.stage3_max_live_parameters(
      zero.integer("stage3_max_live_parameters", 0).value_or(out.stage3_max_live_parameters()));
  out.stage3_param_persistence_threshold(
      zero.integer("stage3_param_persistence_threshold", 0).value_or(out.stage3_param_persistence_threshold()));
  out.sub_group_size(zero.integer("sub_group_size", 1).value_or(out.sub_group_size()));
  if (zero.boolean("stage3_gather_16bit_weights_on_model_save", false))
    zero.fail("stage3_gather_16bit_weights_on_model_save",
              "is not supported: cohort saves sharded fp32 checkpoints (save_checkpoint) and writes one "
              "consolidated file from them with `cohort-ckpt consolidate`; set it false");
  out.offload_optimizer(read_offload_optimizer(zero.child("offload_optimizer"), out.stage()));
  out.offload_param(read_offload_param(zero.child("offload_param"), out.stage()));
  return out;
}

// Its other keys (contiguous_memory_optimization, number_checkpoints, ...) tune DeepSpeed's buffers;
// they are listed among the ignored keys.
bool read_activation_checkpointing(Section section) {
  if (section.boolean("partition_activations", false))
    section.fail("partition_activations",
                 "is not supported: it splits checkpoints across tensor-parallel ranks, "
                 "which cohort does not have; set it false");
  if (section.boolean("cpu_checkpointing", false))
    section.fail("cpu_checkpointing", "is not supported (checkpoints stay on the device); set it false");
  return true;
}

Fp16Config read_fp16(Section fp16) {
  Fp16Config out;
  using Sign = Section::Sign;
  out.enabled(fp16.boolean("enabled", out.enabled()));
  out.loss_scale(fp16.number("loss_scale", out.loss_scale(), Sign::kNonNegative));
  out.initial_scale_power(
      static_cast<int>(fp16.integer("initial_scale_power", 0, 127).value_or(out.initial_scale_power())));
  out.loss_scale_window(static_cast<int>(
      fp16.integer("loss_scale_window", 1, std::numeric_limits<int>::max()).value_or(out.loss_scale_window())));
  out.hysteresis(
      static_cast<int>(fp16.integer("hysteresis", 1, std::numeric_limits<int>::max()).value_or(out.hysteresis())));
  out.min_loss_scale(fp16.number("min_loss_scale", out.min_loss_scale(), Sign::kPositive));
  return out;
}

OptimizerConfig read_optimizer(Section optimizer, const Context& ctx) {
  OptimizerConfig out;
  using Sign = Section::Sign;
  const std::string type_path = optimizer.path("type");
  if (!optimizer.has("type")) ctx.fail(type_path + " is missing (SGD, Adam or AdamW)");
  const size_t type = optimizer.choice("type", 0, {"SGD", "Adam", "AdamW"}, /*ignore_case=*/true);
  out.type(type == 0 ? OptimizerType::kSgd : type == 1 ? OptimizerType::kAdam : OptimizerType::kAdamW);
  Section params = optimizer.child("params");
  if (out.type() == OptimizerType::kSgd && !params.has("lr")) {
    params.fail_missing("lr", "SGD has no default learning rate");
  }
  out.lr(params.number("lr", out.lr(), Sign::kNonNegative));
  // 3e38 reached Adam, which overflowed a float with c10's text, naming nothing (hostile pass 10, S4).
  if (out.lr() > 1e6) params.fail("lr", "is above 1e+06: no optimizer trains at such a rate (Adam's step overflows)");
  out.weight_decay(params.number("weight_decay", out.weight_decay(), Sign::kNonNegative));
  if (out.type() == OptimizerType::kSgd) {
    out.momentum(params.number("momentum", out.momentum(), Sign::kNonNegative));
    out.dampening(params.number("dampening", out.dampening(), Sign::kNonNegative));
    out.nesterov(params.boolean("nesterov", out.nesterov()));
    if (out.nesterov() && (out.momentum() <= 0 || out.dampening() != 0)) {
      params.fail("nesterov", "needs momentum > 0 and dampening 0");
    }
    return out;
  }
  if (const Json* betas = params.take("betas")) {
    auto in_range = [](const Json& b) { return b.is_number() && b.get<double>() >= 0.0 && b.get<double>() < 1.0; };
    const bool ok = betas->is_array() && betas->size() == 2 && in_range((*betas)[0]) && in_range((*betas)[1]);
    if (!ok) params.fail("betas", "is not a list of two numbers in [0, 1)");
    out.betas({(*betas)[0].get<double>(), (*betas)[1].get<double>()});
  }
  out.eps(params.number("eps", out.eps(), Sign::kNonNegative));
  out.amsgrad(params.boolean("amsgrad", out.amsgrad()));
  // DeepSpeed: AdamW is always decoupled; Adam is unless adam_w_mode is false.
  const bool adam_w_mode = params.boolean("adam_w_mode", true);
  out.decoupled_weight_decay(out.type() == OptimizerType::kAdamW || adam_w_mode);
  return out;
}

SchedulerConfig read_scheduler(Section scheduler, const Context& ctx) {
  SchedulerConfig out;
  using Sign = Section::Sign;
  if (!scheduler.has("type")) ctx.fail(scheduler.path("type") + " is missing (WarmupLR or WarmupDecayLR)");
  const size_t type = scheduler.choice("type", 0, {"WarmupLR", "WarmupDecayLR"});
  out.type(type == 0 ? SchedulerType::kWarmupLR : SchedulerType::kWarmupDecayLR);
  Section params = scheduler.child("params");
  out.warmup_min_lr(params.number("warmup_min_lr", out.warmup_min_lr(), Sign::kNonNegative));
  out.warmup_max_lr(params.number("warmup_max_lr", out.warmup_max_lr(), Sign::kNonNegative));
  // The rates the schedule steps with, bounded as the optimizer's (hostile pass 11, M-a: c10's overflow).
  const std::pair<const char*, double> rates[] = {{"warmup_min_lr", out.warmup_min_lr()},
                                                  {"warmup_max_lr", out.warmup_max_lr()}};
  for (const auto& [key, rate] : rates)
    if (rate > 1e6) params.fail(key, "is above 1e+06: no optimizer trains at such a rate (Adam's step overflows)");
  out.warmup_num_steps(params.integer("warmup_num_steps", 0).value_or(out.warmup_num_steps()));
  out.warmup_type(params.choice("warmup_type", 0, {"log", "linear"}) == 0 ? WarmupType::kLog : WarmupType::kLinear);
  if (out.type() == SchedulerType::kWarmupDecayLR) {
    if (!params.has("total_num_steps")) {
      params.fail_missing("total_num_steps", "WarmupDecayLR needs it");
    }
    out.total_num_steps(*params.integer("total_num_steps", 1));
    if (out.total_num_steps() < out.warmup_num_steps()) {
      COHORT_WARN(ctx.source, ": scheduler.params.total_num_steps=", out.total_num_steps(),
                  " is less than warmup_num_steps=", out.warmup_num_steps());
    }
  }
  return out;
}

ZeroConfig parse_with_source(const std::string& text, int world_size, const std::string& source) {
  Context ctx{source, {}};
  if (world_size < 1) ctx.fail(str("world_size=", world_size, " must be at least 1"));
  const Json root = read_config_json(text, ctx);
  if (!root.is_object()) ctx.fail(str("the top level must be a JSON object ({...}), not ", root.type_name()));
  Section top(&root, "", &ctx);
  ZeroConfig config;
  config.world_size(world_size);
  resolve_batch(top, ctx, &config);
  config.zero_optimization(read_zero(top.child("zero_optimization")));
  config.fp16(read_fp16(top.child("fp16")));
  // DeepSpeed reads "bf16", or its older spelling "bfloat16" when "bf16" is absent.
  Section bf16 = top.child(top.has("bf16") || !top.has("bfloat16") ? "bf16" : "bfloat16");
  config.bf16().enabled(bf16.boolean("enabled", false));
  if (config.fp16().enabled() && config.bf16().enabled()) {
    ctx.fail("fp16.enabled and bf16.enabled are both true; choose one");
  }
  if (top.has("communication_data_type")) {
    const size_t type = top.choice("communication_data_type", 0, {"fp32", "fp16", "bf16", "bfp16"},
                                   /*ignore_case=*/true);
    config.communication_data_type(type == 0   ? CommDataType::kFp32
                                   : type == 1 ? CommDataType::kFp16
                                               : CommDataType::kBf16);
  } else {
    top.take("communication_data_type");  // null: the default, and not an ignored key
  }
  config.gradient_clipping(top.number("gradient_clipping", 0.0, Section::Sign::kNonNegative));
  if (top.has("optimizer")) config.optimizer(read_optimizer(top.child("optimizer"), ctx));
  if (top.has("scheduler")) config.scheduler(read_scheduler(top.child("scheduler"), ctx));
  config.aio(read_aio(top.child("aio")));
  if (top.has("activation_checkpointing"))
    config.activation_checkpointing(read_activation_checkpointing(top.child("activation_checkpointing")));
  collect_unread(root, "", ctx, &config.unsupported_keys());
  if (!config.unsupported_keys().empty()) warn_unsupported(source, config.unsupported_keys());
  return config;
}

}  // namespace

ZeroConfig parse_ds_config(const std::string& json_text, int world_size) {
  return parse_with_source(json_text, world_size, "ds_config");
}

ZeroConfig load_ds_config(const std::string& path, int world_size) {
  const std::string source = "ds_config " + path;
  // A ds_config is a few KiB: a device (/dev/zero) or a fifo is refused without reading or blocking.
  constexpr int64_t kMaxDsConfigBytes = int64_t(16) << 20;
  return parse_with_source(detail::read_regular_file(path, source, kMaxDsConfigBytes), world_size, source);
}

double warmup_lr(const SchedulerConfig& scheduler, int64_t step) {
  COHORT_CHECK_KIND(kInvalidArgument, scheduler.type() != SchedulerType::kNone,
                    "warmup_lr: the scheduler type is none");
  if (step < 0) return 0.0;  // DeepSpeed: "get learning rate from scheduler before it has started"
  const double warmup = static_cast<double>(std::max<int64_t>(2, scheduler.warmup_num_steps()));
  const double t = static_cast<double>(step);
  double gamma = 1.0;
  if (t < warmup) {
    gamma = scheduler.warmup_type() == WarmupType::kLog ? std::log(t + 1.0) / std::log(warmup) : t / warmup;
  } else if (scheduler.type() == SchedulerType::kWarmupDecayLR) {
    const double total = static_cast<double>(scheduler.total_num_steps());
    gamma = std::max(0.0, (total - t) / std::max(1.0, total - warmup));
  }
  return scheduler.warmup_min_lr() + (scheduler.warmup_max_lr() - scheduler.warmup_min_lr()) * gamma;
}

}  // namespace cohort
