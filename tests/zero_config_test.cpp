// ds_config.json parsing tests: the seeds' example config (verbatim, trailing comma included), a full
// config, DeepSpeed's defaults, the batch-size triple at several world sizes, every error message by
// exact substring, deep nesting and overflowing batch products refused, the unsupported-keys warning,
// and WarmupLR/WarmupDecayLR against values worked by hand from DeepSpeed's formulas.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "cohort/error.h"
#include "cohort/zero_config.h"
#include "support/errors.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace zero_config_test {

namespace {

using cohort::load_ds_config;
using cohort::parse_ds_config;
using cohort::ZeroConfig;

// The warning tests need warnings shown whatever the caller's environment says (read once, lazily):
// a level that hides them becomes warn; info and debug (other tests of this executable ask for info)
// show them already.
const bool kWarnLevel = [] {
  const char* level = std::getenv("COHORT_LOG_LEVEL");
  if (level != nullptr && std::string(level) == "error") setenv("COHORT_LOG_LEVEL", "warn", 1);
  return true;
}();

using cohort::testing::error_of;

// The message of parse_ds_config(text, world_size), which must throw.
std::string parse_error(const std::string& text, int world_size = 1) {
  return error_of([&] { parse_ds_config(text, world_size); });
}

#define EXPECT_ERROR(text, fragment) EXPECT_PRED_FORMAT2(::testing::IsSubstring, fragment, parse_error(text))

TEST(ZeroConfig, SeedExampleVerbatimWithTrailingComma) {
  // /work/shared/seeds' ds_config.json, as written there: hjson-style trailing comma and all.
  const std::string text = R"({
  "zero_optimization": {
    "stage": 1
  },

  "fp16": {
    "enabled": false,
  }
}
)";
  const ZeroConfig config = parse_ds_config(text, 8);
  EXPECT_EQ(config.zero_optimization().stage(), 1);
  EXPECT_FALSE(config.fp16().enabled());
  EXPECT_FALSE(config.zero_optimization().overlap_comm());
  EXPECT_EQ(config.train_batch_size(), 0);  // no batch keys: the loop's batch is the micro batch
  EXPECT_EQ(config.gradient_accumulation_steps(), 1);
  EXPECT_TRUE(config.unsupported_keys().empty());
  const ZeroConfig strict = parse_ds_config(R"({"zero_optimization": {"stage": 1}, "fp16": {"enabled": false}})", 1);
  EXPECT_EQ(strict.zero_optimization().stage(), 1);
}

TEST(ZeroConfig, DeepSpeedDefaults) {
  const ZeroConfig config = parse_ds_config("{}", 1);
  const auto& zero = config.zero_optimization();
  EXPECT_EQ(zero.stage(), 0);
  EXPECT_FALSE(zero.overlap_comm());
  EXPECT_TRUE(zero.contiguous_gradients());
  EXPECT_EQ(zero.reduce_bucket_size(), 500000000);
  EXPECT_EQ(zero.allgather_bucket_size(), 500000000);
  EXPECT_EQ(zero.offload_optimizer().device(), cohort::OffloadDevice::kNone);
  EXPECT_FALSE(config.fp16().enabled());
  EXPECT_EQ(config.fp16().loss_scale(), 0.0);
  EXPECT_EQ(config.fp16().initial_scale_power(), 16);
  EXPECT_EQ(config.fp16().loss_scale_window(), 1000);
  EXPECT_EQ(config.fp16().hysteresis(), 2);
  EXPECT_EQ(config.fp16().min_loss_scale(), 1.0);
  EXPECT_FALSE(config.bf16().enabled());
  EXPECT_EQ(config.gradient_clipping(), 0.0);
  EXPECT_EQ(config.optimizer().type(), cohort::OptimizerType::kNone);
  EXPECT_EQ(config.scheduler().type(), cohort::SchedulerType::kNone);
  // DeepSpeed turns overlap_comm on by default for stage 3 only.
  EXPECT_TRUE(parse_ds_config(R"({"zero_optimization": {"stage": 3}})", 1).zero_optimization().overlap_comm());
  EXPECT_FALSE(parse_ds_config(R"({"zero_optimization": {"stage": 3, "overlap_comm": false}})", 1)
                   .zero_optimization()
                   .overlap_comm());
}

