// The Trainer's state and loop (cohort/trainer.h is the public face). trainer.cpp sets up the world,
// the strategy and the defaults; fit_loop.cpp runs epochs, batches and evaluation; its checkpoints
// (saves and resumes) are the CheckpointConnector's (checkpoint_connector.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cohort/mesh.h"
#include "cohort/trainer.h"
#include "trainer/checkpoint_connector.h"
#include "trainer/metrics.h"
#include "trainer/options.h"
#include "trainer/self_launch.h"
#include "trainer/strategy.h"

namespace cohort::detail {

class TrainerImpl : public ModuleLink {
 public:
  TrainerImpl(Trainer& owner, const TrainerOptions& options);
  ~TrainerImpl() override;

  // ModuleLink: what the running module reaches.
  torch::Tensor forward(const torch::Tensor& input) override;
  void log(const std::string& name, const torch::Tensor& value, const LogOptions& options) override;
  int64_t current_epoch() const override { return epoch; }
  int64_t global_step() const override { return step; }
  void detach_module() override;
  const Mesh* device_mesh() const override { return mesh.get(); }
  bool runs_pipeline_layers() const override { return options.strategy == StrategyKind::kPipeline; }

  void fit(TrainingModule& module, DataLoader& train_data, const FitOptions& fit_options);
  std::map<std::string, double> run_evaluation(TrainingModule& module, DataLoader& data, Stage stage);

  // fit_loop.cpp
  bool run_epoch();  // false: training is over
  /// `replayed`: uneven_inputs, this rank's share has ended; its last batch runs again with weight zero.
  bool train_batch(int64_t index, Batch& batch, bool replayed = false);
  bool replay_steps(int64_t next);  // uneven_inputs: the steps after this rank's share, to train_batches
  void after_optimizer_step(int64_t index);
  std::map<std::string, double> evaluate(DataLoader& data, Stage stage, int64_t batches);
  int64_t evaluation_batches(DataLoader& data, Stage stage) const;  // limit_val_batches, fast_dev_run
  void sanity_check();
  void check_max_time();
  void validate_now();
  void end_epoch();
  bool finished() const;
  void publish(const std::map<std::string, double>& values, bool to_loggers);
  bool agree_stop();

  // trainer.cpp
  void attach(TrainingModule& module);
  void make_mesh();
  /// prepare_data (local rank 0, the others waiting), then setup(stage) on every rank.
  void set_up(DataModule& data, const std::string& stage);
  void add_default_callbacks();
  template <typename Hook>
  void each_callback(Hook hook) {
    for (auto& callback : callbacks) hook(*callback);
  }

  Trainer& owner;
  ResolvedOptions options;
  SelfLauncher launcher;  // before the world: the other local workers, when this process starts them
  World world;
  std::vector<std::shared_ptr<Callback>> callbacks;
  std::vector<std::shared_ptr<Logger>> loggers;

  TrainingModule* module = nullptr;
  std::shared_ptr<Mesh> mesh;      // (data_parallel, tensor_parallel) with tensor_parallel_size > 1
  std::shared_ptr<Mesh> replicas;  // HSDP: (replicate, shard) over the data-parallel ranks
  std::unique_ptr<Strategy> strategy;
  SchedulerSetup scheduler;
  DataLoader* train = nullptr;
  DataLoader* val = nullptr;
  std::vector<std::shared_ptr<DataLoader>> data_module_loaders;  // kept while train / val point into them

  Stage stage = Stage::kTrain;
  int64_t batch_size = 0;        // of the batch being run (weights its logged values)
  int64_t epoch = 0;             // epochs finished
  int64_t step = 0;              // optimizer steps taken
  int64_t samples_in_epoch = 0;  // consumed by all ranks in this epoch (the resume position)
  // Where the stretch of steps at one global batch began (an epoch's start, a resume): saved, so that
  // a checkpoint's sampler position is checked against its step (checkpoint/position_values.h).
  struct Segment {
    int64_t epoch = 0, step = 0, samples = 0;
  } segment;
  void begin_segment() { segment = {epoch, step, samples_in_epoch}; }
  struct Resumed {  // the checkpoint this fit resumed from (messages)
    std::string path;
    double lr = 0;
    bool epoch_done = false;  // its position is its epoch's last batch: the next epoch comes first
  } resumed;
  std::string pretrained;  // the pretrained weights this fit started from, if any (messages)
  int64_t train_batches =
      0;  // steps per epoch, after limit_train_batches / fast_dev_run (uneven_inputs: the largest share's)
  int64_t own_batches = 0;                            // of this rank's share (train_batches unless uneven_inputs)
  Batch last_batch;                                   // uneven_inputs: this rank's last batch of the epoch, replayed
  int64_t last_batch_index = -1;                      // of the batch trained last (messages)
  bool mid_accumulation = false;                      // a backward ran since the last optimizer step
  std::chrono::steady_clock::time_point fit_started;  // max_time counts from here
  int64_t val_every = 0;                              // validate every this many batches in an epoch (0: at its end)
  double loss_sum = 0;                                // this rank's training loss x samples in this epoch
  int64_t loss_samples = 0;
  MetricStore metrics;
  std::map<std::string, double> callback_metrics;
  bool stop_wish = false;  // this rank's request_stop
  bool stop = false;       // agreed by all ranks
  std::string stop_reason;
  CheckpointConnector checkpoints{*this};
};

}  // namespace cohort::detail
