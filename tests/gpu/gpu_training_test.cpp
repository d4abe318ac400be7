// Training on a GPU: two ranks sharing one GPU over Gloo with CUDA tensors (every collective, DDP and
// ZeRO 1-3 equal to the same run on the CPU), a world of one on cuda:0 (DDP, bf16 ZeRO, autocast),
// and checkpoints of CUDA tensors and the CUDA RNG. Skipped, with the reason, without a GPU.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include "cohort/cohort.h"
#include "gpu/gpu_support.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace gpu_training_test {

namespace {

using cohort::ReduceOp;
using cohort::testing::report;
using cohort::testing::run_ranks;

constexpr int kSteps = 10, kBatch = 8;

torch::nn::Sequential make_model() {
  torch::manual_seed(3);
  return torch::nn::Sequential(torch::nn::Linear(6, 16), torch::nn::ReLU(), torch::nn::Linear(16, 3));
}

std::pair<torch::Tensor, torch::Tensor> batch(int step, int rank, int size) {
  torch::manual_seed(1000 + step);
  auto x = torch::randn({int64_t(size) * kBatch, 6});
  auto y = torch::randint(0, 3, {int64_t(size) * kBatch}, torch::kLong);
  return {x.narrow(0, rank * kBatch, kBatch), y.narrow(0, rank * kBatch, kBatch)};
}

// DDP for kSteps on `device`; returns the parameters on the CPU.
std::vector<torch::Tensor> train_ddp(torch::Device device, int rank, int size) {
  auto model = make_model();
  model->to(device);
  cohort::DistributedDataParallel ddp(model);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = batch(step, rank, size);
    opt.zero_grad();
    torch::nn::functional::cross_entropy(ddp->forward(x.to(device)), y.to(device)).backward();
    opt.step();
  }
  std::vector<torch::Tensor> out;
  for (auto& p : model->parameters()) out.push_back(p.detach().cpu());
  return out;
}

double max_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  return worst;
}

TEST(GpuTraining, TwoRanksShareOneGpuOverGloo) {
  COHORT_REQUIRE_GPU();
  run_ranks(2, [](int rank, int size) {
    auto& comm = cohort::init(cohort::InitOptions().backend(cohort::Backend::kGloo)).comm();
    const auto cuda = torch::TensorOptions().device(torch::kCUDA, 0);
    auto t = torch::full({5}, rank + 1, cuda);
    comm.allreduce(t, ReduceOp::kSum);
    EXPECT_TRUE(t.is_cuda());
    EXPECT_EQ(t.sum().item<double>(), 5.0 * 3);
    auto b = torch::full({4}, rank, cuda);
    comm.broadcast(b, 1);
    EXPECT_EQ(b.sum().item<double>(), 4.0);
    auto gathered = comm.allgather(torch::full({2}, rank, cuda));
    EXPECT_EQ(gathered[1][0].item<double>(), 1.0);
    auto chunk = comm.reduce_scatter(torch::arange(size * 3, cuda.dtype(torch::kFloat)), ReduceOp::kSum);
    EXPECT_EQ(chunk[0].item<double>(), double(size * rank * 3));
    // DDP on cuda:0 equals DDP on the CPU.
    const double ddp_diff = max_difference(train_ddp(torch::kCUDA, rank, size), train_ddp(torch::kCPU, rank, size));
    report("ddp cuda-vs-cpu " + std::to_string(ddp_diff));
    EXPECT_LT(ddp_diff, 1e-4);
  });
}