TEST(ZeroConfig, FullConfig) {
  const std::string text = R"({
    // comments are allowed, as in DeepSpeed's hjson reader
    "train_batch_size": 64,
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 4,
    "gradient_clipping": 1.0,
    "zero_optimization": {"stage": 2, "overlap_comm": true, "contiguous_gradients": false,
                          "reduce_bucket_size": 2e8, "allgather_bucket_size": 300000000,
                          "offload_optimizer": {"device": "cpu"}},
    "bf16": {"enabled": true},
    "fp16": {"enabled": false, "loss_scale": 128, "initial_scale_power": 12, "loss_scale_window": 500,
             "hysteresis": 4, "min_loss_scale": 0.5},
    "optimizer": {"type": "adam", "params": {"lr": 3e-4, "betas": [0.8, 0.95], "eps": 1e-6,
                                             "weight_decay": 0.01, "adam_w_mode": false, "amsgrad": true}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 1e-5, "warmup_max_lr": 3e-4,
                  "warmup_num_steps": 100, "warmup_type": "linear", "total_num_steps": 1000}}
  })";
  const ZeroConfig config = parse_ds_config(text, 4);
  EXPECT_EQ(config.world_size(), 4);
  EXPECT_EQ(config.train_batch_size(), 64);
  EXPECT_EQ(config.train_micro_batch_size_per_gpu(), 4);
  EXPECT_EQ(config.gradient_accumulation_steps(), 4);
  EXPECT_EQ(config.gradient_clipping(), 1.0);
  const auto& zero = config.zero_optimization();
  EXPECT_EQ(zero.stage(), 2);
  EXPECT_TRUE(zero.overlap_comm());
  EXPECT_FALSE(zero.contiguous_gradients());
  EXPECT_EQ(zero.reduce_bucket_size(), 200000000);
  EXPECT_EQ(zero.allgather_bucket_size(), 300000000);
  EXPECT_EQ(zero.offload_optimizer().device(), cohort::OffloadDevice::kCpu);
  EXPECT_TRUE(config.bf16().enabled());
  EXPECT_EQ(config.fp16().loss_scale(), 128.0);
  EXPECT_EQ(config.fp16().initial_scale_power(), 12);
  EXPECT_EQ(config.fp16().loss_scale_window(), 500);
  EXPECT_EQ(config.fp16().hysteresis(), 4);
  EXPECT_EQ(config.fp16().min_loss_scale(), 0.5);
  const auto& optimizer = config.optimizer();
  EXPECT_EQ(optimizer.type(), cohort::OptimizerType::kAdam);  // type matched without case
  EXPECT_DOUBLE_EQ(optimizer.lr(), 3e-4);
  EXPECT_EQ(optimizer.betas()[0], 0.8);
  EXPECT_EQ(optimizer.betas()[1], 0.95);
  EXPECT_EQ(optimizer.eps(), 1e-6);
  EXPECT_EQ(optimizer.weight_decay(), 0.01);
  EXPECT_TRUE(optimizer.amsgrad());
  EXPECT_FALSE(optimizer.decoupled_weight_decay());  // Adam with adam_w_mode false: L2 decay
  const auto& scheduler = config.scheduler();
  EXPECT_EQ(scheduler.type(), cohort::SchedulerType::kWarmupDecayLR);
  EXPECT_EQ(scheduler.warmup_min_lr(), 1e-5);
  EXPECT_EQ(scheduler.warmup_max_lr(), 3e-4);
  EXPECT_EQ(scheduler.warmup_num_steps(), 100);
  EXPECT_EQ(scheduler.warmup_type(), cohort::WarmupType::kLinear);
  EXPECT_EQ(scheduler.total_num_steps(), 1000);
  EXPECT_TRUE(config.unsupported_keys().empty());
}

TEST(ZeroConfig, OptimizerKinds) {
  // DeepSpeed's Adam decays weights decoupled unless adam_w_mode is false; AdamW always does.
  EXPECT_TRUE(parse_ds_config(R"({"optimizer": {"type": "Adam"}})", 1).optimizer().decoupled_weight_decay());
  EXPECT_TRUE(parse_ds_config(R"({"optimizer": {"type": "AdamW", "params": {"adam_w_mode": false}}})", 1)
                  .optimizer()
                  .decoupled_weight_decay());
  const auto sgd = parse_ds_config(
      R"({"optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9, "nesterov": true}}})", 1);
  EXPECT_EQ(sgd.optimizer().type(), cohort::OptimizerType::kSgd);
  EXPECT_EQ(sgd.optimizer().lr(), 0.1);
  EXPECT_EQ(sgd.optimizer().momentum(), 0.9);
  EXPECT_TRUE(sgd.optimizer().nesterov());
  // The older spelling "bfloat16" is read when "bf16" is absent.
  EXPECT_TRUE(parse_ds_config(R"({"bfloat16": {"enabled": true}})", 1).bf16().enabled());
  // null means the default.
  EXPECT_EQ(
      parse_ds_config(R"({"zero_optimization": {"stage": null}, "scheduler": null})", 1).zero_optimization().stage(),
      0);
}

struct Batch {
  int64_t train, micro, accum;
};
Batch batch_of(const std::string& text, int world_size) {
  const ZeroConfig config = parse_ds_config(text, world_size);
  return {config.train_batch_size(), config.train_micro_batch_size_per_gpu(), config.gradient_accumulation_steps()};
}
void expect_batch(const std::string& text, int world_size, Batch want) {
  const Batch got = batch_of(text, world_size);
  EXPECT_EQ(got.train, want.train) << text << " world " << world_size;
  EXPECT_EQ(got.micro, want.micro) << text << " world " << world_size;
  EXPECT_EQ(got.accum, want.accum) << text << " world " << world_size;
}

TEST(ZeroConfig, BatchTriple) {
  expect_batch(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4})", 2,
               {32, 4, 4});
  expect_batch(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4})", 2, {64, 4, 8});
  expect_batch(R"({"train_batch_size": 64, "gradient_accumulation_steps": 4})", 2, {64, 8, 4});
  expect_batch(R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2})", 3, {24, 4, 2});
  expect_batch(R"({"train_batch_size": 64})", 4, {64, 16, 1});  // DeepSpeed: accumulation 1
  expect_batch(R"({"train_micro_batch_size_per_gpu": 8})", 4, {32, 8, 1});
  expect_batch(R"({"gradient_accumulation_steps": 4})", 2, {0, 0, 4});  // micro batch from the loop
  expect_batch("{}", 5, {0, 0, 1});
  expect_batch(R"({"train_batch_size": 6e1, "train_micro_batch_size_per_gpu": 5})", 3, {60, 5, 4});
}

