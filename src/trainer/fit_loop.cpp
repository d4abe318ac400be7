// The Trainer's loop (see trainer_impl.h): a sanity check of validation, epochs of batches (as many as
// limit_train_batches lets), the optimizer step at each accumulation boundary, validation every
// val_check_interval and at epoch ends, LR scheduling, max_time, metrics to callbacks and loggers.
// Every rank runs the same number of steps (the training sampler pads; with uneven_inputs it does not,
// and a rank whose share ended replays its last batch with weight zero), so the strategy's collectives
// line up; evaluation uses the exact split and reduces once.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "cohort/ddp.h"
#include "cohort/error.h"
#include "cohort/trace.h"
#include "core/check.h"
#include "core/text.h"
#include "trainer/trainer_impl.h"

namespace cohort::detail {
namespace {

Batch on_device(Batch batch, const torch::Device& device) { return {batch.data.to(device), batch.target.to(device)}; }

// What to change when the loss stops being finite. Most often the learning rate; but an Adam eps of 0
// divides 0 by 0 wherever a gradient and its moments are 0, whatever the rate (hostile pass 4, D8).
// After a resume the rate is the checkpoint's, whatever the program asked (hostile pass 11, M-c: a
// lower --lr changed nothing and the message did not say why).
std::string divergence_hint(Strategy& strategy, const TrainerImpl::Resumed& resumed, const std::string& pretrained) {
  double eps = -1;
  try {
    auto& options = strategy.optimizer().param_groups().at(0).options();
    if (auto* adam = dynamic_cast<torch::optim::AdamOptions*>(&options)) eps = adam->eps();
    if (auto* adamw = dynamic_cast<torch::optim::AdamWOptions*>(&options)) eps = adamw->eps();
  } catch (const std::exception&) {  // a strategy without one optimizer: the rate is the hint
  }
  if (eps == 0)
    return "the optimizer's eps is 0, which divides 0 by 0 where a gradient is 0: give it a positive value, e.g. 1e-8";
  std::string hint = "lower the learning rate, now " + number_text(strategy.lr());
  if (!pretrained.empty())  // the weights it started from may not have been finite (hostile pass 20, m-2)
    hint += ", or check the pretrained weights it started from (" + pretrained + ")";
  if (!resumed.path.empty() && strategy.lr() == resumed.lr)
    hint += ", restored from " + resumed.path +
            " (a checkpoint's optimizer state, its rate included, replaces the program's: set the rate after the "
            "resume, or resume from an older checkpoint)";
  return hint;
}

}  // namespace

void TrainerImpl::fit(TrainingModule& target, DataLoader& train_data, const FitOptions& fit_options) {
  attach(target);
  train = &train_data;
  val = fit_options.val();
  resumed = {};
  pretrained.clear();
  const auto [shares, share] = strategy->data_split(world);
  const bool uneven = options.raw.uneven_inputs();
  if (uneven) {
    train->distribute_unpadded(shares, share, std::max<int64_t>(options.raw.seed(), 0));
  } else {
    train->distribute(shares, share, false, std::max<int64_t>(options.raw.seed(), 0));
  }
  if (val != nullptr) val->distribute(shares, share, true, 0);
  if (options.raw.limit_val_batches().value == 0) val = nullptr;  // validation off, on every rank alike
  own_batches = limited_batches(options.raw.limit_train_batches(), train->num_batches(), "limit_train_batches");
  train_batches = own_batches;
  // uneven_inputs: every rank steps as often as the largest share has batches (one collective, here).
  if (uneven) train_batches = world.comm().allreduce(torch::tensor(own_batches), ReduceOp::kMax).item<int64_t>();
  const int64_t batches = train_batches, accumulate = strategy->accumulation();
  COHORT_CHECK_KIND(kInvalidArgument, own_batches > 0, "the training loader has no batch on rank ", world.rank(), " (",
                    train->dataset().size(), " samples over ", shares, " share(s) of the data, batch_size ",
                    train->options().batch_size(), ")");
  const bool zero = options.strategy == StrategyKind::kZero || options.strategy == StrategyKind::kDeepSpeed;
  COHORT_CHECK_KIND(
      kInvalidArgument, !zero || batches % accumulate == 0,
      "accumulate_grad_batches (or the ds_config's "
      "gradient_accumulation_steps) ",
      accumulate, " does not divide the ", batches,
      " training batches per epoch, which the ZeRO engine needs "
      "(its accumulation boundary counts micro-batches): choose a divisor, or drop_last with another batch size");
  val_every = options.val_every_batches > 0 ? options.val_every_batches
              : options.val_fraction < 1.0  ? std::max<int64_t>(1, std::llround(batches * options.val_fraction))
                                            : 0;
  add_default_callbacks();
  each_callback([&](Callback& c) { c.on_fit_start(owner, *module); });
  module->on_fit_start();
  if (const std::string ckpt = checkpoints.checkpoint_to_resume(fit_options); !ckpt.empty()) checkpoints.resume(ckpt);
  // Only when nothing resumed (a first run, or a restart that found no usable checkpoint of its own):
  // a checkpoint replaces them, and needs neither the file nor its reading (hostile pass 20, M-1).
  if (resumed.path.empty() && !options.raw.pretrained_weights().empty()) {
    // The callbacks see the file's metadata first: weights saved for another model are refused there
    // (gpt's model flags), on every rank, whatever started it (hostile pass 21, S-1).
    const auto metadata = safetensors_metadata(options.raw.pretrained_weights());
    each_callback([&](Callback& c) { c.check_pretrained(metadata); });
    strategy->load_pretrained(options.raw.pretrained_weights(),
                              StateDictOptions().module_prefix(options.raw.pretrained_prefix()));
    pretrained = options.raw.pretrained_weights();
  }
  const int64_t first_step = step;
  begin_segment();
  sanity_check();
  module->model().train(true);
  fit_started = std::chrono::steady_clock::now();
  while (run_epoch()) {
  }
  module->on_fit_end();
  each_callback([&](Callback& c) { c.on_fit_end(owner, *module); });
  // Stopped inside an epoch (max_steps, max_time, a stop request) after training in this fit: the
  // epoch's means so far in callback_metrics, batches before a resume included, as Lightning's epoch
  // end at max_steps gives them. The condition is the same on every rank (sync_dist means are a
  // collective); a fit that trained nothing here may hold no sums on ranks > 0 (another world size).
  if (samples_in_epoch > 0 && step > first_step) publish(metrics.epoch_means(Stage::kTrain, world.comm()), false);
  if (world.is_main())
    for (auto& logger : loggers) logger->flush();
}

bool TrainerImpl::finished() const {
  const TrainerOptions& raw = options.raw;
  return stop || (raw.max_steps() >= 0 && step >= raw.max_steps()) ||
         (raw.max_epochs() >= 0 && epoch >= raw.max_epochs());
}

bool TrainerImpl::run_epoch() {
  if (finished()) return false;
  train->set_epoch(epoch);
  loss_sum = 0;
  loss_samples = 0;
  module->on_train_epoch_start();
  each_callback([&](Callback& c) { c.on_train_epoch_start(owner, *module); });
  stage = Stage::kTrain;
  const int64_t skip = owner.batches_done_in_epoch();
  bool complete = skip >= train_batches || resumed.epoch_done, go_on = true;
  resumed.epoch_done = false;
  int64_t next = skip;
  last_batch = Batch();
  if (!complete && skip < own_batches)
    train->for_each(skip, [&](int64_t index, Batch& batch) {
      if (own_batches < train_batches) last_batch = batch;
      go_on = train_batch(index, batch);
      next = index + 1;
      complete = next == train_batches;
      return go_on && !complete && next < own_batches;
    });
  if (go_on && !complete) complete = replay_steps(next);
  if (complete) end_epoch();
  return !finished();
}

// uneven_inputs: steps next .. train_batches - 1 after this rank's share ended (or a resume past it).
// True when the epoch completed; false when training stopped inside them.
bool TrainerImpl::replay_steps(int64_t next) {
  if (!last_batch.data.defined())  // resumed after this rank's share had ended: fetch its last batch
    train->for_each(own_batches - 1, [&](int64_t, Batch& batch) {
      last_batch = batch;
      return false;
    });
  for (; next < train_batches; ++next) {
    Batch batch = last_batch;
    if (!train_batch(next, batch, true)) return next + 1 == train_batches;
  }
  return true;
}

bool TrainerImpl::train_batch(int64_t index, Batch& batch, bool replayed) {
  batch = on_device(std::move(batch), world.device());
  batch_size = batch.data.size(0);
  const int64_t batches = train_batches;
  const bool boundary = (index + 1) % strategy->accumulation() == 0 || index + 1 == batches;
  // The timeline (docs/timeline.md): a step span per batch, compute spans inside it.
  cohort::trace::Span step_span("step");
  torch::Tensor loss;
  {
    cohort::trace::Span compute("training_step");
    auto autocast = strategy->autocast();
    loss = strategy->training_step(*module, batch, index);
  }
  COHORT_CHECK_KIND(kInvalidArgument, loss.defined() && loss.numel() == 1,
                    "training_step must return the loss, one number; got ",
                    loss.defined() ? "a tensor of shape " + detail::str(loss.sizes()) : "an undefined tensor");
  const double value = loss.item<double>();
  // A non-finite loss makes every later step and the saved weights meaningless: stop, naming it.
  COHORT_CHECK_KIND(kInvalidArgument, std::isfinite(value), "step ", step + 1, ": the training loss is ",
                    std::isnan(value) ? "nan"
                    : value > 0       ? "inf"
                                      : "-inf",
                    "; training stopped (the weights are no longer finite; ",
                    divergence_hint(*strategy, resumed, pretrained), ")");
  {
    cohort::trace::Span compute("backward");
    // A replayed batch adds zero to every gradient, but its backward runs every collective of a step.
    strategy->backward(replayed ? loss * 0 : loss, boundary);
  }
  if (!replayed) {
    loss_sum += value * static_cast<double>(batch_size);
    loss_samples += batch_size;
  }
  // The padded sampler gives each share as many; with uneven_inputs a step counts one full batch per
  // share, so batches_done_in_epoch() still counts the steps taken, up to the data's size: only the
  // epoch's last step reaches it (its steps are ceil(size / global batch)), and a position past the data
  // is one no sampler saves (hostile pass 10, S1: 128 saved for 50 images, every checkpoint BAD).
  if (options.raw.uneven_inputs()) {
    const int64_t counted = train->options().batch_size() * strategy->data_split(world).first;
    samples_in_epoch = std::min(samples_in_epoch + counted, static_cast<int64_t>(train->dataset().size()));
  } else {
    samples_in_epoch += batch_size * strategy->data_split(world).first;
  }
  last_batch_index = index;
  mid_accumulation = !boundary;
  module->on_train_batch_end(loss, index);
  if (boundary) after_optimizer_step(index);
  return !stop && !(options.raw.max_steps() >= 0 && step >= options.raw.max_steps());
}

void TrainerImpl::after_optimizer_step(int64_t index) {
  {
    cohort::trace::Span compute("optimizer step");
    strategy->step();
  }
  ++step;
  if (scheduler.scheduler && scheduler.interval == SchedulerInterval::kStep && step % scheduler.frequency == 0)
    scheduler.scheduler->step();
  const auto values = metrics.take_step(world.comm());
  publish(values, step % options.raw.log_every_n_steps() == 0);
  each_callback([&](Callback& c) { c.on_train_batch_end(owner, *module, index); });
  if (val != nullptr && val_every > 0 && (index + 1) % val_every == 0 && index + 1 < train_batches) validate_now();
  check_max_time();
}

// Every rank stops after the same step: the ranks' clocks differ, so their wishes are combined.
void TrainerImpl::check_max_time() {
  if (options.max_time_seconds <= 0 || stop) return;
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - fit_started;
  if (elapsed.count() >= options.max_time_seconds && !stop_wish) {
    stop_wish = true;
    if (stop_reason.empty()) stop_reason = "max_time " + options.raw.max_time() + " reached";
  }
  agree_stop();
}

// Lightning's sanity check: a few validation batches before training, their metrics dropped.
void TrainerImpl::sanity_check() {
  const int64_t wanted = options.raw.num_sanity_val_steps();
  if (val == nullptr || wanted == 0) return;
  const int64_t limit = limited_batches(options.raw.limit_val_batches(), val->num_batches(), "limit_val_batches");
  evaluate(*val, Stage::kValidate, wanted < 0 ? limit : std::min(wanted, limit));
}

void TrainerImpl::end_epoch() {
  module->on_train_epoch_end();
  const auto values = metrics.take_epoch(Stage::kTrain, world.comm());
  publish(values, true);
  if (val != nullptr && (epoch + 1) % options.raw.check_val_every_n_epoch() == 0) validate_now();
  if (scheduler.scheduler && scheduler.interval == SchedulerInterval::kEpoch && (epoch + 1) % scheduler.frequency == 0)
    scheduler.scheduler->step();
  // From here a checkpoint resumes at the start of the next epoch.
  epoch += 1;
  train->set_epoch(epoch);
  samples_in_epoch = 0;
  begin_segment();
  each_callback([&](Callback& c) { c.on_train_epoch_end(owner, *module); });
  agree_stop();
}

void TrainerImpl::validate_now() {
  const auto values = evaluate(*val, Stage::kValidate, evaluation_batches(*val, Stage::kValidate));
  publish(values, true);
  each_callback([&](Callback& c) { c.on_validation_end(owner, *module); });
  agree_stop();
}

int64_t TrainerImpl::evaluation_batches(DataLoader& data, Stage which) const {
  if (which == Stage::kValidate)
    return limited_batches(options.raw.limit_val_batches(), data.num_batches(), "limit_val_batches");
  const int64_t fast = options.raw.fast_dev_run();
  return fast > 0 ? std::min(fast, data.num_batches()) : data.num_batches();
}

std::map<std::string, double> TrainerImpl::evaluate(DataLoader& data, Stage which, int64_t batches) {
  const Stage previous = stage;
  stage = which;
  const bool was_training = module->model().is_training();
  module->model().train(false);
  torch::NoGradGuard no_grad;
  if (which == Stage::kValidate) module->on_validation_epoch_start();
  if (batches > 0)
    data.for_each(0, [&](int64_t index, Batch& batch) {
      batch = on_device(std::move(batch), world.device());
      batch_size = batch.data.size(0);
      auto autocast = strategy->autocast();
      strategy->evaluation_step(*module, batch, index, which);
      return index + 1 < batches;
    });
  which == Stage::kValidate ? module->on_validation_epoch_end() : module->on_test_epoch_end();
  auto values = metrics.take_epoch(which, world.comm());
  module->model().train(was_training);
  stage = previous;
  return values;
}

std::map<std::string, double> TrainerImpl::run_evaluation(TrainingModule& target, DataLoader& data, Stage which) {
  attach(target);
  const auto [shares, share] = strategy->data_split(world);
  data.distribute(shares, share, true, 0);
  const auto values = evaluate(data, which, evaluation_batches(data, which));
  publish(values, true);
  if (world.is_main())
    for (auto& logger : loggers) logger->flush();
  return values;
}

void TrainerImpl::publish(const std::map<std::string, double>& values, bool to_loggers) {
  for (const auto& [key, value] : values) callback_metrics[key] = value;
  if (!to_loggers || values.empty() || !world.is_main()) return;
  std::map<std::string, double> logged;
  for (const auto& [key, value] : values)
    if (metrics.to_logger(key)) logged[key] = value;
  if (logged.empty()) return;
  logged["epoch"] = static_cast<double>(epoch);
  for (auto& logger : loggers) logger->log_metrics(logged, step);
}

bool TrainerImpl::agree_stop() {
  const auto wishes = reduce_metrics({torch::tensor(int64_t(stop_wish ? 1 : 0))}, &world.comm());
  if (wishes[0].item<int64_t>() > 0) stop = true;
  return stop;
}

}  // namespace cohort::detail