TEST(GpuTraining, ZeroStagesOnCudaEqualCpu) {
  COHORT_REQUIRE_GPU();
  run_ranks(2, [](int rank, int size) {
    cohort::init(cohort::InitOptions().backend(cohort::Backend::kGloo));
    std::vector<std::vector<torch::Tensor>> results;
    for (torch::Device device : {torch::Device(torch::kCUDA, 0), torch::Device(torch::kCPU)}) {
      for (int stage : {1, 2, 3}) {
        auto model = make_model();
        model->to(device);
        auto config = cohort::ZeroConfig().world_size(size).zero_optimization(
            cohort::ZeroOptimizationConfig().stage(stage).reduce_bucket_size(40));
        config.optimizer(cohort::OptimizerConfig().type(cohort::OptimizerType::kAdam).lr(0.01));
        auto engine = cohort::initialize(config, model);
        for (int step = 0; step < kSteps; ++step) {
          auto [x, y] = batch(step, rank, size);
          engine.backward(torch::nn::functional::cross_entropy(engine.forward(x.to(device)), y.to(device)));
          engine.step();
        }
        std::vector<torch::Tensor> params;
        for (auto& [name, value] : engine.full_parameters()) params.push_back(value.detach().cpu());
        results.push_back(params);
      }
    }
    for (int stage = 0; stage < 3; ++stage) {
      const double diff = max_difference(results[stage], results[stage + 3]);
      report("zero" + std::to_string(stage + 1) + " cuda-vs-cpu " + std::to_string(diff));
      EXPECT_LT(diff, 1e-4) << "stage " << stage + 1;
    }
  });
}

// ZeRO-Offload on a GPU: masters, optimizer state and the step on the host, each reduced gradient
// shard down through the bounded page-locked staging as its reduction ends, the updated parameters up
// (zero/offload/host_staging.h); stage 3 also with its parameter shards on the host. Two ranks over
// Gloo, 2 micro-steps per step (the host adds the second), AdamW and SGD with momentum: the same
// parameters as without offload, within the difference of the host's and the GPU's step kernels.
TEST(GpuTraining, OptimizerOffloadOnCudaEndsAtTheParametersOfNoOffload) {
  COHORT_REQUIRE_GPU();
  run_ranks(2, [](int rank, int size) {
    cohort::init(cohort::InitOptions().backend(cohort::Backend::kGloo));
    const torch::Device cuda(torch::kCUDA, 0);
    auto train = [&](int stage, bool sgd, cohort::OffloadDevice optimizer, cohort::OffloadDevice params) {
      auto model = make_model();
      model->to(cuda);
      auto zero = cohort::ZeroOptimizationConfig().stage(stage).reduce_bucket_size(40).overlap_comm(true)
                      .offload_optimizer(cohort::OffloadOptimizerConfig().device(optimizer).buffer_count(2))
                      .offload_param(cohort::OffloadParamConfig().device(params));
      auto config = cohort::ZeroConfig().world_size(size).gradient_accumulation_steps(2).zero_optimization(zero);
      config.optimizer(sgd ? cohort::OptimizerConfig().type(cohort::OptimizerType::kSgd).lr(0.05).momentum(0.9)
                           : cohort::OptimizerConfig().type(cohort::OptimizerType::kAdamW).lr(0.01)
                                 .weight_decay(0.01));
      auto engine = cohort::initialize(config, model);
      for (int micro = 0; micro < 2 * kSteps; ++micro) {
        auto [x, y] = batch(micro, rank, size);
        engine.backward(torch::nn::functional::cross_entropy(engine.forward(x.to(cuda)), y.to(cuda)));
        engine.step();
      }
      if (optimizer != cohort::OffloadDevice::kNone)
        EXPECT_GT(engine.memory_report().buffer_bytes, 0) << "the staging buffers exist";
      std::vector<torch::Tensor> out;
      for (auto& [name, value] : engine.full_parameters()) out.push_back(value.detach().cpu());
      return out;
    };
    using cohort::OffloadDevice;
    for (bool sgd : {false, true}) {
      for (int stage : {1, 2, 3}) {
        const auto none = train(stage, sgd, OffloadDevice::kNone, OffloadDevice::kNone);
        const double diff = max_difference(none, train(stage, sgd, OffloadDevice::kCpu, OffloadDevice::kNone));
        report(std::string(sgd ? "sgd" : "adamw") + " zero" + std::to_string(stage) + " offload cpu vs none " +
               std::to_string(diff));
        EXPECT_LT(diff, 1e-5) << "stage " << stage << (sgd ? " sgd" : " adamw");
        if (stage != 3) continue;
        const double both = max_difference(none, train(stage, sgd, OffloadDevice::kCpu, OffloadDevice::kCpu));
        report(std::string(sgd ? "sgd" : "adamw") + " zero3 offload cpu+params cpu vs none " + std::to_string(both));
        EXPECT_LT(both, 1e-5) << "stage 3 with parameters on the host" << (sgd ? " sgd" : " adamw");
      }
    }
  });
}