TEST(ZeroConfig, BatchTripleErrors) {
  EXPECT_PRED_FORMAT2(::testing::IsSubstring,
                      "ds_config: batch sizes do not fit: train_batch_size=64 must equal "
                      "train_micro_batch_size_per_gpu=4 * gradient_accumulation_steps=4 * world_size=2 = 32",
                      parse_error(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4,
                                      "gradient_accumulation_steps": 4})",
                                  2));
  EXPECT_PRED_FORMAT2(::testing::IsSubstring,
                      "train_batch_size=10 must equal train_micro_batch_size_per_gpu=3 * "
                      "gradient_accumulation_steps=3 (derived) * world_size=1 = 9; train_batch_size=10 is no multiple "
                      "of train_micro_batch_size_per_gpu * world_size = 3",
                      parse_error(R"({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 3})", 1));
  EXPECT_PRED_FORMAT2(::testing::IsSubstring,
                      "train_batch_size=10 must equal train_micro_batch_size_per_gpu=2 (derived) * "
                      "gradient_accumulation_steps=1 (derived) * world_size=4 = 8; train_batch_size=10 is no multiple "
                      "of world_size = 4",
                      parse_error(R"({"train_batch_size": 10})", 4));
  EXPECT_PRED_FORMAT2(::testing::IsSubstring,
                      "train_micro_batch_size_per_gpu=0 (derived) * gradient_accumulation_steps=2 * world_size=4 = 0; "
                      "train_batch_size=4 is no multiple of gradient_accumulation_steps * world_size = 8; give two",
                      parse_error(R"({"train_batch_size": 4, "gradient_accumulation_steps": 2})", 4));
  // Hostile pass 10, minor 3: a derived 0 was shown as if it were the config's.
  EXPECT_PRED_FORMAT2(::testing::IsSubstring,
                      "gradient_accumulation_steps=0 (derived) * world_size=2 = 0; train_batch_size=100 is no multiple "
                      "of train_micro_batch_size_per_gpu * world_size = 128; give two",
                      parse_error(R"({"train_batch_size": 100, "train_micro_batch_size_per_gpu": 64})", 2));
  EXPECT_ERROR(R"({"train_batch_size": 0})", "ds_config: train_batch_size=0 is not a positive integer");
  EXPECT_ERROR(R"({"gradient_accumulation_steps": 2.5})", "gradient_accumulation_steps=2.5 is not a positive integer");
  EXPECT_ERROR(R"({"train_micro_batch_size_per_gpu": "auto"})",
               "train_micro_batch_size_per_gpu=\"auto\" is a placeholder that Hugging Face's Trainer fills in");
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, "ds_config: world_size=0 must be at least 1", parse_error("{}", 0));
}

// ZeRO-Infinity's keys, as DeepSpeed's docs give them.
TEST(ZeroConfig, OffloadToNvmeAndAioKeys) {
  const ZeroConfig config = parse_ds_config(R"({
    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme",
                          "pin_memory": true, "buffer_count": 5, "fast_init": false, "ratio": 1}},
    "aio": {"block_size": 262144, "queue_depth": 32, "thread_count": 2, "single_submit": true,
            "overlap_events": false, "use_gds": false}
  })",
                                            2);
  const auto& offload = config.zero_optimization().offload_optimizer();
  EXPECT_EQ(offload.device(), cohort::OffloadDevice::kNvme);
  EXPECT_EQ(offload.nvme_path(), "/local_nvme");
  EXPECT_TRUE(offload.pin_memory());
  EXPECT_EQ(offload.buffer_count(), 5);
  EXPECT_EQ(config.aio().block_size(), 262144);
  EXPECT_EQ(config.aio().queue_depth(), 32);
  EXPECT_EQ(config.aio().thread_count(), 2);
  EXPECT_TRUE(config.aio().single_submit());
  EXPECT_FALSE(config.aio().overlap_events());
  EXPECT_TRUE(config.unsupported_keys().empty());
  const ZeroConfig plain = parse_ds_config("{}", 1);
  EXPECT_EQ(plain.aio().block_size(), 1048576);  // DeepSpeed's defaults
  EXPECT_EQ(plain.aio().queue_depth(), 8);
  EXPECT_EQ(plain.zero_optimization().offload_optimizer().buffer_count(), 4);
}

// Stage 3's parameter offload, as DeepSpeed's docs give it.
TEST(ZeroConfig, OffloadParamKeys) {
  const ZeroConfig config = parse_ds_config(R"({
    "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/local_nvme",
                          "pin_memory": true, "buffer_count": 6, "buffer_size": 2e7, "max_in_cpu": 0}}
  })",
                                            2);
  const auto& offload = config.zero_optimization().offload_param();
  EXPECT_EQ(offload.device(), cohort::OffloadDevice::kNvme);
  EXPECT_EQ(offload.nvme_path(), "/local_nvme");
  EXPECT_TRUE(offload.pin_memory());
  EXPECT_EQ(offload.buffer_count(), 6);
  EXPECT_EQ(offload.buffer_size(), 20000000);
  EXPECT_EQ(offload.max_in_cpu(), 0);
  EXPECT_TRUE(config.unsupported_keys().empty());
  const auto plain = parse_ds_config(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}})", 1)
                         .zero_optimization()
                         .offload_param();
  EXPECT_EQ(plain.device(), cohort::OffloadDevice::kCpu);
  EXPECT_EQ(plain.buffer_count(), 5);  // DeepSpeed's defaults
  EXPECT_EQ(plain.buffer_size(), 100000000);
  EXPECT_EQ(plain.max_in_cpu(), 1000000000);
  EXPECT_ERROR(R"({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})",
               "zero_optimization.offload_param.device=\"cpu\" needs zero_optimization.stage 3, where parameters "
               "are sharded (the stage is 2)");
  EXPECT_ERROR(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})",
               "zero_optimization.offload_param.nvme_path is missing: device \"nvme\" needs a directory");
  EXPECT_ERROR(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "buffer_size": 0}}})",
               "zero_optimization.offload_param.buffer_size=0 is not a positive integer");
  EXPECT_ERROR(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "max_in_cpu": -1}}})",
               "zero_optimization.offload_param.max_in_cpu=-1 is not a non-negative integer");
  EXPECT_ERROR(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "ssd"}}})",
               "zero_optimization.offload_param.device=\"ssd\" is not one of none, cpu, nvme");
}

