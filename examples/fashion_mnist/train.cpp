// The Fashion-MNIST job on cohort::Trainer (see train.h). The Trainer owns the loop, the strategy
// (DDP, or the ZeRO engine for --zero-stage / --deepspeed-config), the data sharding, checkpoints and
// the progress bar; this file picks the options from the flags, refuses what cannot work before any
// data is loaded, and prints the job's header, epoch lines and params-sha256.
#include "train.h"

#include <cohort/error.h>
#include <cohort/progress.h>
#include <cohort/trainer.h>
#include <cohort/zero_config.h>
#include <torch/cuda.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <sstream>

#include "../common/check.h"
#include "../common/cli_paths.h"
#include "../common/memory.h"
#include "../common/threads.h"
#include "digest.h"
#include "module.h"
#include "report.h"
#include "resources.h"

namespace fashion_mnist {
namespace {

using Clock = std::chrono::steady_clock;

// --zero-stage replaces --strategy (ddp or single: main.cpp refuses another with it); --deepspeed-config
// alone means the ZeRO engine as it says.
std::string strategy_of(const TrainConfig& config) {
  examples::require(config.zero_stage != 0, "--zero-stage 0 is plain data parallelism: leave it out (DDP)");
  if (config.zero_stage > 0) return "zero" + std::to_string(config.zero_stage);
  if (!config.deepspeed_config.empty()) return "deepspeed";
  return config.strategy;
}

cohort::TrainerOptions trainer_options(const TrainConfig& config) {
  return cohort::TrainerOptions()
      .devices(config.devices)
      .strategy(strategy_of(config))
      .deepspeed_config(config.deepspeed_config)
      .precision(config.precision)
      .ddp_comm_hook(config.ddp_comm_hook)
      .powersgd_rank(config.powersgd_rank)
      .powersgd_start_iteration(config.powersgd_start_iter)
      .max_epochs(config.epochs)
      .max_steps(config.max_steps > 0 ? config.max_steps : -1)
      .seed(config.seed)
      .enable_progress_bar(false)  // the callback below, with --progress's style
      .enable_checkpointing(false)  // a ModelCheckpoint on --checkpoint-dir only
      .logger(false);
}

// A split with no images gives a loss of 0/0 and an accuracy of 0/0: refuse it by name.
cohort::data::FashionMnist non_empty(cohort::data::FashionMnist data, const std::string& dir, const char* split) {
  examples::require(data.images.size(0) > 0, "the ", split, " set in ", dir, " holds 0 images: there is nothing to ",
               std::string(split) == "training" ? "train on" : "evaluate");
  return data;
}

// The ZeRO engine's config as the Trainer will build it, for the header and the early refusals.
std::optional<cohort::ZeroConfig> zero_config(const TrainConfig& config, const cohort::World& world) {
  if (config.zero_stage < 0 && config.deepspeed_config.empty()) return std::nullopt;
  cohort::ZeroConfig zero = config.deepspeed_config.empty() ? cohort::ZeroConfig().world_size(world.size())
                                                            : cohort::load_ds_config(config.deepspeed_config, world.size());
  if (config.zero_stage >= 0) zero.zero_optimization().stage(config.zero_stage);
  if (config.precision == "bf16-mixed" || config.precision == "bf16") zero.bf16().enabled(true);
  // LibTorch's CPU convolutions have no Half kernel: say so now, not after the data is loaded.
  examples::require(!zero.fp16().enabled() || world.device().is_cuda(), "--deepspeed-config ", config.deepspeed_config,
               " enables fp16, but this rank runs on the CPU, where LibTorch has no fp16 convolution: use \"bf16\": "
               "{\"enabled\": true} on CPU, or run on a GPU");
  if (zero.optimizer().type() == cohort::OptimizerType::kNone)
    zero.optimizer(cohort::OptimizerConfig().type(cohort::OptimizerType::kAdam).lr(config.lr));
  return zero;
}

std::string describe(const TrainConfig& config, const std::optional<cohort::ZeroConfig>& zero, int64_t replicas) {
  std::ostringstream out;
  if (config.strategy == "dp" && !zero) {
    out << "dp (" << replicas << " replica(s) on threads of this process), Adam lr " << config.lr;
    return out.str();
  }
  if (config.strategy == "pipeline" && !zero) {
    out << "pipeline (one stage per rank, 1F1B over 4 microbatches), Adam lr " << config.lr;
    return out.str();
  }
  if (!zero && config.strategy.rfind("zero", 0) == 0) {  // the Trainer's engine over the module's Adam
    const bool bf16 = config.precision == "bf16-mixed" || config.precision == "bf16";
    const bool fp16 = config.precision == "16-mixed" || config.precision == "16";
    out << "ZeRO stage " << config.strategy.back() << " (" << (bf16 ? "BFloat16" : fp16 ? "Half" : "Float")
        << "), Adam lr " << config.lr;
    return out.str();
  }
  if (!zero) {
    out << (config.strategy == "single" ? "single process" : "DDP") << ", Adam lr " << config.lr;
    if (!config.ddp_comm_hook.empty()) out << ", " << config.ddp_comm_hook << " comm hook";
    if (config.ddp_comm_hook.find("powersgd") != std::string::npos)
      out << " (rank " << config.powersgd_rank << ", from step " << config.powersgd_start_iter << ")";
    return out.str();
  }
  const char* dtype = zero->bf16().enabled() ? "BFloat16" : zero->fp16().enabled() ? "Half" : "Float";
  out << "ZeRO stage " << zero->zero_optimization().stage() << " (" << dtype << ")";
  if (zero->gradient_accumulation_steps() > 1)
    out << ", " << zero->gradient_accumulation_steps() << " micro-batches per step";
  out << ", " << (zero->optimizer().type() == cohort::OptimizerType::kSgd ? "SGD" : "Adam") << " lr "
      << zero->optimizer().lr();
  return out.str();
}

LrRule lr_rule(const TrainConfig& config, const std::optional<cohort::ZeroConfig>& zero) {
  if (!zero) return {config.lr, "--lr", true};
  if (zero->scheduler().type() != cohort::SchedulerType::kNone) return {std::nullopt, "", false};
  // The engine keeps its configured lr through a load (a checkpoint restores moments, not the lr).
  return {zero->optimizer().lr(), config.deepspeed_config.empty() ? "--lr" : "--deepspeed-config", false};
}

class Job {
 public:
  explicit Job(const TrainConfig& config);
  void run();

