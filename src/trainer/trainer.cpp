// cohort::Trainer's setup (see trainer_impl.h): options checked, workers started when needed, the
// world joined, the default callbacks and logger added (none of them, and no ModelCheckpoint or logger
// at all, under fast_dev_run), the strategy built for the module, a DataModule's data prepared.
#include <ATen/Context.h>
#include <torch/cuda.h>
#include <torch/utils.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "cohort/error.h"
#include "cohort/progress.h"
#include "cohort/sync_batchnorm.h"
#include "comm/op_util.h"
#include "core/check.h"
#include "trainer/replica_mesh.h"
#include "trainer/trainer_impl.h"
#include "world/arrival_check.h"

namespace cohort {
namespace detail {
namespace {

const ResolvedOptions& checked(const ResolvedOptions& options) {
  const LaunchEnv env = detect_launch_env(current_env());
  COHORT_CHECK_KIND(kInvalidArgument, options.strategy != StrategyKind::kDp || env.size == 1,
                    "TrainerOptions.strategy \"dp\" runs its "
                    "replicas as threads of one process, but ",
                    env.launcher, " started ", env.size,
                    " processes: start "
                    "one process (no launcher, or one task), or use strategy ddp (one process per device)");
  check_launch_matches(env, options.processes, options.raw.num_nodes());
  return options;
}

World join_world(const ResolvedOptions& options, SelfLauncher& launcher) {
  COHORT_CHECK_KIND(kInvalidArgument,
                    !cohort::is_initialized() || cohort::current_world().size() > 1 || options.processes <= 1,
                    "TrainerOptions.devices is ", options.processes,
                    " but cohort::init() already made a world of one: "
                    "make the Trainer before calling cohort::init(), or start the program under a launcher");
  // A worker this process started that ends before it arrives never will: init stops waiting then.
  std::optional<ScopedArrivalCheck> check;
  if (launcher.active()) check.emplace([&launcher] { return launcher.failure(std::chrono::milliseconds(0)); });
  World world = cohort::init(InitOptions().backend(options.cuda ? Backend::kNccl : Backend::kGloo));
  // And once it has arrived, its end aborts this rank's Comm, which would wait for it until the timeout
  // when its process left with a clean goodbye (an error it printed itself, exit() in its own code).
  if (launcher.active())
    launcher.on_failure([comm = std::weak_ptr<Comm>(world.comm_ptr())](const std::string& failure) {
      if (auto alive = comm.lock()) alive->abort(failure);
    });
  return world;
}

}  // namespace

TrainerImpl::TrainerImpl(Trainer& trainer, const TrainerOptions& raw)
    : owner(trainer),
      options(resolve_options(raw, torch::cuda::is_available())),
      launcher(detect_launch_env(current_env()), checked(options).processes),
      world(join_world(options, launcher)) {
  if (options.raw.deterministic()) at::globalContext().setDeterministicAlgorithms(true, false);
  if (options.raw.seed() >= 0) torch::manual_seed(static_cast<uint64_t>(options.raw.seed()));
}

TrainerImpl::~TrainerImpl() {
  if (module != nullptr) module->attach(nullptr);
}

// The scheduler refers to the strategy's optimizer, the strategy to the module: both go first.
void TrainerImpl::detach_module() {
  scheduler = {};
  strategy.reset();
  module = nullptr;
}

torch::Tensor TrainerImpl::forward(const torch::Tensor& input) {
  COHORT_CHECK_KIND(kInvalidArgument, strategy != nullptr,
                    "TrainingModule::forward in configure_model: the Trainer's strategy is made after it");
  return strategy->forward(input);
}

void TrainerImpl::log(const std::string& name, const torch::Tensor& value, const LogOptions& log_options) {
  const double number = value.detach().to(torch::kCPU, torch::kFloat64).item<double>();
  if (strategy && strategy->log_from_replica(name, number, log_options)) return;  // dp combines them
  metrics.log(name, number, log_options, stage, batch_size);
}

// The strategy is made once per module (its optimizer state lives in it), on this rank's device.
void TrainerImpl::attach(TrainingModule& target) {
  if (module == &target) return;
  COHORT_CHECK_KIND(kInvalidArgument, module == nullptr,
                    "this Trainer already trains another TrainingModule: use one Trainer per module");
  resolve_zero_config(options, world);
  make_mesh();
  target.attach(this);  // configure_model may ask for the device mesh
  try {
    configure_model(options, target, world, replicas);
    target.to(world.device());
    if (options.raw.sync_batchnorm())  // before the strategy sees the parameters, as Lightning does
      convert_sync_batchnorm(target.model(), ConvertSyncBatchNormOptions().comm(world.comm_ptr()));
    module = &target;
  } catch (...) {
    target.attach(nullptr);
    throw;
  }
  strategy = make_strategy(options, target, world, mesh, replicas);
  scheduler = target.configure_lr_scheduler(strategy->optimizer());
  COHORT_CHECK_KIND(kInvalidArgument, scheduler.frequency >= 1, "configure_lr_scheduler: frequency ",
                    scheduler.frequency, " is not accepted: expected an integer >= 1");
}

// Tensor-parallel groups of consecutive ranks (the last axis varies fastest): one node's when the
// size divides its ranks, where the per-layer collectives are cheapest. Collective, once per Trainer.
// Then HSDP's {replicate, shard} mesh over the data-parallel ranks (replica_mesh.h).
void TrainerImpl::make_mesh() {
  const int64_t tp = options.raw.tensor_parallel_size();
  if (tp > 1 && mesh == nullptr) {
    COHORT_CHECK_KIND(kInvalidArgument, world.size() % tp == 0, "TrainerOptions.tensor_parallel_size ", tp,
                      " does not divide the world's ", world.size(), " rank(s)");
    mesh = std::make_shared<Mesh>(world.comm(),
                                  std::vector<MeshDim>{{"data_parallel", world.size() / static_cast<int>(tp)},
                                                       {"tensor_parallel", static_cast<int>(tp)}});
  }
  replicas = make_replica_mesh(options, world, mesh);
}

void TrainerImpl::add_default_callbacks() {
  if (options.raw.fast_dev_run() > 0) {  // a smoke test leaves no state behind (Lightning's fast_dev_run)
    callbacks.erase(std::remove_if(callbacks.begin(), callbacks.end(),
                                   [](const auto& c) { return dynamic_cast<ModelCheckpoint*>(c.get()) != nullptr; }),
                    callbacks.end());
    loggers.clear();
  }
  bool has_checkpoint = false, has_bar = false;
  for (const auto& callback : callbacks) {
    has_checkpoint |= dynamic_cast<ModelCheckpoint*>(callback.get()) != nullptr;
    has_bar |= dynamic_cast<ProgressBarCallback*>(callback.get()) != nullptr;
  }
  if (options.raw.enable_checkpointing() && !has_checkpoint) callbacks.push_back(std::make_shared<ModelCheckpoint>());
  if (options.raw.enable_progress_bar() && !has_bar) callbacks.push_back(std::make_shared<ProgressBarCallback>());
  if (options.raw.logger() && loggers.empty()) loggers.push_back(std::make_shared<CSVLogger>(owner.root_dir()));
}

void TrainerImpl::set_up(DataModule& data, const std::string& stage_name) {
  if (world.local_rank() == 0) data.prepare_data();
  world.comm().barrier();  // the node's other ranks read what its local rank 0 prepared
  data.setup(stage_name);
}

std::shared_ptr<DataLoader> loader_of(std::shared_ptr<DataLoader> loader, const std::string& what) {
  COHORT_CHECK_KIND(kInvalidArgument, loader != nullptr, "the DataModule's ", what,
                    "() returned no loader: override it to return one");
  return loader;
}

}  // namespace detail

Trainer::Trainer(TrainerOptions options) : impl_(std::make_unique<detail::TrainerImpl>(*this, options)) {}
Trainer::~Trainer() = default;

Trainer& Trainer::add_callback(std::shared_ptr<Callback> callback) {
  COHORT_CHECK_KIND(kInvalidArgument, callback != nullptr, "add_callback: the callback is null");
  impl_->callbacks.push_back(std::move(callback));
  return *this;
}

Trainer& Trainer::add_logger(std::shared_ptr<Logger> logger) {
  COHORT_CHECK_KIND(kInvalidArgument, logger != nullptr, "add_logger: the logger is null");
  impl_->loggers.push_back(std::move(logger));
  return *this;
}

void Trainer::fit(TrainingModule& module, DataLoader& train, const FitOptions& options) {
  try {
    impl_->fit(module, train, options);
  } catch (const std::exception& e) {
    // This rank's failure ends the job: the other ranks learn it now, not at their timeout (its
    // process may leave with a clean goodbye). Not for bad options or input (kInvalidArgument), which
    // every rank meets alike before training and a program may correct and fit again.
    const auto* error = dynamic_cast<const Error*>(&e);
    if (impl_->world.size() > 1 && (error == nullptr || error->kind() != ErrorKind::kInvalidArgument))
      impl_->world.comm().abort(detail::first_line(e.what()));
    // A worker this process started failed first: its message is the job's error, unless it is this
    // rank's own (a refusal every rank meets), which is then said once, as this rank's.
    if (impl_->launcher.active()) {
      const std::string failure = impl_->launcher.failure(detail::SelfLauncher::kFailureWait);
      if (!failure.empty() && !detail::same_refusal(failure, e.what())) throw Error(failure, ErrorKind::kAborted);
    }
    throw;
  }
}

void Trainer::fit(TrainingModule& module, DataModule& data, const FitOptions& options) {
  COHORT_CHECK_KIND(kInvalidArgument, options.val() == nullptr,
                    "Trainer::fit with a DataModule: FitOptions.val is given too; the "
                    "DataModule's val_dataloader() gives the validation data");
  impl_->set_up(data, "fit");
  auto train = detail::loader_of(data.train_dataloader(), "train_dataloader");
  auto val = data.val_dataloader();
  impl_->data_module_loaders = {train, val};
  fit(module, *train, FitOptions(options).val(val.get()));
}

std::map<std::string, double> Trainer::validate(TrainingModule& module, DataModule& data) {
  impl_->set_up(data, "validate");
  auto loader = detail::loader_of(data.val_dataloader(), "val_dataloader");
  return validate(module, *loader);
}

std::map<std::string, double> Trainer::test(TrainingModule& module, DataModule& data) {
  impl_->set_up(data, "test");
  auto loader = detail::loader_of(data.test_dataloader(), "test_dataloader");
  return test(module, *loader);
}

std::map<std::string, double> Trainer::validate(TrainingModule& module, DataLoader& data) {
  return impl_->run_evaluation(module, data, detail::Stage::kValidate);
}
std::map<std::string, double> Trainer::test(TrainingModule& module, DataLoader& data) {
  return impl_->run_evaluation(module, data, detail::Stage::kTest);
}

const World& Trainer::world() const { return impl_->world; }
const TrainerOptions& Trainer::options() const { return impl_->options.raw; }
std::string Trainer::describe() const {
  const std::string what = impl_->strategy ? impl_->strategy->describe() : detail::strategy_name(impl_->options);
  return what + ", " + detail::precision_name(impl_->options.precision);
}
int64_t Trainer::current_epoch() const { return impl_->epoch; }
int64_t Trainer::global_step() const { return impl_->step; }
const std::map<std::string, double>& Trainer::callback_metrics() const { return impl_->callback_metrics; }

std::map<std::string, double> Trainer::progress_bar_metrics() const {
  std::map<std::string, double> out;
  for (const auto& [key, value] : impl_->callback_metrics)
    if (impl_->metrics.prog_bar().count(key)) out[key] = value;
  if (impl_->loss_samples > 0) out["loss"] = impl_->loss_sum / static_cast<double>(impl_->loss_samples);
  return out;
}

int64_t Trainer::num_training_batches() const { return impl_->train ? impl_->train_batches : 0; }
int64_t Trainer::samples_in_epoch() const { return impl_->samples_in_epoch; }
int64_t Trainer::batches_done_in_epoch() const {
  if (impl_->train == nullptr) return 0;
  // Only an epoch's last batch may be short, and the count restarts after it: rounding up is exact.
  const int64_t global = impl_->train->options().batch_size() * impl_->strategy->data_split(impl_->world).first;
  return (impl_->samples_in_epoch + global - 1) / global;
}

void Trainer::request_stop(const std::string& reason) {
  impl_->stop_wish = true;
  if (impl_->stop_reason.empty()) impl_->stop_reason = reason;
}
bool Trainer::should_stop() const { return impl_->stop; }

double Trainer::lr() const {
  COHORT_CHECK_KIND(kInvalidArgument, impl_->strategy != nullptr, "Trainer::lr: no module was fitted yet");
  return impl_->strategy->lr();
}
torch::optim::Optimizer& Trainer::optimizer() {
  COHORT_CHECK_KIND(kInvalidArgument, impl_->strategy != nullptr, "Trainer::optimizer: no module was fitted yet");
  return impl_->strategy->optimizer();
}
std::string Trainer::optimizer_name() const {
  COHORT_CHECK_KIND(kInvalidArgument, impl_->strategy != nullptr, "Trainer::optimizer_name: no module was fitted yet");
  return detail::optimizer_name(impl_->strategy->optimizer());
}

std::string Trainer::save_checkpoint(const std::string& dir, int keep_last, bool async) {
  return impl_->checkpoints.save(dir, keep_last, async);
}

void Trainer::for_each_full_parameter(const ParameterVisitor& visit) {
  COHORT_CHECK_KIND(kInvalidArgument, impl_->strategy != nullptr,
                    "Trainer::for_each_full_parameter: no module was fitted yet");
  impl_->strategy->for_each_full_parameter(visit);
}

torch::Tensor Trainer::run_forward(const std::function<torch::Tensor()>& fn) {
  COHORT_CHECK_KIND(kInvalidArgument, impl_->strategy != nullptr, "Trainer::run_forward: no module was fitted yet");
  torch::NoGradGuard no_grad;
  return impl_->strategy->run_forward(fn);
}

MemoryReport Trainer::memory_report() const {
  COHORT_CHECK_KIND(kInvalidArgument, impl_->strategy != nullptr, "Trainer::memory_report: no module was fitted yet");
  return impl_->strategy->memory_report();
}

int Trainer::shard_ranks() const {
  COHORT_CHECK_KIND(kInvalidArgument, impl_->strategy != nullptr, "Trainer::shard_ranks: no module was fitted yet");
  return impl_->strategy->zero_stage() <= 0 ? 1 : impl_->strategy->shard_ranks(impl_->world);
}

MemoryReport Trainer::planned_memory() const {
  COHORT_CHECK_KIND(kInvalidArgument, impl_->strategy != nullptr, "Trainer::planned_memory: no module was fitted yet");
  return detail::planned_memory(*impl_->strategy, impl_->world);
}

std::vector<std::pair<std::string, torch::Tensor>> Trainer::full_parameters() {
  COHORT_CHECK_KIND(kInvalidArgument, impl_->strategy != nullptr, "Trainer::full_parameters: no module was fitted yet");
  return impl_->strategy->full_parameters();
}

std::string Trainer::root_dir() const {
  const std::string& root = impl_->options.raw.default_root_dir();
  return root.empty() ? std::filesystem::current_path().string() : root;
}
const std::vector<std::shared_ptr<Logger>>& Trainer::loggers() const { return impl_->loggers; }

}  // namespace cohort