TEST(ZeroConfig, ValueErrorsNameKeyPathAndValue) {
  EXPECT_ERROR(R"({"zero_optimization": {"stage": 4}})", "zero_optimization.stage=4 is not one of 0, 1, 2, 3");
  EXPECT_ERROR(R"({"zero_optimization": {"stage": "1"}})", "zero_optimization.stage=\"1\" is not one of 0, 1, 2, 3");
  EXPECT_ERROR(R"({"zero_optimization": true})", "zero_optimization=true is not an object");
  EXPECT_ERROR(R"({"zero_optimization": {"overlap_comm": 1}})",
               "zero_optimization.overlap_comm=1 is not a boolean (true or false)");
  EXPECT_ERROR(R"({"zero_optimization": {"reduce_bucket_size": -1}})",
               "zero_optimization.reduce_bucket_size=-1 is not a positive integer");
  EXPECT_ERROR(R"({"zero_optimization": {"allgather_bucket_size": 1.5}})",
               "zero_optimization.allgather_bucket_size=1.5 is not a positive integer");
  EXPECT_ERROR(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "disk"}}})",
               "zero_optimization.offload_optimizer.device=\"disk\" is not one of none, cpu, nvme");
  EXPECT_ERROR(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"}}})",
               "zero_optimization.offload_optimizer.nvme_path is missing: device \"nvme\" needs a directory");
  EXPECT_ERROR(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": 7}}})",
               "zero_optimization.offload_optimizer.nvme_path=7 is not a string");
  EXPECT_ERROR(
      R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp\u0000x"}}})",
      "zero_optimization.offload_optimizer.nvme_path=\"/tmp\\u0000x\" holds a NUL character (\\u0000)");
  EXPECT_ERROR(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "buffer_count": 0}}})",
               "zero_optimization.offload_optimizer.buffer_count=0 is not an integer in [1, 1024]");
  EXPECT_ERROR(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.3}}})",
               "zero_optimization.offload_optimizer.ratio=0.3 is not supported");
  EXPECT_ERROR(R"({"aio": {"block_size": 5000}})", "aio.block_size=5000 must be a multiple of 4096");
  EXPECT_ERROR(R"({"aio": {"queue_depth": 0}})", "aio.queue_depth=0 is not an integer in [1, 4096]");
  EXPECT_ERROR(R"({"aio": {"use_gds": true}})", "aio.use_gds=true is not supported");
  EXPECT_ERROR(R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}}})",
               "zero_optimization.offload_optimizer.device=\"cpu\" needs zero_optimization.stage 1, 2 or 3");
  EXPECT_ERROR(R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})",
               "ds_config: fp16.enabled and bf16.enabled are both true");
  EXPECT_ERROR(R"({"fp16": {"enabled": "yes"}})", "fp16.enabled=\"yes\" is not a boolean");
  EXPECT_ERROR(R"({"fp16": {"loss_scale": -1}})", "fp16.loss_scale=-1 must be >= 0");
  EXPECT_ERROR(R"({"zero_optimization": {"stage": 3, "sub_group_size": 0}})",
               "zero_optimization.sub_group_size=0 is not a positive integer");
  EXPECT_ERROR(R"({"fp16": {"initial_scale_power": 200}})",
               "fp16.initial_scale_power=200 is not an integer in [0, 127]");
  EXPECT_ERROR(R"({"fp16": {"loss_scale_window": 0}})", "fp16.loss_scale_window=0 is not a positive integer");
  EXPECT_ERROR(R"({"fp16": {"hysteresis": 0}})", "fp16.hysteresis=0 is not a positive integer");
  EXPECT_ERROR(R"({"fp16": {"min_loss_scale": 0}})", "fp16.min_loss_scale=0 must be > 0");
  EXPECT_ERROR(R"({"bf16": {"enabled": null, "x": 1}, "bf16": {}})", "duplicate key bf16");
  EXPECT_ERROR(R"({"gradient_clipping": -1})", "gradient_clipping=-1 must be >= 0");
  EXPECT_ERROR(R"({"gradient_clipping": "1.0"})", "gradient_clipping=\"1.0\" is not a number");
  EXPECT_ERROR(R"({"optimizer": {"type": "Lamb"}})", "optimizer.type=\"Lamb\" is not one of SGD, Adam, AdamW");
  EXPECT_ERROR(R"({"optimizer": {"params": {"lr": 0.1}}})", "optimizer.type is missing (SGD, Adam or AdamW)");
  EXPECT_ERROR(R"({"optimizer": {"type": "SGD"}})", "optimizer.params.lr is missing: SGD has no default learning rate");
  EXPECT_ERROR(R"({"optimizer": {"type": "Adam", "params": {"lr": -0.1}}})", "optimizer.params.lr=-0.1 must be >= 0");
  // Hostile pass 10, S4: 3e38 reached Adam, whose step overflowed a float with c10's text, naming nothing.
  EXPECT_ERROR(R"({"optimizer": {"type": "Adam", "params": {"lr": 3e38}}})",
               "optimizer.params.lr=3e+38 is above 1e+06: no optimizer trains at such a rate");
  // Hostile pass 11, M-a: the scheduler's rates reached the optimizer unbounded.
  EXPECT_ERROR(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 1e300}}})",
               "scheduler.params.warmup_max_lr=1e+300 is above 1e+06: no optimizer trains at such a rate");
  EXPECT_ERROR(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 2e6, "warmup_max_lr": 0.1}}})",
               "scheduler.params.warmup_min_lr=2000000.0 is above 1e+06: no optimizer trains at such a rate");
  EXPECT_ERROR(R"({"optimizer": {"type": "Adam", "params": {"betas": [0.9]}}})",
               "optimizer.params.betas=[0.9] is not a list of two numbers in [0, 1)");
  EXPECT_ERROR(R"({"optimizer": {"type": "Adam", "params": {"betas": [0.9, 1.0]}}})",
               "optimizer.params.betas=[0.9,1.0] is not a list of two numbers in [0, 1)");
  EXPECT_ERROR(R"({"optimizer": {"type": "SGD", "params": {"lr": 0.1, "nesterov": true}}})",
               "optimizer.params.nesterov=true needs momentum > 0 and dampening 0");
  EXPECT_ERROR(R"({"scheduler": {"type": "OneCycle"}})",
               "scheduler.type=\"OneCycle\" is not one of WarmupLR, WarmupDecayLR");
  EXPECT_ERROR(R"({"scheduler": {"params": {}}})", "scheduler.type is missing (WarmupLR or WarmupDecayLR)");
  EXPECT_ERROR(R"({"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 10}}})",
               "scheduler.params.total_num_steps is missing: WarmupDecayLR needs it");
  EXPECT_ERROR(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_type": "cosine"}}})",
               "scheduler.params.warmup_type=\"cosine\" is not one of log, linear");
  EXPECT_ERROR(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": -5}}})",
               "scheduler.params.warmup_num_steps=-5 is not a non-negative integer");
}

