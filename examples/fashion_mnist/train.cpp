// The training loop of the Fashion-MNIST job (see train.h). Every rank runs the same number of
// steps (the train sampler pads), so DDP's collectives line up; evaluation uses the sampler's exact
// split, so ranks run different numbers of test batches and reduce their counts once, at the end.
#include "train.h"

#include <cohort/comm.h>
#include <cohort/ddp.h>  // reduce_metrics
#include <cohort/error.h>
#include <cohort/number.h>
#include <cohort/progress.h>
#include <cohort/sampler.h>
#include <cohort/world.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <sstream>

#include "checkpointing.h"
#include "resources.h"
#include "trainer.h"

namespace fashion_mnist {

namespace {

using Clock = std::chrono::steady_clock;
using cohort::ProgressBar;
using cohort::ProgressStyle;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// A double that reads back bit for bit ("0.001", "0.0030000000000000001").
std::string exact_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

// --threads (capped by the cores, see resources.h), applied before any torch work.
ThreadChoice set_threads(const TrainConfig& config, const cohort::World& world) {
  const ThreadChoice choice = choose_threads(config.threads, config.oversubscribe, world.local_size());
  torch::set_num_threads(choice.threads);
  return choice;
}

// A split with no images gives a loss of 0/0 and an accuracy of 0/0: refuse it by name.
cohort::data::FashionMnist non_empty(cohort::data::FashionMnist data, const std::string& dir, const char* split) {
  COHORT_CHECK(data.images.size(0) > 0, "the ", split, " set in ", dir,
               " holds 0 images: there is nothing to ", std::string(split) == "training" ? "train on" : "evaluate");
  return data;
}

// A ds_config's train_micro_batch_size_per_gpu, when it has one, is the batch per rank.
TrainConfig with_batch_of(TrainConfig config, const Trainer& trainer) {
  if (trainer.micro_batch() > 0) config.batch_size = trainer.micro_batch();
  return config;
}

// This rank's share of an epoch, or of the test set; summed over ranks by reduce_metrics.
struct Totals {
  double loss_sum = 0;  // training: sum over samples of the loss (batch mean times batch size)
  int64_t correct = 0;  // evaluation: right predictions
  int64_t samples = 0;
  int64_t steps = 0;
};

class Job {
 public:
  explicit Job(const TrainConfig& config)
      : world_(cohort::init()),
        threads_(set_threads(config, world_)),
        trainer_(make_trainer(config, world_)),
        config_(with_batch_of(config, *trainer_)),
        train_(non_empty(cohort::data::load_fashion_mnist(config.data_dir, cohort::data::Split::kTrain),
                         config.data_dir, "training")),
        test_(non_empty(cohort::data::load_fashion_mnist(config.data_dir, cohort::data::Split::kTest),
                        config.data_dir, "test")),
        train_sampler_(train_.images.size(0),
                       cohort::SamplerOptions().shuffle(true).seed(config.seed)),
        test_sampler_(test_.images.size(0),
                      cohort::SamplerOptions().shuffle(false).exact_split(true)),
        checkpointing_(config, checkpoint_state()) {}

  void run();

 private:
  Totals train_epoch(ProgressBar& bar, int64_t max_steps, int64_t skip);
  Totals evaluate();
  void print_header() const;
  void check_memory();
  void resume();
  void apply_lr_after_resume();
  cohort::CheckpointState checkpoint_state();
  int64_t global_batch() const { return config_.batch_size * world_.size(); }

