// cohort::Trainer in one process: every bad option named in one line; the launcher's world checked
// against devices x num_nodes; the loader's batches the same with and without worker threads;
// EarlyStopping and top-k checkpoints deciding on scripted metrics; metrics.csv in Lightning's
// layout; TensorBoard event files whose TFRecord framing and CRCs are checked here and, when the
// tensorboard package is installed, read back by TensorBoard's own reader; strategy "dp" (replicas on
// threads) ending where "single" does with the whole batch; devices beyond the node's cores or
// memory and an unwritable checkpoint directory refused before anything starts.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <fstream>
#include <sstream>

#include "cohort/checkpoint.h"
#include "cohort/progress.h"
#include "cohort/trainer.h"
#include "support/errors.h"
#include "support/python.h"
#include "support/tiny_trainer_module.h"
#include "trainer/options.h"
#include "trainer/replica_workers.h"
#include "trainer/self_launch.h"
#include "world/node_room.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace trainer_test {

using ::testing::HasSubstr;
using namespace cohort::testing;

namespace {

std::string option_error(const cohort::TrainerOptions& options, bool cuda_available = false) {
  try {
    cohort::detail::resolve_options(options, cuda_available);
  } catch (const cohort::Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(TrainerOptions, EveryBadOptionIsNamedWithItsValueAndTheAcceptedOnes) {
  using O = cohort::TrainerOptions;
  EXPECT_EQ(option_error(O().accelerator("tpu")),
            "TrainerOptions.accelerator \"tpu\" is not accepted: expected one of cpu, cuda, gpu, auto");
  EXPECT_EQ(option_error(O().accelerator("cuda")),
            "TrainerOptions.accelerator \"cuda\" asks for a GPU, but LibTorch sees none (no CUDA build or no visible "
            "device): use \"cpu\" or \"auto\"");
  EXPECT_EQ(option_error(O().devices("two")),
            "TrainerOptions.devices \"two\" is not accepted: expected a number of devices from 1 to 4096, or auto");
  EXPECT_EQ(option_error(O().devices(0)),
            "TrainerOptions.devices \"0\" is not accepted: expected a number of devices from 1 to 4096, or auto");
  EXPECT_EQ(option_error(O().strategy("fsdp2")), "TrainerOptions.strategy \"fsdp2\" is not accepted: expected one of "
                                                 "ddp, dp, fsdp, zero1, zero2, zero3, deepspeed, pipeline, single, auto");
  EXPECT_EQ(option_error(O().strategy("deepspeed")),
            "TrainerOptions.strategy \"deepspeed\" needs TrainerOptions.deepspeed_config: the path of a "
            "ds_config.json (or use zero1, zero2, zero3)");
  EXPECT_EQ(option_error(O().deepspeed_config("ds.json")),
            "TrainerOptions.deepspeed_config \"ds.json\" is given, but TrainerOptions.strategy is \"auto\": a "
            "ds_config is read by strategy deepspeed (and zero1-3, whose stage wins)");
  EXPECT_EQ(option_error(O().precision("8-mixed")), "TrainerOptions.precision \"8-mixed\" is not accepted: expected "
                                                    "one of 32-true, bf16-mixed, 16-mixed (or 32, bf16, 16)");
  EXPECT_EQ(option_error(O().precision("16")),
            "TrainerOptions.precision \"16\" needs a GPU (LibTorch has no float16 autocast or convolution on the "
            "CPU): use \"bf16-mixed\" on the CPU");
  EXPECT_EQ(option_error(O().max_epochs(-2)),
            "TrainerOptions.max_epochs \"-2\" is not accepted: expected an integer >= 0, or -1 for no limit");
  EXPECT_EQ(option_error(O().max_steps(-5)),
            "TrainerOptions.max_steps \"-5\" is not accepted: expected an integer >= 0, or -1 for no limit");
  EXPECT_EQ(option_error(O().max_epochs(-1)),
            "TrainerOptions.max_epochs -1 and max_steps -1: training would never end; set one of them");
  EXPECT_EQ(option_error(O().accumulate_grad_batches(0)),
            "TrainerOptions.accumulate_grad_batches \"0\" is not accepted: expected an integer >= 1");
  EXPECT_EQ(option_error(O().gradient_clip_val(-1)),
            "TrainerOptions.gradient_clip_val \"-1\" is not accepted: expected a finite number >= 0 (0: no clipping)");
  EXPECT_EQ(option_error(O().val_check_interval(2.5)),
            "TrainerOptions.val_check_interval \"2.5\" is not accepted: expected a fraction of the epoch in (0, 1] or "
            "a whole number of batches >= 1");
  EXPECT_EQ(option_error(O().check_val_every_n_epoch(0)),
            "TrainerOptions.check_val_every_n_epoch \"0\" is not accepted: expected an integer >= 1");
  EXPECT_EQ(option_error(O().log_every_n_steps(0)),
            "TrainerOptions.log_every_n_steps \"0\" is not accepted: expected an integer >= 1");
  EXPECT_EQ(option_error(O().num_nodes(0)), "TrainerOptions.num_nodes \"0\" is not accepted: expected an integer >= 1");
  EXPECT_EQ(option_error(O().seed(-3)), "TrainerOptions.seed \"-3\" is not accepted: expected an integer >= 0, or -1 "
                                        "to leave the generator as it is");
  EXPECT_EQ(option_error(O().strategy("single").devices(2)),
            "TrainerOptions.strategy \"single\" runs on one device, but devices is 2: use devices 1, or strategy ddp");
  EXPECT_EQ(option_error(O().strategy("dp").num_nodes(2)),
            "TrainerOptions.num_nodes \"2\" is not accepted: expected 1 with strategy dp (its replicas are threads of "
            "one process; use strategy ddp across nodes)");
  EXPECT_EQ(option_error(O().strategy("dp").precision("16-mixed").accelerator("cuda"), /*cuda_available=*/true),
            "TrainerOptions.precision \"16-mixed\" with strategy \"dp\": float16 needs loss scaling, which the ZeRO "
            "engine does; use strategy zero1/zero2/zero3 or precision bf16-mixed");
  EXPECT_EQ(option_error(O().strategy("dp").deepspeed_config("ds.json")),
            "TrainerOptions.deepspeed_config \"ds.json\" is given, but TrainerOptions.strategy is \"dp\": a "
            "ds_config is read by strategy deepspeed (and zero1-3, whose stage wins)");
  EXPECT_EQ(option_error(O().strategy("pipeline").precision("bf16-mixed")),
            "TrainerOptions.precision \"bf16-mixed\" with strategy \"pipeline\": the pipeline trains in 32-true, or in "
            "bf16-mixed with pipeline_zero_stage 1-3 (the engines' bf16 parameters and fp32 masters)");
  EXPECT_EQ(option_error(O().pipeline_stages(2)), "TrainerOptions.pipeline_stages \"2\" is not accepted: expected 0 "
                                                  "unless strategy is \"pipeline\" (strategy is \"auto\")");
  EXPECT_EQ(option_error(O().strategy("pipeline").pipeline_stages(-1)),
            "TrainerOptions.pipeline_stages \"-1\" is not accepted: expected an integer >= 1 (stages per pipeline), "
            "or 0 for every rank");
  EXPECT_EQ(option_error(O().strategy("pipeline").pipeline_chunks(0)),
            "TrainerOptions.pipeline_chunks \"0\" is not accepted: expected an integer >= 1 (microbatches per batch)");
  EXPECT_EQ(option_error(O().strategy("pipeline").pipeline_schedule("interleaved")),
            "TrainerOptions.pipeline_schedule \"interleaved\" is not accepted: expected one of 1f1b, gpipe");
  EXPECT_EQ(option_error(O().strategy("pipeline").pipeline_zero_stage(4)),
            "TrainerOptions.pipeline_zero_stage \"4\" is not accepted: expected 0 (DDP per stage) to 3 (FSDP per "
            "stage)");
  EXPECT_EQ(option_error(O().strategy("fsdp").pipeline_zero_stage(3)),
            "TrainerOptions.pipeline_zero_stage \"3\" is not accepted: expected 0 unless strategy is \"pipeline\" "
            "(strategy is \"fsdp\")");
  EXPECT_EQ(option_error(O().strategy("pipeline").pipeline_zero_stage(3).accumulate_grad_batches(2)),
            "TrainerOptions.accumulate_grad_batches 2 with pipeline_zero_stage 3: the pipeline's microbatches are the "
            "engines' accumulation (pipeline_chunks); use 1");
  EXPECT_EQ(option_error(O().strategy("pipeline").pipeline_zero_stage(1).gradient_clip_val(1)),
            "TrainerOptions.gradient_clip_val 1 with pipeline_zero_stage 1: each stage's ZeRO engine sees that "
            "stage's gradients only, not the whole model's norm; use 0, or pipeline_zero_stage 0 (DDP per stage "
            "clips by the whole norm)");
}

TEST(TrainerOptions, DdpCommHookOptionsAreCheckedAndBelongToStrategyDdp) {
  using O = cohort::TrainerOptions;
  EXPECT_EQ(option_error(O().ddp_comm_hook("fp8")),
            "TrainerOptions.ddp_comm_hook \"fp8\" is not accepted: expected one of fp16, bf16, powersgd, "
            "batched_powersgd, or empty for none");
  EXPECT_EQ(option_error(O().ddp_comm_hook("powersgd").powersgd_rank(0)),
            "TrainerOptions.powersgd_rank \"0\" is not accepted: expected an integer >= 1 (PowerSGD's "
            "matrix_approximation_rank)");
  EXPECT_EQ(option_error(O().ddp_comm_hook("powersgd").powersgd_start_iteration(-1)),
            "TrainerOptions.powersgd_start_iteration \"-1\" is not accepted: expected an integer >= 0 (steps of "
            "plain averaging before PowerSGD starts)");
  EXPECT_EQ(option_error(O().strategy("zero2").ddp_comm_hook("fp16")),
            "TrainerOptions.ddp_comm_hook \"fp16\" is not accepted: expected empty with strategy \"zero2\" (comm "
            "hooks apply to strategy ddp; ZeRO compresses with communication_data_type in its deepspeed_config)");
  EXPECT_EQ(option_error(O().ddp_comm_hook("bf16")), "no error");
  EXPECT_EQ(option_error(O().strategy("ddp").ddp_comm_hook("powersgd").powersgd_rank(2).powersgd_start_iteration(0)),
            "no error");
  // PowerSGD's options without a PowerSGD hook were silently ignored (issue 39).
  EXPECT_EQ(option_error(O().powersgd_rank(4)),
            "TrainerOptions.powersgd_rank \"4\" is not accepted: expected 1, its default unless ddp_comm_hook is "
            "powersgd or batched_powersgd (ddp_comm_hook is \"\")");
  EXPECT_EQ(option_error(O().ddp_comm_hook("fp16").powersgd_start_iteration(10)),
            "TrainerOptions.powersgd_start_iteration \"10\" is not accepted: expected 1000, its default unless "
            "ddp_comm_hook is powersgd or batched_powersgd (ddp_comm_hook is \"fp16\")");
  EXPECT_EQ(kind_of([] { cohort::detail::resolve_options(O().powersgd_rank(4), false); }),
            "kind=invalid argument ranks=");
  EXPECT_EQ(option_error(O().ddp_comm_hook("batched_powersgd").powersgd_rank(4).powersgd_start_iteration(10)),
            "no error");
}

// Lightning's DeepSpeedStrategy offload options: ZeRO strategies only, nvme with a path.
TEST(TrainerOptions, OffloadOptionsBelongToTheZeroStrategies) {
  using O = cohort::TrainerOptions;
  EXPECT_EQ(option_error(O().strategy("ddp").offload_optimizer(true)),
            "TrainerOptions.offload_optimizer is for the ZeRO strategies (zero1, zero2, zero3, fsdp, deepspeed), not "
            "\"ddp\"");
  EXPECT_EQ(option_error(O().strategy("zero2").offload_optimizer(true).offload_optimizer_device("nvme")),
            "TrainerOptions.offload_optimizer_device \"nvme\" needs TrainerOptions.nvme_path: a directory on a local "
            "disk for the swap files");
  EXPECT_EQ(option_error(O().strategy("zero2").offload_optimizer_device("disk")),
            "TrainerOptions.offload_optimizer_device \"disk\" is not accepted: expected cpu or nvme");
  EXPECT_EQ(option_error(O().strategy("fsdp").optimizer_buffer_count(0)),
            "TrainerOptions.optimizer_buffer_count \"0\" is not accepted: expected an integer >= 1");
  EXPECT_EQ(option_error(O().strategy("fsdp").offload_optimizer(true).offload_optimizer_device("nvme").nvme_path("/x")),
            "no error");
  // Lightning's parameter offload: stage 3 only.
  EXPECT_EQ(option_error(O().strategy("zero2").offload_parameters(true)),
            "TrainerOptions.offload_parameters is for ZeRO stage 3, where parameters are sharded (zero3, fsdp, "
            "deepspeed at stage 3), not \"zero2\"");
  EXPECT_EQ(option_error(O().strategy("zero3").offload_parameters(true).offload_params_device("nvme")),
            "TrainerOptions.offload_params_device \"nvme\" needs TrainerOptions.nvme_path: a directory on a local "
            "disk for the swap files");
  EXPECT_EQ(option_error(O().strategy("zero3").offload_params_device("ssd")),
            "TrainerOptions.offload_params_device \"ssd\" is not accepted: expected cpu or nvme");
  EXPECT_EQ(option_error(O().strategy("fsdp").params_buffer_size(0)),
            "TrainerOptions.params_buffer_size \"0\" is not accepted: expected an integer >= 1 (elements)");
  EXPECT_EQ(option_error(O().strategy("fsdp").max_in_cpu(-1)),
            "TrainerOptions.max_in_cpu \"-1\" is not accepted: expected an integer >= 0 (elements)");
  EXPECT_EQ(option_error(O().strategy("fsdp").offload_parameters(true).offload_params_device("nvme").nvme_path("/x")),
            "no error");
}

TEST(TrainerOptions, CallbackAndLoaderOptionsAreNamedToo) {
  EXPECT_EQ(error_of([] { cohort::ModelCheckpoint(cohort::ModelCheckpointOptions().mode("best")); }),
            "ModelCheckpointOptions.mode \"best\" is not accepted: expected min or max");
  EXPECT_EQ(error_of([] { cohort::ModelCheckpoint(cohort::ModelCheckpointOptions().save_top_k(-2)); }),
            "ModelCheckpointOptions.save_top_k -2 is not accepted: expected -1 (all), 0 (none) or a positive number");
  EXPECT_EQ(error_of([] { cohort::EarlyStopping(cohort::EarlyStoppingOptions()); }),
            "EarlyStoppingOptions.monitor is empty: name a logged metric");
  EXPECT_EQ(error_of([] { cohort::EarlyStopping(cohort::EarlyStoppingOptions().monitor("loss").patience(-1)); }),
            "EarlyStoppingOptions.patience -1 is not accepted: expected an integer >= 0");
  EXPECT_EQ(error_of([] { cohort::LearningRateMonitor("batch"); }),
            "LearningRateMonitor logging_interval \"batch\" is not accepted: expected step or epoch");
  EXPECT_EQ(error_of([] { cohort::DataLoader(tiny_data(4), cohort::LoaderOptions().batch_size(0)); }),
            "LoaderOptions.batch_size 0 is not accepted: expected an integer >= 1");
  EXPECT_EQ(error_of([] { cohort::DataLoader(tiny_data(4), cohort::LoaderOptions().num_workers(-1)); }),
            "LoaderOptions.num_workers -1 is not accepted: expected an integer from 0 to 256");
}

TEST(TrainerOptions, AliasesResolveToLightningsNames) {
  using cohort::detail::precision_name;
  auto resolved = [](const cohort::TrainerOptions& o) { return cohort::detail::resolve_options(o, false); };
  EXPECT_EQ(precision_name(resolved(cohort::TrainerOptions().precision("32")).precision), "32-true");
  EXPECT_EQ(precision_name(resolved(cohort::TrainerOptions().precision("bf16")).precision), "bf16-mixed");
  EXPECT_EQ(cohort::detail::strategy_name(resolved(cohort::TrainerOptions().strategy("zero3"))), "zero3");
  EXPECT_EQ(resolved(cohort::TrainerOptions().val_check_interval(5)).val_every_batches, 5);
}

TEST(TrainerLaunch, TheLaunchersWorldMustMatchDevicesTimesNodes) {
  cohort::detail::LaunchEnv slurm;
  slurm.launcher = "slurm";
  slurm.size = 4;
  EXPECT_EQ(error_of([&] { cohort::detail::check_launch_matches(slurm, 2, 1); }),
            "slurm started 4 task(s) (SLURM_NTASKS), but the Trainer asks for devices 2 x num_nodes 1 = 2: make the "
            "launcher's tasks per node equal devices and its nodes num_nodes");
  EXPECT_NO_THROW(cohort::detail::check_launch_matches(slurm, 2, 2));
  EXPECT_NO_THROW(cohort::detail::check_launch_matches(slurm, 0, 1));  // devices "auto"
  cohort::detail::LaunchEnv none;
  EXPECT_EQ(error_of([&] { cohort::detail::check_launch_matches(none, 2, 2); }),
            "TrainerOptions.num_nodes is 2, but this process was started without a launcher: start one process per "
            "node with srun, mpirun or cohortrun --nnodes 2");
}

// Hostile pass 7, M1: only the root's memory.max was read, so a v1 limit or one on this process's
// own v2 cgroup (or an ancestor's) let --devices 4 start under 250 MB and the kernel killed a rank.
// A refusal every self-launched rank meets is said once: the worker's failure and this rank's own
// error are the same but for the ranks named, at the start or, from a load's agreement, inside
// (hostile pass 19 m-2: "no usable checkpoint in D: D/step-10: rank 0: ..." was said twice).
TEST(TrainerLaunch, ARefusalIsTheSameWhateverRanksItNames) {
  using cohort::detail::same_refusal;
  const std::string problem = "no usable checkpoint in D: D/step-10: shard-00000 CRC; D/step-5: shard-00000 CRC";
  const std::string seen = "no usable checkpoint in D: D/step-10: rank 0: shard-00000 CRC; D/step-5: rank 0: "
                           "shard-00000 CRC";
  EXPECT_TRUE(same_refusal("rank 1 exited with code 1: error: [rank 1/2] " + seen, "[rank 0/2] " + problem));
  EXPECT_TRUE(same_refusal("rank 1 exited with code 1: error: [rank 1/2] rank 0: x", "[rank 0/2] x"));
  EXPECT_FALSE(same_refusal("rank 1 exited with code 1: error: [rank 1/2] " + seen, "[rank 0/2] another problem"));
  EXPECT_FALSE(same_refusal("rank 1 was killed by signal 9", "[rank 0/2] " + problem));
  EXPECT_FALSE(same_refusal("rank 1 exited with code 1: error: [rank 1/2] rank 10 x", "[rank 0/2] x"));
}

TEST(TrainerLaunch, TheMemoryRoomIsTheLeastOfEveryCgroupLimitAlongThePath) {
  char pattern[] = "/tmp/cohort-cgroup-XXXXXX";
  const std::string root = ::mkdtemp(pattern);
  const auto write = [&](const std::string& path, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(root + path).parent_path());
    std::ofstream(root + path) << text << "\n";
  };
  write("/memory/job/step/memory.limit_in_bytes", "9223372036854771712");  // v1's "no limit"
  write("/memory/job/step/memory.usage_in_bytes", "100");
  write("/memory/job/memory.limit_in_bytes", "262144000");  // 250 MB on the parent
  write("/memory/job/memory.usage_in_bytes", "62144000");
  EXPECT_EQ(cohort::detail::cgroup_memory_room("4:cpu,cpuacct:/x\n9:memory:/job/step\n", root), 200000000);
  write("/user.slice/app/memory.max", "max");
  write("/user.slice/app/memory.current", "5");
  write("/user.slice/memory.max", "1000");
  write("/user.slice/memory.current", "400");
  EXPECT_EQ(cohort::detail::cgroup_memory_room("0::/user.slice/app\n", root), 600);
  EXPECT_EQ(cohort::detail::cgroup_memory_room("0::/user.slice/app\n9:memory:/job/step\n", root), 600);
  EXPECT_EQ(cohort::detail::cgroup_memory_room("0::/elsewhere\n", root), -1) << "no limit anywhere";
  std::filesystem::remove_all(root);
}

// Checked before the first fork: devices 1000 used to fork 120+ workers, devices 64 to reach 10.8 GB.
TEST(TrainerLaunch, DevicesBeyondTheCoresOrTheMemoryAreRefusedBeforeAnyWorkerStarts) {
  const auto refuse = [](int devices, int cores, int64_t resident, int64_t available) {
    cohort::detail::WorkerRoom room;
    room.workers = devices;
    room.started = devices - 1;
    room.cores = cores;
    room.each = resident;
    room.available = available;
    room.asked = "TrainerOptions.devices " + std::to_string(devices);
    room.setting = "devices";
    room.elsewhere = "a launcher over several nodes";
    room.each_is = "this process's resident memory";
    return cohort::detail::refuse_workers(room);
  };
  EXPECT_EQ(refuse(1000, 2, 200000000, 16000000000),
            "TrainerOptions.devices 1000 would start 1000 processes on the 2 core(s) this process may use (at most 4 "
            "per core): use devices 8 or fewer, or a launcher over several nodes");
  EXPECT_EQ(refuse(64, 32, 170000000, 8000000000),
            "TrainerOptions.devices 64 would start 63 more processes of at least 170 MB each (this process's resident "
            "memory), 10710 MB in all, more than the 8000 MB available on this node: use devices 48 or fewer, or a "
            "launcher over several nodes");
  EXPECT_EQ(refuse(8, 2, 170000000, 8000000000), "");
  EXPECT_EQ(refuse(8, 2, -1, -1), "");  // memory unknown: only the cores are checked
  // The Trainer refuses before it forks (or re-executes) anything: this process is still the test.
  const std::string error = error_of([] { cohort::Trainer trainer(cohort::TrainerOptions().devices("4096")); });
  EXPECT_THAT(error, HasSubstr("TrainerOptions.devices 4096 would start 4096 processes on the "));
}

TEST(DataLoader, WorkerThreadsNeverChangeTheBatches) {
  auto data = tiny_data(50);
  cohort::DataLoader plain(data, cohort::LoaderOptions().batch_size(7).shuffle(true));
  cohort::DataLoader threaded(data, cohort::LoaderOptions().batch_size(7).shuffle(true).num_workers(3));
  for (auto* loader : {&plain, &threaded}) loader->distribute(2, 1, false, 5);
  for (int64_t epoch : {0, 1}) {
    std::vector<torch::Tensor> seen;
    plain.set_epoch(epoch);
    threaded.set_epoch(epoch);
    plain.for_each(0, [&](int64_t, cohort::Batch& b) { return seen.push_back(b.data), true; });
    size_t at = 0;
    threaded.for_each(0, [&](int64_t index, cohort::Batch& b) {
      EXPECT_TRUE(torch::equal(seen.at(at++), b.data)) << "epoch " << epoch << " batch " << index;
      return true;
    });
    EXPECT_EQ(at, seen.size());
    EXPECT_EQ(seen.size(), 4u);  // 25 samples on this rank of 2, batches of 7
  }
}

struct TempDir {
  std::string path = std::filesystem::temp_directory_path() / ("trainer_test_" + std::to_string(::getpid()) + "_" +
                                                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
  TempDir() { std::filesystem::remove_all(path); }
  ~TempDir() { std::filesystem::remove_all(path); }
};

cohort::TrainerOptions quiet(const std::string& root) {
  return cohort::TrainerOptions().accelerator("cpu").default_root_dir(root).enable_progress_bar(false);
}

TEST(EarlyStopping, StopsAfterPatienceChecksWithoutImprovement) {
  TempDir dir;
  cohort::Trainer trainer(quiet(dir.path).max_epochs(10).enable_checkpointing(false).logger(false));
  auto stopping = std::make_shared<cohort::EarlyStopping>(cohort::EarlyStoppingOptions().monitor("score").patience(2));
  trainer.add_callback(stopping);
  ScriptedModule module({5, 4, 4.5, 3.9, 4.0, 4.1, 1, 1, 1, 1});
  cohort::DataLoader train(tiny_data(16), cohort::LoaderOptions().batch_size(8));
  cohort::DataLoader val(tiny_data(8), cohort::LoaderOptions().batch_size(8));
  trainer.fit(module, train, cohort::FitOptions().val(&val));
  // Best 3.9 at epoch 4; epochs 5 and 6 do not improve: stop after 6 epochs (12 steps).
  EXPECT_EQ(trainer.current_epoch(), 6);
  EXPECT_EQ(stopping->stopped_step(), 12);
  EXPECT_EQ(stopping->reason(), "score did not improve in the last 2 checks; best 3.9");
  EXPECT_TRUE(trainer.should_stop());
}

// The best two of five epochs' scores in best/, the last state in checkpoints/: saved synchronously, or
// in the background (a displaced best removed once the save displacing it is written).
void expect_top_k_kept(bool async) {
  TempDir dir;
  cohort::Trainer trainer(quiet(dir.path).max_epochs(5));
  auto checkpoint = std::make_shared<cohort::ModelCheckpoint>(
      cohort::ModelCheckpointOptions().monitor("score").mode("max").save_top_k(2).async(async));
  trainer.add_callback(checkpoint);
  ScriptedModule module({0.1, 0.7, 0.3, 0.9, 0.2});
  cohort::DataLoader train(tiny_data(16), cohort::LoaderOptions().batch_size(8));
  cohort::DataLoader val(tiny_data(8), cohort::LoaderOptions().batch_size(8));
  trainer.fit(module, train, cohort::FitOptions().val(&val));
  const std::string best = dir.path + "/checkpoints/best";
  ASSERT_EQ(checkpoint->best_k().size(), 2u);
  EXPECT_EQ(checkpoint->best_k()[0], std::make_pair(0.9, best + "/step-8"));
  EXPECT_EQ(checkpoint->best_k()[1], std::make_pair(0.7, best + "/step-4"));
  std::vector<std::string> kept;
  for (const auto& entry : std::filesystem::directory_iterator(best))
    if (entry.path().filename().string().rfind("step-", 0) == 0) kept.push_back(entry.path().filename());
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(kept, (std::vector<std::string>{"step-4", "step-8"}));
  EXPECT_TRUE(std::filesystem::exists(dir.path + "/checkpoints/step-10/manifest.json"));
  EXPECT_FALSE(cohort::checkpoint_save_in_flight());
}

TEST(ModelCheckpoint, KeepsTheTopKByTheMonitoredMetric) { expect_top_k_kept(false); }

TEST(ModelCheckpoint, KeepsTheTopKByTheMonitoredMetricWhenSavingInTheBackground) { expect_top_k_kept(true); }

// A directory that cannot take checkpoints is named when the fit starts, not at the first save.
TEST(ModelCheckpoint, AnUnwritableDirectoryIsNamedBeforeTheFirstStep) {
  TempDir dir;
  std::filesystem::create_directories(dir.path);
  std::ofstream(dir.path + "/file") << "a file, not a directory";
  cohort::Trainer trainer(quiet(dir.path).max_epochs(1).logger(false));
  trainer.add_callback(std::make_shared<cohort::ModelCheckpoint>(
      cohort::ModelCheckpointOptions().dirpath(dir.path + "/file/checkpoints")));
  TinyModule module;
  cohort::DataLoader train(tiny_data(16), cohort::LoaderOptions().batch_size(8));
  EXPECT_EQ(error_of([&] { trainer.fit(module, train); }),
            "ModelCheckpointOptions.dirpath " + dir.path + "/file/checkpoints: cannot create the directory: Not a "
            "directory");
  EXPECT_EQ(trainer.global_step(), 0);
}

// Issue 39: a checkpoint holds the state after an optimizer step. A save inside an accumulation (from a
// module's per-batch hook) would lose the batches accumulated so far: it is refused, naming the batch.
TEST(ModelCheckpoint, ASaveInsideAnAccumulationIsRefused) {
  TempDir dir;
  struct SavingModule : TinyModule {
    void on_train_batch_end(const torch::Tensor&, int64_t index) override {
      if (index == 2) trainer->save_checkpoint(dir);
    }
    cohort::Trainer* trainer = nullptr;
    std::string dir;
  };
  cohort::Trainer trainer(quiet(dir.path).max_epochs(1).accumulate_grad_batches(2).enable_checkpointing(false).logger(false));
  SavingModule module;
  module.trainer = &trainer;
  module.dir = dir.path + "/ckpt";
  cohort::DataLoader train(tiny_data(32), cohort::LoaderOptions().batch_size(4));
  EXPECT_EQ(kind_of([&] { trainer.fit(module, train); }), "kind=invalid argument ranks=");
  EXPECT_EQ(error_of([&] { trainer.save_checkpoint(module.dir); }),
            "Trainer::save_checkpoint(\"" + module.dir + "\") at batch 3 of epoch 0, inside an accumulation of 2 "
            "batches: a checkpoint holds the state after an optimizer step; save from a callback's "
            "on_train_batch_end (called after each step) or at an epoch's end");
  EXPECT_FALSE(std::filesystem::exists(module.dir));
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(CSVLogger, WritesLightningsMetricsCsv) {
  TempDir dir;
  cohort::CSVLogger logger(dir.path);
  logger.log_metrics({{"train_loss", 0.5}, {"epoch", 0}}, 1);
  logger.log_metrics({{"val_acc", 0.875}, {"epoch", 0}}, 2);
  logger.flush();
  EXPECT_EQ(logger.log_dir(), dir.path + "/lightning_logs/version_0");
  EXPECT_EQ(read_text(logger.log_dir() + "/metrics.csv"), "epoch,step,train_loss,val_acc\n0,1,0.5,\n0,2,,0.875\n");
  EXPECT_EQ(cohort::CSVLogger(dir.path).log_dir(), dir.path + "/lightning_logs/version_1");
}

TEST(CSVLogger, TheTrainerLogsStepAndEpochValues) {
  TempDir dir;
  cohort::Trainer trainer(quiet(dir.path).max_epochs(2).log_every_n_steps(1).enable_checkpointing(false));
  TinyModule module;
  cohort::DataLoader train(tiny_data(16), cohort::LoaderOptions().batch_size(8));
  cohort::DataLoader val(tiny_data(8), cohort::LoaderOptions().batch_size(4));
  trainer.fit(module, train, cohort::FitOptions().val(&val));
  const std::string csv = read_text(trainer.loggers().at(0)->log_dir() + "/metrics.csv");
  std::istringstream lines(csv);
  std::string header;
  std::getline(lines, header);
  EXPECT_EQ(header, "epoch,step,train_loss_epoch,train_loss_step,val_acc,val_loss");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 4 + 2 + 2);  // 4 steps, 2 train epochs, 2 validations
  EXPECT_TRUE(trainer.callback_metrics().count("val_acc"));
}

TEST(TensorBoard, Crc32cMatchesTheStandardCheckValue) {
  const char* text = "123456789";
  EXPECT_EQ(cohort::detail::crc32c(text, std::strlen(text)), 0xE3069283u);  // RFC 3720's check value
}

// Reads TFRecords back, checking both CRCs, and returns the payloads.
std::vector<std::string> read_records(const std::string& bytes) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < bytes.size()) {
    uint64_t length = 0;
    uint32_t length_crc = 0, data_crc = 0;
    std::memcpy(&length, bytes.data() + at, 8);
    std::memcpy(&length_crc, bytes.data() + at + 8, 4);
    EXPECT_EQ(length_crc, cohort::detail::masked_crc32c(bytes.data() + at, 8));
    const std::string payload = bytes.substr(at + 12, length);
    std::memcpy(&data_crc, bytes.data() + at + 12 + length, 4);
    EXPECT_EQ(data_crc, cohort::detail::masked_crc32c(payload.data(), payload.size()));
    out.push_back(payload);
    at += 16 + length;
  }
  return out;
}

std::string write_events(const std::string& dir) {
  cohort::TensorBoardLogger logger(dir);
  logger.log_metrics({{"loss", 0.25}, {"acc", 0.5}}, 3);
  logger.log_metrics({{"loss", 0.125}}, 7);
  logger.flush();
  return logger.file();
}

TEST(TensorBoard, EventFilesAreTFRecordsOfEventMessages) {
  TempDir dir;
  const auto records = read_records(read_text(write_events(dir.path)));
  ASSERT_EQ(records.size(), 3u);
  EXPECT_THAT(records[0], HasSubstr("brain.Event:2"));
  // After the wall time (a tag byte and 8 bytes): step 7 and the Summary with one Value, byte for byte.
  EXPECT_EQ(records[2].substr(9),
            std::string("\x10\x07\x2a\x0d\x0a\x0b\x0a\x04" "loss" "\x15\x00\x00\x00\x3e", 17));
}

TEST(TensorBoard, TensorBoardReadsTheScalarsBack) {
  const std::string python = python_with_torch();
  if (std::system((python + " -c 'import tensorboard' 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << "the tensorboard package is not installed for " << python
                 << " (pip install tensorboard); EventFilesAreTFRecordsOfEventMessages checks the framing";
  }
  TempDir dir;
  const std::string file = write_events(dir.path);
  const std::string script = python + " -c \"\nimport sys\nfrom tensorboard.backend.event_processing import "
                             "event_accumulator as ea\na = ea.EventAccumulator(sys.argv[1]); a.Reload()\n"
                             "for t in sorted(a.Tags()['scalars']):\n  print(t, [(e.step, e.value) for e in "
                             "a.Scalars(t)])\n\" " + file;
  std::FILE* pipe = ::popen(script.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buffer[256];
  while (std::fgets(buffer, sizeof buffer, pipe)) out += buffer;
  EXPECT_EQ(::pclose(pipe), 0);
  EXPECT_EQ(out, "acc [(3, 0.5)]\nloss [(3, 0.25), (7, 0.125)]\n");
}

TEST(Progress, FormatsTheExamplesLineWithExtraMetrics) {
  cohort::ProgressState state;
  state.label = "epoch 1/2";
  state.step = 5;
  state.total = 10;
  state.loss = 0.5;
  state.samples_per_second = 100;
  state.eta_seconds = 65;
  state.extra = {{"val_acc", 0.875}};
  EXPECT_EQ(cohort::format_progress(state),
            "epoch 1/2 [##########..........]  5/10  loss 0.5000  100 samples/s  ETA 1:05  val_acc 0.875");
}

// ---- strategy "dp": replicas on threads of this process -------------------------------------------

// TinyModule with SGD (momentum): Adam divides by the gradient's root mean square, which turns the
// rounding of a near-zero gradient into a visible step; SGD keeps dp's rounding at rounding size.
struct SgdModule : TinyModule {
  std::unique_ptr<torch::optim::Optimizer> configure_optimizers(std::vector<torch::Tensor> parameters) override {
    return std::make_unique<torch::optim::SGD>(parameters, torch::optim::SGDOptions(0.1).momentum(0.9));
  }
};

struct DpRun {
  std::vector<torch::Tensor> parameters;
  std::map<std::string, double> metrics;
};

// 50 samples in batches of `batch` (the last one short), 2 epochs, validation on 20 samples.
DpRun fit_with(const std::string& strategy, int devices, cohort::TrainerOptions options, int64_t batch = 10) {
  cohort::Trainer trainer(options.strategy(strategy).devices(devices).accelerator("cpu").max_epochs(2)
                              .enable_progress_bar(false).enable_checkpointing(false).logger(false));
  SgdModule module;
  cohort::DataLoader train(tiny_data(50), cohort::LoaderOptions().batch_size(batch).shuffle(true));
  cohort::DataLoader val(tiny_data(20), cohort::LoaderOptions().batch_size(6));
  trainer.fit(module, train, cohort::FitOptions().val(&val));
  DpRun out;
  for (const auto& [name, value] : trainer.full_parameters()) out.parameters.push_back(value);
  out.metrics = trainer.callback_metrics();
  return out;
}

// dp sums the same terms in another order (chunk means weighted by chunk size against one mean over
// the batch; replica gradients added after backward), so the results agree to float32 rounding, not
// bit for bit: 1e-6 on parameters of size ~0.5 after ~20 SGD steps.
void expect_close(const DpRun& dp, const DpRun& single, const std::string& what) {
  ASSERT_EQ(dp.parameters.size(), single.parameters.size());
  for (size_t i = 0; i < dp.parameters.size(); ++i) {
    EXPECT_TRUE(torch::allclose(dp.parameters[i], single.parameters[i], /*rtol=*/0, /*atol=*/1e-6))
        << what << ": parameter " << i << " differs by "
        << (dp.parameters[i] - single.parameters[i]).abs().max().item<double>();
    EXPECT_FALSE(torch::equal(dp.parameters[i], tiny_network()->parameters()[i])) << what << ": never trained";
  }
  for (const char* key : {"train_loss_epoch", "val_loss", "val_acc"}) {
    ASSERT_TRUE(dp.metrics.count(key)) << what << ": " << key;
    EXPECT_NEAR(dp.metrics.at(key), single.metrics.at(key), 1e-6) << what << ": " << key;
  }
}

TEST(TrainerDp, ReplicasEndWhereOneDeviceWithTheWholeBatchEnds) {
  using O = cohort::TrainerOptions;
  for (int replicas : {2, 3}) {
    const std::string n = std::to_string(replicas) + " replicas";
    // Batches of 10 (3 replicas: chunks 4, 4, 2) and a last batch of 10 or 4 (3 replicas: 2, 2, none).
    expect_close(fit_with("dp", replicas, O()), fit_with("single", 1, O()), n);
    expect_close(fit_with("dp", replicas, O().accumulate_grad_batches(2).gradient_clip_val(0.5)),
                 fit_with("single", 1, O().accumulate_grad_batches(2).gradient_clip_val(0.5)), n + ", accumulate 2, clip");
    expect_close(fit_with("dp", replicas, O(), /*batch=*/7), fit_with("single", 1, O(), 7), n + ", batch 7");
  }
}

TEST(TrainerDp, OneReplicaIsSingleBitForBit) {
  using O = cohort::TrainerOptions;
  const DpRun dp = fit_with("dp", 1, O().accumulate_grad_batches(3)), single = fit_with("single", 1, O().accumulate_grad_batches(3));
  for (size_t i = 0; i < dp.parameters.size(); ++i) EXPECT_TRUE(torch::equal(dp.parameters[i], single.parameters[i]));
}

TEST(TrainerDp, ResumeFromLastEqualsAnUninterruptedFit) {
  TempDir dir;
  auto run = [&](int64_t max_steps, const std::string& ckpt_path, int64_t seed) {
    cohort::Trainer trainer(quiet(dir.path).strategy("dp").devices(2).max_epochs(2).max_steps(max_steps).logger(false));
    TinyModule module(seed);
    cohort::DataLoader train(tiny_data(50), cohort::LoaderOptions().batch_size(10).shuffle(true));
    trainer.fit(module, train, cohort::FitOptions().ckpt_path(ckpt_path));
    std::vector<torch::Tensor> out;
    for (const auto& [name, value] : trainer.full_parameters()) out.push_back(value);
    return out;
  };
  const auto straight = run(-1, "", 7);
  std::filesystem::remove_all(dir.path);
  run(7, "", 7);  // stops mid-epoch 2; the default ModelCheckpoint saves step 7
  const auto resumed = run(-1, "last", /*seed=*/99);
  ASSERT_EQ(straight.size(), resumed.size());
  for (size_t i = 0; i < straight.size(); ++i) EXPECT_TRUE(torch::equal(straight[i], resumed[i])) << "parameter " << i;
}

// Each replica's training_step runs under the precision's autocast (a thread-local state in LibTorch).
TEST(TrainerDp, ReplicasComputeUnderBf16Autocast) {
  struct Recording : SgdModule {
    torch::Tensor training_step(cohort::Batch& batch, int64_t) override {
      torch::Tensor out = forward(batch.data);
      std::lock_guard<std::mutex> lock(mutex);
      dtypes.insert(out.scalar_type());
      threads.insert(std::this_thread::get_id());
      return torch::nn::functional::cross_entropy(out.to(torch::kFloat), batch.target);
    }
    std::mutex mutex;
    std::set<torch::ScalarType> dtypes;
    std::set<std::thread::id> threads;
  } module;
  cohort::Trainer trainer(cohort::TrainerOptions().strategy("dp").devices(3).accelerator("cpu").precision("bf16-mixed")
                              .max_steps(2).enable_progress_bar(false).enable_checkpointing(false).logger(false));
  cohort::DataLoader train(tiny_data(12), cohort::LoaderOptions().batch_size(6));
  trainer.fit(module, train);
  EXPECT_EQ(module.dtypes, std::set<torch::ScalarType>{torch::kBFloat16});
  EXPECT_EQ(module.threads.size(), 3u);  // one persistent thread per replica, none made per step
  EXPECT_FALSE(module.threads.count(std::this_thread::get_id()));
  EXPECT_EQ(trainer.describe(), "dp (3 replica(s) on cpu), bf16-mixed");
}

TEST(TrainerDp, RefusesALaunchersWorldAndNetworksItCannotCopy) {
  const std::map<std::string, std::string> launched{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"},
      {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29999"}};
  for (const auto& [key, value] : launched) ::setenv(key.c_str(), value.c_str(), 1);
  const std::string launcher_error = error_of([] { cohort::Trainer(cohort::TrainerOptions().strategy("dp").devices(2)); });
  for (const auto& item : launched) ::unsetenv(item.first.c_str());
  EXPECT_EQ(launcher_error, "TrainerOptions.strategy \"dp\" runs its replicas as threads of one process, but "
                            "cohortrun/torchrun started 2 processes: start one process (no launcher, or one task), or "
                            "use strategy ddp (one process per device)");
  struct Plain : torch::nn::Module {  // a torch::nn::Module, not a Cloneable: no clone()
    torch::Tensor forward(torch::Tensor x) { return x; }
  };
  struct PlainModule : TinyModule {
    PlainModule() { network()->push_back(std::make_shared<Plain>()); }
  } module;
  cohort::Trainer trainer(cohort::TrainerOptions().strategy("dp").devices(2).accelerator("cpu").max_steps(1)
                              .enable_progress_bar(false).enable_checkpointing(false).logger(false));
  cohort::DataLoader train(tiny_data(8), cohort::LoaderOptions().batch_size(4));
  const std::string clone_error = error_of([&] { trainer.fit(module, train); });
  EXPECT_THAT(clone_error, ::testing::StartsWith("strategy dp copies the network once per device with clone(), "
                                                  "which failed: clone() has not been implemented for "));
  EXPECT_THAT(clone_error, ::testing::EndsWith(" (derive your modules from torch::nn::Cloneable, as LibTorch's are)"));
}

TEST(ReplicaWorkers, EachWorkerComputesWithItsShareOfTheThreadsAndFailuresComeBack) {
  const int before = at::get_num_threads();
  at::set_num_threads(4);
  {
    cohort::detail::ReplicaWorkers workers(2, /*intra_op_threads=*/1);
    std::vector<int> seen(2, 0);
    workers.run(2, [&](int k) {
      torch::ones({1 << 16}).sum();  // a parallel op: the lazy first-use initialisation has run
      seen[static_cast<size_t>(k)] = at::get_num_threads();
    });
    EXPECT_EQ(seen, (std::vector<int>{1, 1}));
    EXPECT_EQ(at::get_num_threads(), 4);
    EXPECT_EQ(error_of([&] {
                workers.run(2, [](int k) {
                  if (k == 1) throw cohort::Error("replica 1 failed");
                });
              }),
              "replica 1 failed");
    int ran = 0;
    workers.run(1, [&](int k) { ran += k + 1; });  // still usable, and only worker 0 ran
    EXPECT_EQ(ran, 1);
  }
  at::set_num_threads(before);
}

}  // namespace

}  // namespace trainer_test