TEST(ZeroConfig, CommunicationDataTypeAsDeepSpeedReadsIt) {
  using cohort::CommDataType;
  EXPECT_EQ(parse_ds_config("{}", 1).communication_data_type(), CommDataType::kDefault);
  EXPECT_EQ(parse_ds_config(R"({"communication_data_type": null})", 1).communication_data_type(),
            CommDataType::kDefault);
  EXPECT_EQ(parse_ds_config(R"({"communication_data_type": "fp16"})", 1).communication_data_type(),
            CommDataType::kFp16);
  EXPECT_EQ(parse_ds_config(R"({"communication_data_type": "BF16"})", 1).communication_data_type(),
            CommDataType::kBf16);
  EXPECT_EQ(parse_ds_config(R"({"communication_data_type": "bfp16"})", 1).communication_data_type(),
            CommDataType::kBf16);
  EXPECT_EQ(parse_ds_config(R"({"communication_data_type": "fp32"})", 1).communication_data_type(),
            CommDataType::kFp32);
  EXPECT_TRUE(parse_ds_config(R"({"communication_data_type": "fp16"})", 1).unsupported_keys().empty());
  EXPECT_ERROR(R"({"communication_data_type": "int8"})",
               "communication_data_type=\"int8\" is not one of fp32, fp16, bf16, bfp16");
}

TEST(ZeroConfig, JsonErrors) {
  EXPECT_ERROR("[1, 2]", "ds_config: the top level must be a JSON object ({...}), not array");
  EXPECT_ERROR("{\n  \"fp16\": {\"enabled\": false}\n  \"bf16\": {}\n}",
               "ds_config: not valid JSON: parse error at line 3, column 8: syntax error while parsing object");
  EXPECT_ERROR(R"({"zero_optimization": {"stage": 1, "stage": 2}})",
               "ds_config: duplicate key zero_optimization.stage (DeepSpeed refuses them too)");
  // Found by fuzz/ds_config_fuzz: a number past double's range escaped as nlohmann's out_of_range.
  EXPECT_ERROR(R"({"reduce_bucket_size": 6e2222})", "ds_config: not valid JSON: number overflow parsing '6e2222'");
}