  cohort::World world_;
  ThreadChoice threads_;
  std::unique_ptr<Trainer> trainer_;  // DDP + Adam, or the ZeRO engine
  TrainConfig config_;
  cohort::data::FashionMnist train_, test_;
  cohort::DistributedSampler train_sampler_, test_sampler_;
  int64_t step_ = 0;              // optimizer steps in all, over every resume
  int64_t samples_in_epoch_ = 0;  // of the current epoch, over all ranks: steps in it * global batch
  Checkpointing checkpointing_;
};

// What a resume needs. The global batch is kept too: the position in an epoch counts global
// batches, which are the same samples at any world size only when the global batch is the same.
cohort::CheckpointState Job::checkpoint_state() {
  cohort::CheckpointState state;
  trainer_->add_to(state);
  state.add("sampler", train_sampler_, samples_in_epoch_);
  state.set("global_batch", std::to_string(global_batch()));
  if (const auto lr = trainer_->configured_lr()) state.set("lr", exact_text(*lr));
  return state;
}

// Trains from batch `skip` of this epoch on (the batches before it were trained before a resume),
// saving checkpoints on the way.
Totals Job::train_epoch(ProgressBar& bar, int64_t max_steps, int64_t skip) {
  Totals totals;
  trainer_->set_training(true);
  const std::vector<torch::Tensor> batches = train_sampler_.batch_tensors(config_.batch_size);
  for (size_t index = static_cast<size_t>(skip); index < batches.size(); ++index) {
    if (totals.steps == max_steps) break;
    const torch::Tensor& batch = batches[index];
    const torch::Tensor images = train_.images.index_select(0, batch).to(world_.device());
    const torch::Tensor labels = train_.labels.index_select(0, batch).to(world_.device());
    const double loss = trainer_->train_step(images, labels);
    // A non-finite loss makes every later step and the saved weights meaningless: stop, naming it.
    COHORT_CHECK(std::isfinite(loss), "step ", step_ + 1, ": the training loss is ",
                 std::isnan(loss) ? "nan" : loss > 0 ? "inf" : "-inf",
                 "; training stopped (the weights are no longer finite; lower the learning rate, now ",
                 trainer_->current_lr(), ")");
    totals.loss_sum += loss * batch.numel();
    totals.samples += batch.numel();
    totals.steps += 1;
    step_ += 1;
    samples_in_epoch_ += global_batch();
    if (index + 1 == batches.size()) {  // a checkpoint taken now resumes at the next epoch
      train_sampler_.set_epoch(train_sampler_.epoch() + 1);
      samples_in_epoch_ = 0;
    }
    checkpointing_.after_step(step_, false);
    // Ranks step in lockstep with equal batches: all ranks together did world size times as many.
    bar.update(totals.steps, totals.loss_sum / totals.samples, totals.samples * world_.size());
  }
  bar.finish();
  return totals;
}

Totals Job::evaluate() {
  torch::NoGradGuard no_grad;
  trainer_->set_training(false);
  Totals totals;
  for (const torch::Tensor& batch : test_sampler_.batch_tensors(config_.batch_size)) {
    const torch::Tensor images = test_.images.index_select(0, batch).to(world_.device());
    const torch::Tensor labels = test_.labels.index_select(0, batch).to(world_.device());
    totals.correct += trainer_->predict(images).argmax(1).eq(labels).sum().item<int64_t>();
    totals.samples += batch.numel();
  }
  return totals;
}

void Job::print_header() const {
  std::printf(
      "fashion_mnist: %d rank(s) (launcher: %s) on %s, %d thread(s) per rank, batch %lld per rank "
      "(%lld global), %s, seed %lld\n",
      world_.size(), world_.launcher().c_str(), world_.device().str().c_str(), threads_.threads,
      static_cast<long long>(config_.batch_size),
      static_cast<long long>(config_.batch_size * world_.size()), trainer_->describe().c_str(),
      static_cast<long long>(config_.seed));
  std::printf("data: %lld train / %lld test images from %s; %lld steps per epoch\n",
              static_cast<long long>(train_.images.size(0)),
              static_cast<long long>(test_.images.size(0)), config_.data_dir.c_str(),
              static_cast<long long>(train_sampler_.num_batches(config_.batch_size)));
  std::fflush(stdout);
}

// One step's estimated memory against what this node has left, before any batch is allocated
// (CPU only: a GPU's memory is another matter). Every rank takes part, so all refuse together.
void Job::check_memory() {
  if (config_.no_memory_check || world_.device().is_cuda()) return;
  const BatchRequest request{
      trainer_->micro_batch() > 0 ? "the ds_config's train_micro_batch_size_per_gpu" : "--batch-size",
      config_.batch_size, std::min(config_.batch_size, train_sampler_.size())};  // the largest real batch
  const std::string refusal = memory_refusal(request, world_.local_size(), available_memory_bytes());
  const auto refusing = cohort::reduce_metrics({torch::tensor(int64_t(refusal.empty() ? 0 : 1))});
  if (refusing[0].item<int64_t>() == 0) return;
  COHORT_CHECK(!refusal.empty(), "another rank refused the batch of ", request.samples,
               " samples: it needs more memory than that rank's node has available");
  throw cohort::Error(refusal);
}

// --lr (or the ds_config's lr) against the lr the checkpoint was saved with: this run's value wins,
// as setting param_group['lr'] after load_state_dict does in PyTorch, and the change is said.
void Job::apply_lr_after_resume() {
  const std::optional<double> wanted = trainer_->configured_lr();
  if (!wanted) return;  // a ds_config scheduler sets the lr at every step
  cohort::CheckpointState& state = checkpointing_.state();
  const std::string saved_text = state.get("lr");  // "" in checkpoints of before this was saved
  const double saved = saved_text.empty() ? trainer_->current_lr()
                                          : cohort::parse_real(saved_text, {"the checkpoint's lr", 0, 1e300});
  trainer_->set_lr(*wanted);
  state.set("lr", exact_text(*wanted));
  if (saved == *wanted || !world_.is_main()) return;
  std::ostringstream line;
  line << "lr: training continues with " << *wanted << " (" << trainer_->lr_source()
       << "), not the checkpoint's " << saved
       << ": this run's setting wins, as setting a param group's lr after loading does in PyTorch";
  std::printf("%s\n", line.str().c_str());
}

void Job::resume() {
  const std::string resumed = checkpointing_.resume();
  if (resumed.empty()) return;
  const std::string saved_batch = checkpointing_.state().get("global_batch");
  COHORT_CHECK(saved_batch == std::to_string(global_batch()), "the checkpoint was saved with a "
               "global batch of ", saved_batch, " samples, this run has ", global_batch(),
               " (--batch-size x ranks): keep the global batch to resume");
  step_ = checkpointing_.state().step();
  if (world_.is_main()) std::printf("%s\n", resumed.c_str());
  apply_lr_after_resume();
}

void Job::run() {
  check_memory();
  if (world_.is_main()) {
    print_header();
    if (!threads_.note.empty()) std::fprintf(stderr, "%s\n", threads_.note.c_str());
  }
  const ProgressStyle style =
      world_.is_main() ? cohort::progress_style_named(config_.progress, stdout) : ProgressStyle::kOff;
  const int64_t steps_per_epoch = train_sampler_.num_batches(config_.batch_size);
  resume();
  int64_t steps_left =
      config_.max_steps > 0 ? config_.max_steps - step_ : std::numeric_limits<int64_t>::max();
  const Clock::time_point job_start = Clock::now();
  for (int64_t epoch = train_sampler_.epoch(); epoch < config_.epochs && steps_left > 0; ++epoch) {
    const Clock::time_point start = Clock::now();
    train_sampler_.set_epoch(epoch);
    const int64_t skip = samples_in_epoch_ / global_batch();  // trained before the resume
    const std::string label =
        "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(config_.epochs);
    ProgressBar bar(label, std::min(steps_per_epoch - skip, steps_left), style);
    const Totals train = train_epoch(bar, steps_left, skip);
    steps_left -= train.steps;
    const double train_seconds = seconds_since(start);

    const Clock::time_point eval_start = Clock::now();
    const Totals test = evaluate();
    // One reduction per epoch: exact sums over all ranks (integers stay integers).
    const std::vector<torch::Tensor> sums = cohort::reduce_metrics(
        {torch::tensor(train.loss_sum, torch::kFloat64), torch::tensor(train.samples),
         torch::tensor(test.correct), torch::tensor(test.samples)});
    const double eval_seconds = seconds_since(eval_start);
    if (world_.is_main()) {
      const int64_t correct = sums[2].item<int64_t>(), seen = sums[3].item<int64_t>();
      std::printf(
          "%s: train loss %.4f, test accuracy %.2f%% (%lld/%lld), time %.1f s (train %.1f s, "
          "eval %.1f s)\n",
          label.c_str(), sums[0].item<double>() / sums[1].item<int64_t>(),
          100.0 * correct / std::max<int64_t>(seen, 1), static_cast<long long>(correct),
          static_cast<long long>(seen), train_seconds + eval_seconds, train_seconds, eval_seconds);
      std::fflush(stdout);
    }
  }
  checkpointing_.after_step(step_, true);  // the final state, unless it was just saved
  const std::string digest = trainer_->digest();  // a collective under ZeRO: every rank
  if (world_.is_main()) {
    if (steps_left <= 0) {
      std::printf("stopped after %lld steps (--max-steps)\n",
                  static_cast<long long>(config_.max_steps));
    }
    std::printf("total time %.1f s\n", seconds_since(job_start));
    std::printf("params-sha256: %s\n", digest.c_str());
    std::fflush(stdout);
  }
}

}  // namespace

void run_training(const TrainConfig& config) { Job(config).run(); }

}  // namespace fashion_mnist
