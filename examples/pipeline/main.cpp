// pipeline: trains a deep MLP on Fashion-MNIST split into pipeline stages across ranks (cohort's
// Pipeline: GPipe, 1F1B or interleaved 1F1B), optionally times data-parallel replicas of the whole
// pipeline (a {data, pipe} mesh, DDP or ZeRO-1 per stage), and saves and resumes checkpoints of its
// stages' shards. Run it under cohortrun, e.g.
//   build/tools/cohortrun --nproc-per-node 4 build/examples/pipeline --stages 4 --schedule 1f1b
// Rank 0 prints the partition, the loss as it trains, and the test accuracy. See docs/pipeline.md.
#include <c10/util/Exception.h>
#include <torch/torch.h>
#include <array>

#include <cohort/checkpoint.h>
#include <cohort/cohort.h>
#include <cohort/data.h>
#include <cohort/mesh.h>
#include <cohort/number.h>
#include <cohort/pipeline.h>
#include <cohort/sampler.h>
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "../common/check.h"
#include "../common/checkpoint_flags.h"
#include "../common/cli_choices.h"
#include "../common/cli_main.h"
#include "../common/cli_numbers.h"
#include "../common/cli_paths.h"
#include "../common/threads.h"

namespace {

struct Config {
  int64_t stages = 0;  // 0: world size / data-parallel
  std::string schedule = "1f1b";
  int64_t chunks = 4;
  int64_t stages_per_rank = 2;
  int64_t data_parallel = 1;
  std::string partition = "parameters";
  int64_t hidden_layers = 6;
  int64_t epochs = 1;
  int64_t max_steps = 0;
  int64_t batch_size = 64;
  double lr = 1e-3;
  int64_t threads = 1;
  int64_t zero_stage = 0;  // 1-3: ZeRO over each stage's replicas instead of DDP
  examples::CheckpointFlags checkpoint;
  std::string data_dir = cohort::data::kFashionMnistDir;
};

using examples::add_integer;

// 784 -> 256 -> ... -> 10: Flatten, then Linear and ReLU pairs; no BatchNorm (microbatches would
// change its statistics).
torch::nn::Sequential deep_mlp(int64_t hidden_layers) {
  torch::nn::Sequential net;
  net->push_back(torch::nn::Flatten());
  int64_t width = 28 * 28;
  for (int64_t i = 0; i < hidden_layers; ++i) {
    net->push_back(torch::nn::Linear(width, 256));
    net->push_back(torch::nn::ReLU());
    width = 256;
  }
  net->push_back(torch::nn::Linear(width, 10));
  return net;
}

double test_accuracy(cohort::pipeline::Pipeline& pipeline, const cohort::data::FashionMnist& test) {
  int64_t correct = 0;
  const int64_t n = test.images.size(0);
  for (int64_t start = 0; start < n; start += 1000) {
    auto rows = torch::indexing::Slice(start, std::min(n, start + 1000));
    auto logits = pipeline.forward(test.images.index({rows}));
    correct += logits.argmax(1).eq(test.labels.index({rows})).sum().item<int64_t>();
  }
  return double(correct) / double(n);
}

// Checkpoints: each stage's shard of the model and of Adam's moments (by whole-model names), the
// sampler's position and the step; --resume auto picks up the latest one in --checkpoint-dir.
struct Checkpointing {
  Checkpointing(const Config& config_, cohort::pipeline::Pipeline& pipeline, torch::optim::Optimizer* optimizer,
                cohort::DistributedSampler& sampler, std::shared_ptr<cohort::Comm> comm_)
      : config(config_),
        comm(std::move(comm_)),
        from(config.checkpoint.resume == "auto" ? config.checkpoint.dir : config.checkpoint.trainer_ckpt_path()) {
    if (config.checkpoint.dir.empty() && from.empty()) return;
    state.add("sampler", sampler, samples_in_epoch);
    // With --zero-stage the engines hold the weights and Adam's state: their state by parameter.
    if (optimizer != nullptr)
      state.add("model", pipeline.model_state()).add("optimizer", pipeline.optimizer_state(*optimizer));
    else state.add("zero", pipeline.zero_state());
  }
  /// The step to go on from (0 from scratch).
  int64_t resume() {
    say_restart();
    if (from.empty()) return 0;
    const auto info = cohort::load_checkpoint(from, state, cohort::LoadOptions().comm(comm));
    if (!info) return 0;
    if (comm->rank() == 0)  // as the Trainer's examples say it (hostile pass 9, minor 6)
      std::printf("resumed from %s (step %lld, saved by %d rank(s))%s\n", info->path.c_str(),
                  static_cast<long long>(info->step), info->world_size,
                  info->skipped.empty() ? "" : "; newer checkpoints were unusable, see the log");
    saved_step = state.step();  // nothing new to save before the next step
    // The position counts batches of the saved size: another would replay or skip samples (hostile
    // pass 10, S6), so the global batch is kept, as the Trainer keeps it.
    const std::string saved_batch = state.get("trainer.global_batch");
    const int64_t batch = config.batch_size * config.data_parallel;
    if (!saved_batch.empty() && saved_batch != std::to_string(batch))
      throw cohort::Error("the checkpoint " + info->path + " was saved with a global batch of " + saved_batch +
                              " samples, this run has " + std::to_string(batch) +
                              " (--batch-size x --data-parallel): keep the global batch to resume",
                          cohort::ErrorKind::kInvalidArgument);
    // Saved at its epoch's last batch (as the saving run counted them), the epoch is over: another
    // layout of the data may have a batch more, which the saved epoch never had (hostile pass 12, M-3).
    const std::string saved_batches = state.get("trainer.epoch_batches");
    if (!saved_batches.empty() && samples_in_epoch > 0)
      epoch_done = (samples_in_epoch + batch - 1) / batch >=
                   cohort::parse_integer(saved_batches, {"the checkpoint's trainer.epoch_batches", 1, INT64_MAX});
    return state.step();
  }
  /// A launcher's restart runs the same command again: it continues from the newest checkpoint only
  /// with --resume auto, which this says (hostile pass 19 M-1: --resume never restarted from step 0
  /// without a word). The Trainer's examples continue a restart from the newest one their job saved.
  void say_restart() const {
    const char* count = std::getenv("TORCHELASTIC_RESTART_COUNT");
    if (count == nullptr || std::string(count) == "0" || config.checkpoint.resume == "auto" || comm->rank() != 0)
      return;
    std::printf(
        "restart %s of this job (TORCHELASTIC_RESTART_COUNT): --resume %s starts it again %s; this example "
        "continues a restart from the newest checkpoint in --checkpoint-dir only with --resume auto\n",
        count, config.checkpoint.resume.c_str(),
        config.checkpoint.resume == "never" ? "from step 0" : ("from " + config.checkpoint.resume).c_str());
    std::fflush(stdout);
  }
  /// Where this stretch of steps began (the run's start, a resume, an epoch's start): saved with the
  /// batch sizes under the Trainer's keys, so that a checkpoint's sampler position is checked against
  /// its step as the Trainer's is (docs/checkpoint.md, "The position and the step").
  void begin_segment(int64_t epoch, int64_t step) { segment = {epoch, step, samples_in_epoch}; }
  /// Every --checkpoint-every steps, and at the end (`last`) unless that step was just saved.
  void save(int64_t step, bool last, int64_t epoch_batches) {
    const bool every = config.checkpoint.every > 0 && step % config.checkpoint.every == 0;
    if (config.checkpoint.dir.empty() || !(every || last) || step == saved_step) return;
    const std::string batch = std::to_string(config.batch_size * config.data_parallel);
    state.set("trainer.global_batch", batch).set("trainer.step_batch", batch);  // one batch a step
    state.set("trainer.epoch_batches", std::to_string(epoch_batches));
    state.set("trainer.segment.epoch", std::to_string(segment[0]))
        .set("trainer.segment.step", std::to_string(segment[1]))
        .set("trainer.segment.samples", std::to_string(segment[2]));
    cohort::save_checkpoint(config.checkpoint.dir, state.set_step(step),
                            cohort::SaveOptions().comm(comm).async(config.checkpoint.async));
    saved_step = step;
  }
  const Config& config;
  std::shared_ptr<cohort::Comm> comm;
  std::string from;  // the checkpoint directory to resume from, if any
  cohort::CheckpointState state;
  int64_t samples_in_epoch = 0;             // of this epoch, all replicas together, of the batches that trained
  bool epoch_done = false;                  // resumed at its epoch's last batch: the next epoch comes first
  std::array<int64_t, 3> segment{0, 0, 0};  // epoch, step, samples_in_epoch
  int64_t saved_step = -1;
};

cohort::pipeline::PipelineOptions pipeline_options(const Config& config, const cohort::Mesh& mesh, int per_rank) {
  auto options = cohort::pipeline::PipelineOptions()
                     .schedule(config.schedule)
                     .chunks(int(config.chunks))
                     .stages_per_rank(per_rank)
                     .loss_fn([](const torch::Tensor& out, const torch::Tensor& y) {
                       return torch::nn::functional::cross_entropy(out, y);
                     });
  if (config.data_parallel > 1) options.data_comm(mesh.group_ptr("data"));
  if (config.zero_stage > 0) {
    examples::require(config.data_parallel > 1, "--zero-stage ", config.zero_stage, " needs --data-parallel 2 or more");
    const double lr = config.lr;
    options.zero(cohort::ZeroConfig().zero_optimization(cohort::ZeroOptimizationConfig().stage(int(config.zero_stage))))
        .zero_optimizer([lr](std::vector<torch::Tensor> shards) {
          return std::make_unique<torch::optim::Adam>(shards, torch::optim::AdamOptions(lr));
        });
  }
  return options;
}

// Flags that cannot work together, refused before anything starts (exit status 2).
void check_flags(const Config& config) {
  // Every batch would be a tail too small to split, so nothing would train.
  examples::require(config.chunks <= config.batch_size, "--chunks ", config.chunks, " is more than --batch-size ",
                    config.batch_size,
                    ": a batch cannot be split into more microbatches than it has samples; lower "
                    "--chunks or raise --batch-size");
  config.checkpoint.check();
}

void train(const Config& config) {
  // Before the first step, not at the first save after --checkpoint-every steps.
  if (!config.checkpoint.dir.empty()) examples::check_writable_dir("--checkpoint-dir", config.checkpoint.dir);
  examples::set_threads(int(config.threads));
  auto world = cohort::init();
  const int64_t stages = config.stages > 0 ? config.stages : world.size() / config.data_parallel;
  examples::require(stages * config.data_parallel == world.size(), "--stages ", stages, " x --data-parallel ",
                    config.data_parallel, " is not the world size ", world.size());
  const int per_rank = config.schedule == "interleaved" ? int(config.stages_per_rank) : 1;
  // Row-major: the ranks of one pipeline are consecutive; each stage's replicas form a data group.
  cohort::Mesh mesh(world.comm(), {{"data", int(config.data_parallel)}, {"pipe", int(stages)}});
  torch::manual_seed(0);  // the same initial model on every rank; each keeps its stages
  auto model = deep_mlp(config.hidden_layers);
  auto part = cohort::pipeline::partition(model, int(stages) * per_rank,
                                          cohort::pipeline::PartitionOptions().method(config.partition));
  if (world.rank() == 0) std::cout << "partition (" << config.partition << "):\n" << part.describe() << std::flush;
  cohort::pipeline::Pipeline pipeline(mesh.group_ptr("pipe"),
                                      cohort::pipeline::stages_of_rank(part, int(stages), mesh.coordinate("pipe")),
                                      pipeline_options(config, mesh, per_rank));
  // With --zero-stage the stages' ZeRO engines hold Adam, each over its shard.
  std::unique_ptr<torch::optim::Adam> optimizer;
  if (config.zero_stage == 0)
    optimizer = std::make_unique<torch::optim::Adam>(pipeline.parameters(), torch::optim::AdamOptions(config.lr));
  const auto train_set = cohort::data::load_fashion_mnist(config.data_dir, cohort::data::Split::kTrain);
  const auto test_set = cohort::data::load_fashion_mnist(config.data_dir, cohort::data::Split::kTest);
  cohort::DistributedSampler sampler(
      train_set.images.size(0),
      cohort::SamplerOptions().num_replicas(int(config.data_parallel)).rank(mesh.coordinate("data")));
  Checkpointing checkpoints(config, pipeline, optimizer.get(), sampler, world.comm_ptr());
  int64_t step = checkpoints.resume();
  const int64_t start_epoch = sampler.epoch() + (checkpoints.epoch_done ? 1 : 0);
  if (checkpoints.epoch_done) checkpoints.samples_in_epoch = 0;
  // A tail too small to split into --chunks trains nothing: no step, no samples counted.
  const int64_t batches = sampler.num_batches(config.batch_size);
  const int64_t epoch_batches = batches - (sampler.size() - (batches - 1) * config.batch_size < config.chunks ? 1 : 0);
  double loss = 0;
  const int64_t first_step = step;
  const auto at_max_steps = [&] { return config.max_steps > 0 && step >= config.max_steps; };
  for (int64_t epoch = start_epoch; epoch < config.epochs && !at_max_steps(); ++epoch) {
    if (epoch != start_epoch) checkpoints.samples_in_epoch = 0;
    checkpoints.begin_segment(epoch, step);
    sampler.set_epoch(epoch);
    const int64_t global_batch = config.batch_size * config.data_parallel;
    int64_t skip = (checkpoints.samples_in_epoch + global_batch - 1) / global_batch;  // done before the resume
    for (const auto& batch : sampler.batch_tensors(config.batch_size)) {
      if (skip > 0) {
        --skip;
        continue;
      }
      if (batch.size(0) < config.chunks) continue;                           // a tail too small to split into --chunks
      checkpoints.samples_in_epoch += batch.size(0) * config.data_parallel;  // the tail's too: its real size
      if (optimizer) optimizer->zero_grad();
      loss = pipeline.step(train_set.images.index({batch}), train_set.labels.index({batch})).item<double>();
      // Every rank holds the batch's mean loss: all stop together before NaN weights are saved (hostile
      // pass 9, S4: a checkpoint's lr of 1e30 trained to nan, exit 0, and saved the NaN weights).
      if (!std::isfinite(loss))
        throw cohort::Error("step " + std::to_string(step + 1) + ": the training loss is " + std::to_string(loss) +
                                "; training stopped (the weights are no longer finite; lower the learning rate)",
                            cohort::ErrorKind::kInvalidArgument);
      if (optimizer) optimizer->step();
      else pipeline.optimizer_step();
      ++step;  // on every rank: all of them stop at --max-steps together
      if (world.rank() == 0 && step % 100 == 0)
        std::printf("epoch %lld step %lld loss %.4f\n", (long long)epoch, (long long)step, loss);
      checkpoints.save(step, false, epoch_batches);
      if (at_max_steps()) break;
    }
  }
  checkpoints.save(step, true, epoch_batches);
  cohort::finish_checkpoint_saves();  // the run ends when its last checkpoint is written
  const double accuracy = test_accuracy(pipeline, test_set);
  // A resume with nothing left to train has no loss of its own (hostile pass 19 m-1: "final loss 0.0000").
  char trained[64] = "(no training in this run)";
  if (step > first_step) std::snprintf(trained, sizeof trained, "final loss %.4f", loss);
  if (world.rank() == 0)
    std::printf("steps %lld %s test accuracy %.4f (%s, %lld pipeline ranks, %d chunks, data parallel %lld)\n",
                (long long)step, trained, accuracy, config.schedule.c_str(), (long long)stages, int(config.chunks),
                (long long)config.data_parallel);
}

}  // namespace