// Issue 39: the probe's 120 KB file, zero_optimization.x nesting 20,000 objects, took minutes before
// init (every key rebuilt the dotted path of every enclosing object); nesting past 64 levels (objects
// and arrays) is now refused while parsing, in one line, and a repeated key is still named by its path.
TEST(ZeroConfig, DeepNestingIsRefusedInOneLine) {
  auto nested = [](int depth) {  // the top object, zero_optimization, then `depth` objects in x
    std::string text = R"({"train_micro_batch_size_per_gpu": 64, "zero_optimization": {"stage": 2, "x": )";
    for (int i = 0; i < depth; ++i) text += R"({"a": )";
    return text + "1" + std::string(depth, '}') + "}}";
  };
  const std::string too_deep =
      "ds_config: objects and arrays nested more than 64 levels deep: no DeepSpeed config nests so deep";
  EXPECT_EQ(parse_error(nested(20000)), too_deep);
  EXPECT_EQ(cohort::testing::kind_of([&] { parse_ds_config(nested(20000), 1); }), "kind=invalid argument ranks=");
  EXPECT_EQ(parse_error(nested(63)), too_deep);
  const ZeroConfig at_the_limit = parse_ds_config(nested(62), 1);  // 64 levels
  EXPECT_EQ(at_the_limit.unsupported_keys(), std::vector<std::string>{"zero_optimization.x"});
  EXPECT_EQ(parse_error("{\"x\": " + std::string(100000, '[') + std::string(100000, ']') + "}"), too_deep);
  EXPECT_EQ(parse_error(R"({"a": [{"b": {"c": 1, "c": 2}}]})"),
            "ds_config: duplicate key a.b.c (DeepSpeed refuses them too)");
}

// Hostile pass 4, D1: every JSON read (ds_config, manifests, traces, the timeline's gather) went
// through nlohmann's callback parser, which walks the whole enclosing array each time an object ends:
// 100,000 objects in an array took 19 s, a million would take hours (this test's ctest timeout). One
// checking pass and the plain parser read them in about a second; objects side by side in an array may
// repeat each other's keys.
TEST(ZeroConfig, AnArrayOfAMillionObjectsIsReadInOnePass) {
  std::string objects;
  objects.reserve(14 * 1000000);
  for (int i = 0; i < 1000000; ++i) objects += i == 0 ? R"({"b": 1})" : R"(,{"b": 1})";
  const ZeroConfig config = parse_ds_config(R"({"train_micro_batch_size_per_gpu": 4, "x": [)" + objects + "]}", 1);
  EXPECT_EQ(config.unsupported_keys(), std::vector<std::string>{"x"});
  EXPECT_EQ(parse_error(R"({"x": [{"b": 1}, {"b": 2, "b": 3}]})"),
            "ds_config: duplicate key x.b (DeepSpeed refuses them too)");
}

// Hostile pass 4, D3: accumulation counts past an int wrapped ("must be >= 1, got -727379968", and 2^32 + 1
// passed as 1) and lost the file's name.
TEST(ZeroConfig, AnAccumulationCountPastAnIntIsRefusedNamingIt) {
  EXPECT_EQ(parse_error(R"({"train_micro_batch_size_per_gpu": 32, "gradient_accumulation_steps": 1000000000000})"),
            "ds_config: gradient_accumulation_steps=1000000000000 is out of range: at most 2147483647 micro-steps "
            "per step");
  EXPECT_EQ(parse_error(R"({"gradient_accumulation_steps": 4294967297})"),
            "ds_config: gradient_accumulation_steps=4294967297 is out of range: at most 2147483647 micro-steps per "
            "step");
  EXPECT_EQ(parse_error(R"({"train_batch_size": 4611686018427387904, "train_micro_batch_size_per_gpu": 32})"),
            "ds_config: gradient_accumulation_steps=144115188075855872 (derived) is out of range: at most "
            "2147483647 micro-steps per step");
  EXPECT_EQ(parse_ds_config(R"({"gradient_accumulation_steps": 2147483647})", 1).gradient_accumulation_steps(),
            2147483647);
}

// Issue 39: a batch product past int64 was shown as "train_batch_size=-1 (derived)".
TEST(ZeroConfig, AnOverflowingBatchProductIsRefusedNamingItsFactors) {
  EXPECT_EQ(parse_error(R"({"train_micro_batch_size_per_gpu": 4611686018427387904, "gradient_accumulation_steps": 2})"),
            "ds_config: train_micro_batch_size_per_gpu=4611686018427387904 * gradient_accumulation_steps=2 * "
            "world_size=1 overflows a 64-bit integer (more than 9223372036854775807 samples per step); give "
            "smaller batch sizes");
  EXPECT_EQ(parse_error(R"({"train_micro_batch_size_per_gpu": 9223372036854775807})", 2),
            "ds_config: train_micro_batch_size_per_gpu=9223372036854775807 * gradient_accumulation_steps=1 * "
            "world_size=2 overflows a 64-bit integer (more than 9223372036854775807 samples per step); give "
            "smaller batch sizes");
  EXPECT_EQ(parse_error(R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4294967296,
                            "gradient_accumulation_steps": 4294967296})"),
            "ds_config: train_micro_batch_size_per_gpu=4294967296 * gradient_accumulation_steps=4294967296 * "
            "world_size=1 overflows a 64-bit integer (more than 9223372036854775807 samples per step); give "
            "smaller batch sizes");
}

std::string temp_dir() {
  char pattern[] = "/tmp/zero_config_test.XXXXXX";
  const char* dir = mkdtemp(pattern);
  EXPECT_NE(dir, nullptr);
  return dir == nullptr ? "/tmp" : dir;
}