TEST(GpuTraining, WorldOfOneOnCudaWithBf16AndAutocast) {
  COHORT_REQUIRE_GPU();
  auto world = cohort::init();
  ASSERT_TRUE(world.device().is_cuda()) << "a world of one with CUDA visible trains on cuda:0";
  EXPECT_LT(max_difference(train_ddp(world.device(), 0, 1), train_ddp(torch::kCPU, 0, 1)), 1e-4);
  // bf16 ZeRO stage 2 and a float16 autocast step: the loss falls.
  auto model = make_model();
  model->to(world.device());
  auto engine = cohort::initialize(
      cohort::ZeroConfig().world_size(1).bf16(cohort::Bf16Config().enabled(true))
          .zero_optimization(cohort::ZeroOptimizationConfig().stage(2))
          .optimizer(cohort::OptimizerConfig().type(cohort::OptimizerType::kAdam).lr(0.01)),
      model);
  auto [x, y] = batch(0, 0, 1);
  x = x.to(world.device());
  y = y.to(world.device());
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    auto loss = torch::nn::functional::cross_entropy(engine.forward(x), y);
    (step == 0 ? first : last) = loss.item<double>();
    engine.backward(loss);
    engine.step();
  }
  EXPECT_LT(last, first) << "bf16 ZeRO-2 on cuda did not learn";
  auto net = make_model();
  net->to(world.device());
  torch::optim::SGD opt(net->parameters(), 0.1);
  torch::Tensor loss;
  {
    cohort::AutocastGuard autocast(torch::kCUDA, torch::kHalf);
    auto out = net->forward(x);
    EXPECT_EQ(out.scalar_type(), torch::kHalf);
    loss = torch::nn::functional::cross_entropy(out.to(torch::kFloat), y);
  }
  loss.backward();
  EXPECT_EQ(net->parameters()[0].grad().scalar_type(), torch::kFloat);
  opt.step();
}

TEST(GpuTraining, CheckpointOfCudaTensorsAndRng) {
  COHORT_REQUIRE_GPU();
  cohort::init();
  const auto dir = std::filesystem::temp_directory_path() / ("cohort-gpu-ckpt-" + std::to_string(getpid()));
  auto model = make_model();
  model->to(torch::kCUDA);
  torch::optim::Adam opt(model->parameters(), 0.01);
  auto [x, y] = batch(0, 0, 1);
  torch::nn::functional::cross_entropy(model->forward(x.cuda()), y.cuda()).backward();
  opt.step();
  {
    cohort::CheckpointState state;
    state.add("model", *model).add("optimizer", opt);
    cohort::save_checkpoint(dir.string(), state.set_step(1));
  }
  const auto expected_draw = torch::randn({4}, torch::TensorOptions().device(torch::kCUDA));
  auto restored = torch::nn::Sequential(torch::nn::Linear(6, 16), torch::nn::ReLU(), torch::nn::Linear(16, 3));
  restored->to(torch::kCUDA);
  torch::optim::Adam restored_opt(restored->parameters(), 0.01);
  torch::randn({100}, torch::TensorOptions().device(torch::kCUDA));  // move the CUDA RNG on
  cohort::CheckpointState state;
  state.add("model", *restored).add("optimizer", restored_opt);
  ASSERT_TRUE(cohort::load_checkpoint(dir.string(), state));
  EXPECT_TRUE(torch::randn({4}, torch::TensorOptions().device(torch::kCUDA)).equal(expected_draw))
      << "the CUDA generator was not restored";
  for (size_t i = 0; i < model->parameters().size(); ++i) {
    EXPECT_TRUE(restored->parameters()[i].is_cuda());
    EXPECT_TRUE(restored->parameters()[i].equal(model->parameters()[i]));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace

}  // namespace gpu_training_test