 private:
  void print_header() const;
  void check_memory(const BatchRequest& request);
  void finish(FashionMnistModule& module, JobReport& report, cohort::DataLoader& test);

  TrainConfig config_;
  cohort::Trainer trainer_;  // joins (or starts) the world before anything else runs
  ThreadChoice threads_;
  std::optional<cohort::ZeroConfig> zero_;
  int64_t replicas_;  // under --strategy dp: the loader's batch is batch_size x replicas, split over them
  cohort::data::FashionMnist train_, test_;
  Clock::time_point start_ = Clock::now();
};

// --strategy dp: --devices replicas (auto: every GPU, or 1 on the CPU); otherwise 1.
int64_t replicas_of(const TrainConfig& config, const cohort::World& world) {
  if (config.strategy != "dp" || config.zero_stage >= 0 || !config.deepspeed_config.empty()) return 1;
  if (config.devices != "auto") return std::stoll(config.devices);  // checked by the Trainer already
  return world.device().is_cuda() ? static_cast<int64_t>(torch::cuda::device_count()) : 1;
}

ThreadChoice set_threads(const TrainConfig& config, const cohort::World& world) {
  const ThreadChoice choice = choose_threads(config.threads, config.oversubscribe, world.local_size());
  examples::set_threads(choice.threads);
  return choice;
}

Job::Job(const TrainConfig& config)
    : config_(config),
      trainer_(trainer_options(config)),
      threads_(set_threads(config, trainer_.world())),
      zero_(zero_config(config, trainer_.world())),
      replicas_(replicas_of(config, trainer_.world())),
      train_(non_empty(cohort::data::load_fashion_mnist(config.data_dir, cohort::data::Split::kTrain), config.data_dir,
                       "training")),
      test_(non_empty(cohort::data::load_fashion_mnist(config.data_dir, cohort::data::Split::kTest), config.data_dir,
                      "test")) {
  // A ds_config's train_micro_batch_size_per_gpu, when it has one, is the batch per rank.
  if (zero_ && zero_->train_micro_batch_size_per_gpu() > 0) config_.batch_size = zero_->train_micro_batch_size_per_gpu();
}

void Job::print_header() const {
  const cohort::World& world = trainer_.world();
  // Under --strategy pipeline every rank reads the same batches (the data is one share).
  const int64_t shares = config_.strategy == "pipeline" && !zero_ ? 1 : world.size();
  const int64_t per_rank = (train_.images.size(0) + shares - 1) / shares;
  const int64_t batch = config_.batch_size * replicas_;
  std::printf(
      "fashion_mnist: %d rank(s) (launcher: %s) on %s, %d thread(s) per rank, batch %lld per %s (%lld global), %s, "
      "seed %lld\n",
      world.size(), world.launcher().c_str(), world.device().str().c_str(), threads_.threads,
      static_cast<long long>(config_.batch_size), config_.strategy == "dp" ? "replica" : "rank",
      static_cast<long long>(batch * shares), describe(config_, zero_, replicas_).c_str(),
      static_cast<long long>(config_.seed));
  // Optimizer steps: a ds_config's accumulation makes a step of several batches (hostile pass 10, minor 1).
  const int64_t batches = (per_rank + batch - 1) / batch;
  const int64_t accumulate = zero_ ? std::max<int64_t>(1, zero_->gradient_accumulation_steps()) : 1;
  std::printf("data: %lld train / %lld test images from %s; %lld steps per epoch\n",
              static_cast<long long>(train_.images.size(0)), static_cast<long long>(test_.images.size(0)),
              config_.data_dir.c_str(), static_cast<long long>((batches + accumulate - 1) / accumulate));
  std::fflush(stdout);
}

// One step's estimated memory against what this node has left, before any batch is allocated
// (CPU only: a GPU's memory is another matter). Every rank takes part, so all refuse together.
void Job::check_memory(const BatchRequest& request) {
  if (config_.no_memory_check || trainer_.world().device().is_cuda()) return;
  const std::string refusal =
      memory_refusal(request, trainer_.world().local_size(), examples::available_memory_bytes());
  examples::refuse_together(refusal, "the batch of " + std::to_string(request.samples) + " samples");
}

void Job::run() {
  const cohort::World& world = trainer_.world();
  const int64_t per_rank = (train_.images.size(0) + world.size() - 1) / world.size();
  check_memory({zero_ && zero_->train_micro_batch_size_per_gpu() > 0 ? "the ds_config's train_micro_batch_size_per_gpu"
                                                                      : "--batch-size",
                config_.batch_size, std::min(config_.batch_size * replicas_, per_rank)});
  if (world.is_main()) {
    print_header();
    if (!threads_.note.empty()) std::fprintf(stderr, "%s\n", threads_.note.c_str());
  }
  FashionMnistModule module(config_.seed, config_.lr);
  auto report = std::make_shared<JobReport>(module, lr_rule(config_, zero_), config_.epochs);
  report->set_test_samples(test_.images.size(0));
  trainer_.add_callback(report);
  trainer_.add_callback(std::make_shared<cohort::ProgressBarCallback>(world.is_main() ? config_.progress : "off"));
  if (!config_.checkpoint.dir.empty())
    trainer_.add_callback(std::make_shared<cohort::ModelCheckpoint>(cohort::ModelCheckpointOptions()
                                                                        .dirpath(config_.checkpoint.dir)
                                                                        .every_n_train_steps(config_.checkpoint.every)
                                                                        .async(config_.checkpoint.async)
                                                                        .every_n_epochs(0)
                                                                        .keep_last(3)));
  cohort::DataLoader train(std::make_shared<cohort::TensorDataset>(train_.images, train_.labels),
                           cohort::LoaderOptions().batch_size(config_.batch_size * replicas_).shuffle(true));
  cohort::DataLoader test(std::make_shared<cohort::TensorDataset>(test_.images, test_.labels),
                          cohort::LoaderOptions().batch_size(config_.batch_size * replicas_));
  const std::string resume = config_.checkpoint.trainer_ckpt_path();
  trainer_.fit(module, train, cohort::FitOptions().val(&test).ckpt_path(resume));
  finish(module, *report, test);
}

// The line of an epoch cut short by --max-steps, the final digest (a collective under ZeRO).
void Job::finish(FashionMnistModule& module, JobReport& report, cohort::DataLoader& test) {
  if (trainer_.samples_in_epoch() > 0) report.print_partial_epoch(trainer_, trainer_.validate(module, test));
  std::vector<std::pair<std::string, torch::Tensor>> parameters = trainer_.full_parameters();
  const std::string digest = tensors_sha256(parameters);
  if (!trainer_.world().is_main()) return;
  if (config_.max_steps > 0 && trainer_.global_step() > config_.max_steps)  // resumed past it (hostile pass 17, m-2)
    std::printf("stopped at step %lld, past --max-steps %lld (the checkpoint it resumed from)\n",
                static_cast<long long>(trainer_.global_step()), static_cast<long long>(config_.max_steps));
  else if (config_.max_steps > 0 && trainer_.global_step() == config_.max_steps)
    std::printf("stopped after %lld steps (--max-steps)\n", static_cast<long long>(config_.max_steps));
  std::printf("total time %.1f s\n", std::chrono::duration<double>(Clock::now() - start_).count());
  std::printf("params-sha256: %s\n", digest.c_str());
  std::fflush(stdout);
}

}  // namespace

void run_training(const TrainConfig& config) {
  // Before any worker starts or any data is read, not at the first save an epoch later.
  if (!config.checkpoint.dir.empty()) examples::check_writable_dir("--checkpoint-dir", config.checkpoint.dir);
  Job(config).run();
}

}  // namespace fashion_mnist