TEST(ZeroConfig, LoadFile) {
  const std::string dir = temp_dir();
  const std::string good = dir + "/ds_config.json";
  std::FILE* file = std::fopen(good.c_str(), "w");
  ASSERT_NE(file, nullptr);
  std::fputs("{\"train_micro_batch_size_per_gpu\": 16, \"zero_optimization\": {\"stage\": 2}}\n", file);
  std::fclose(file);
  const ZeroConfig config = load_ds_config(good, 2);
  EXPECT_EQ(config.zero_optimization().stage(), 2);
  EXPECT_EQ(config.train_batch_size(), 32);

  const std::string bad = dir + "/bad.json";
  file = std::fopen(bad.c_str(), "w");
  ASSERT_NE(file, nullptr);
  std::fputs("{\n  \"zero_optimization\": {\"stage\": 2\n}\n", file);
  std::fclose(file);
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, "ds_config " + bad + ": not valid JSON: parse error at line 4",
                      error_of([&] { load_ds_config(bad, 1); }));
  const std::string invalid = dir + "/stage9.json";
  file = std::fopen(invalid.c_str(), "w");
  std::fputs("{\"zero_optimization\": {\"stage\": 9}}", file);
  std::fclose(file);
  EXPECT_PRED_FORMAT2(::testing::IsSubstring,
                      "ds_config " + invalid + ": zero_optimization.stage=9 is not one of 0, 1, 2, 3",
                      error_of([&] { load_ds_config(invalid, 1); }));
  EXPECT_PRED_FORMAT2(::testing::IsSubstring,
                      "ds_config " + dir + "/missing.json: cannot open: No such file or directory",
                      error_of([&] { load_ds_config(dir + "/missing.json", 1); }));
  EXPECT_EQ(error_of([&] { load_ds_config(dir, 1); }), "ds_config " + dir + ": it is a directory, not a regular file");
  std::remove(good.c_str());
  std::remove(bad.c_str());
  std::remove(invalid.c_str());
  rmdir(dir.c_str());
}

// Probe D11: /dev/zero was read without bound (5.7 GiB in 12 s) and a fifo blocked the open forever.
TEST(ZeroConfig, LoadFileRefusesDevicesFifosAndHugeFilesWithoutReading) {
  EXPECT_EQ(error_of([] { load_ds_config("/dev/zero", 1); }),
            "ds_config /dev/zero: it is a character device, not a regular file");
  const std::string dir = temp_dir();
  const std::string fifo = dir + "/fifo.json", huge = dir + "/huge.json";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] { load_ds_config(fifo, 1); }), "ds_config " + fifo + ": it is a fifo, not a regular file");
  std::fclose(std::fopen(huge.c_str(), "w"));
  ASSERT_EQ(truncate(huge.c_str(), int64_t(17) << 20), 0);  // sparse: nothing written
  EXPECT_EQ(error_of([&] { load_ds_config(huge, 1); }),
            "ds_config " + huge + ": it has 17825792 bytes, more than the 16777216 accepted");
  std::remove(fifo.c_str());
  std::remove(huge.c_str());
  rmdir(dir.c_str());
}

TEST(ZeroConfig, UnsupportedKeysAreListedInFileOrderAndWarnedOnce) {
  ASSERT_TRUE(kWarnLevel);
  const std::string text = R"({
    "train_batch_size": 8,
    "steps_per_print": 10,
    "zero_optimization": {"stage": 3, "stage3_max_reuse_distance": 1e9, "stage3_max_live_parameters": 2e8,
                          "sub_group_size": 1e8,
                          "offload_optimizer": {"device": "cpu", "pin_memory": true, "fast_init": false}},
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": true, "momentum": 0.9}},
    "flops_profiler": {"enabled": true, "profile_step": 1},
    "scheduler": null,
    "wall_clock_breakdown": false
  })";
  testing::internal::CaptureStderr();
  const ZeroConfig config = parse_ds_config(text, 1);
  const std::string log = testing::internal::GetCapturedStderr();
  const std::vector<std::string> want = {"steps_per_print",
                                         "zero_optimization.stage3_max_reuse_distance",
                                         "optimizer.params.torch_adam",
                                         "optimizer.params.momentum",  // an SGD key under AdamW
                                         "flops_profiler",
                                         "wall_clock_breakdown"};
  EXPECT_EQ(config.unsupported_keys(), want);
  EXPECT_EQ(config.zero_optimization().stage3_max_live_parameters(), 200000000);  // read, so not listed
  EXPECT_EQ(config.zero_optimization().sub_group_size(), 100000000);
  EXPECT_PRED_FORMAT2(
      ::testing::IsSubstring,
      "warning: ds_config: ignoring keys cohort does not support: steps_per_print, "
      "zero_optimization.stage3_max_reuse_distance, optimizer.params.torch_adam, optimizer.params.momentum, flops_profiler, wall_clock_breakdown\n",
      log);
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;

  testing::internal::CaptureStderr();
  parse_ds_config(R"({"zero_optimization": {"stage": 1}})", 1);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