int main(int argc, char** argv) {
  Config config;
  CLI::App app{"Trains a deep MLP on Fashion-MNIST split into pipeline stages over the ranks cohortrun starts."};
  add_integer(app, {"--stages", 0, 1024}, config.stages, "Pipeline ranks (0: world size / --data-parallel)");
  examples::add_choice(app, "--schedule", config.schedule, {"gpipe", "1f1b", "interleaved"}, "Pipeline schedule");
  add_integer(app, {"--chunks", 1, 4096}, config.chunks, "Microbatches per step");
  add_integer(app, {"--stages-per-rank", 1, 64}, config.stages_per_rank, "Stages per rank with --schedule interleaved");
  add_integer(app, {"--data-parallel", 1, 1024}, config.data_parallel,
              "Replicas of the whole pipeline (DDP per stage)");
  examples::add_choice(app, "--partition", config.partition, {"parameters", "uniform"},
                       "How the layers are cut into stages");
  add_integer(app, {"--hidden-layers", 1, 256}, config.hidden_layers, "Hidden Linear+ReLU layers of 256");
  add_integer(app, {"--epochs", 1, 100000}, config.epochs, "Passes over the training set");
  add_integer(app, {"--max-steps", 0, int64_t(1e12)}, config.max_steps, "Stop after this many steps (0: no limit)");
  add_integer(app, {"--batch-size", 1, 1 << 20}, config.batch_size, "Samples per step on each pipeline");
  add_integer(app, {"--threads", 1, 1024}, config.threads, "Torch threads per rank");
  add_integer(app, {"--zero-stage", 0, 3}, config.zero_stage,
              "1-3: ZeRO over each stage's replicas (needs --data-parallel 2+) instead of DDP; 3 shards the "
              "stages' parameters too (FSDP per stage)");
  examples::add_checkpoint_flags(app, config.checkpoint, {"each stage's shard; ", /*restart_resumes=*/false});
  app.add_option("--data", config.data_dir, "Directory of the four Fashion-MNIST IDX files")->capture_default_str();
  app.callback([&] { check_flags(config); });
  return examples::parse_and_run(app, argc, argv, [&] { train(config); });
}