// Hostile pass 4, D8: 50,000 unknown keys took 5 s to read (an ordered object finds each key by a
// linear search) and made a warning of 50,000 keys; one launched rank warns for all (under --devices 2
// each rank said it); text after a NUL byte was read as if never written.
TEST(ZeroConfig, UnknownKeysAreBoundedWarnedByTheFirstRankAndANulIsRefused) {
  ASSERT_TRUE(kWarnLevel);
  const auto with_unknown_keys = [](int count) {
    std::string text = R"({"train_batch_size": 8)";
    for (int i = 0; i < count; ++i) text += ", \"unknown_" + std::to_string(i) + "\": 1";
    return text + "}";
  };
  testing::internal::CaptureStderr();
  EXPECT_EQ(parse_ds_config(with_unknown_keys(200), 1).unsupported_keys().size(), 200u);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_THAT(log, ::testing::MatchesRegex("\\[cohort\\] warning: ds_config: ignoring keys cohort does not support: "
                                           "unknown_0, unknown_1, .*, unknown_[0-9]+ and 18[0-9] more\n"));
  EXPECT_LT(log.size(), 400u) << log;
  EXPECT_EQ(parse_error(with_unknown_keys(50000)),
            "ds_config: an object with more than 256 keys: no DeepSpeed config has so many");
  ::setenv("RANK", "1", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  testing::internal::CaptureStderr();
  parse_ds_config(R"({"train_batch_size": 8, "steps_per_print": 7})", 1);
  const std::string second_rank = testing::internal::GetCapturedStderr();
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  EXPECT_EQ(second_rank, "");
  EXPECT_EQ(parse_error(std::string(R"({"train_micro_batch_size_per_gpu": 32})") + '\0' + "garbage"),
            "ds_config: not valid JSON: a NUL byte at offset 38");
}

cohort::SchedulerConfig warmup(double min_lr, double max_lr, int64_t steps, cohort::WarmupType type) {
  return cohort::SchedulerConfig()
      .type(cohort::SchedulerType::kWarmupLR)
      .warmup_min_lr(min_lr)
      .warmup_max_lr(max_lr)
      .warmup_num_steps(steps)
      .warmup_type(type);
}

TEST(ZeroConfig, WarmupLRByHand) {
  // Log warmup over W = 1000: gamma = ln(step + 1) / ln(1000); ln 10 / ln 1000 = 1/3 exactly in reals.
  const auto log = warmup(0.0, 0.001, 1000, cohort::WarmupType::kLog);
  EXPECT_DOUBLE_EQ(cohort::warmup_lr(log, 0), 0.0);
  EXPECT_NEAR(cohort::warmup_lr(log, 9), 0.001 / 3, 1e-15);
  EXPECT_NEAR(cohort::warmup_lr(log, 99), 0.002 / 3, 1e-15);
  EXPECT_NEAR(cohort::warmup_lr(log, 999), 0.001, 1e-15);  // ln 1000 / ln 1000
  EXPECT_DOUBLE_EQ(cohort::warmup_lr(log, 1000), 0.001);   // after warmup: max
  EXPECT_DOUBLE_EQ(cohort::warmup_lr(log, 123456), 0.001);
  EXPECT_DOUBLE_EQ(cohort::warmup_lr(log, -1), 0.0);  // before the first step, as DeepSpeed
  // Linear warmup 0.1 -> 1.1 over 10 steps: 0.1 + 1.0 * step / 10.
  const auto linear = warmup(0.1, 1.1, 10, cohort::WarmupType::kLinear);
  EXPECT_DOUBLE_EQ(cohort::warmup_lr(linear, 0), 0.1);
  EXPECT_DOUBLE_EQ(cohort::warmup_lr(linear, 5), 0.6);
  EXPECT_DOUBLE_EQ(cohort::warmup_lr(linear, 9), 1.0);
  EXPECT_DOUBLE_EQ(cohort::warmup_lr(linear, 10), 1.1);
  // warmup_num_steps below 2 counts as 2 (DeepSpeed: max(2, warmup_num_steps)).
  EXPECT_DOUBLE_EQ(cohort::warmup_lr(warmup(0.0, 1.0, 0, cohort::WarmupType::kLinear), 1), 0.5);
  EXPECT_NEAR(cohort::warmup_lr(warmup(0.0, 1.0, 1, cohort::WarmupType::kLog), 1), 1.0, 1e-15);  // ln2/ln2
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, "warmup_lr: the scheduler type is none",
                      error_of([] { cohort::warmup_lr(cohort::SchedulerConfig(), 3); }));
}

TEST(ZeroConfig, WarmupDecayLRByHand) {
  // Linear warmup to 1.0 over 10 steps, then (110 - step) / (110 - 10) down to 0 at step 110.
  auto decay = warmup(0.0, 1.0, 10, cohort::WarmupType::kLinear)
                   .type(cohort::SchedulerType::kWarmupDecayLR)
                   .total_num_steps(110);
  EXPECT_DOUBLE_EQ(cohort::warmup_lr(decay, 5), 0.5);
  EXPECT_DOUBLE_EQ(cohort::warmup_lr(decay, 10), 1.0);
  EXPECT_DOUBLE_EQ(cohort::warmup_lr(decay, 60), 0.5);
  EXPECT_DOUBLE_EQ(cohort::warmup_lr(decay, 85), 0.25);
  EXPECT_DOUBLE_EQ(cohort::warmup_lr(decay, 110), 0.0);
  EXPECT_DOUBLE_EQ(cohort::warmup_lr(decay, 500), 0.0);  // clamped at 0
  // A floor: lr = min + (max - min) * gamma, so it decays to warmup_min_lr.
  decay.warmup_min_lr(0.2);
  EXPECT_DOUBLE_EQ(cohort::warmup_lr(decay, 60), 0.2 + 0.8 * 0.5);
  EXPECT_DOUBLE_EQ(cohort::warmup_lr(decay, 200), 0.2);
  // total_num_steps <= warmup: the denominator is max(1, total - W).
  decay.warmup_min_lr(0.0).total_num_steps(10);
  EXPECT_DOUBLE_EQ(cohort::warmup_lr(decay, 10), 0.0);
  decay.total_num_steps(11);
  EXPECT_DOUBLE_EQ(cohort::warmup_lr(decay, 10), 1.0);
  EXPECT_DOUBLE_EQ(cohort::warmup_lr(decay, 11), 0.0);
}

}  // namespace

}  // namespace zero_config_test
