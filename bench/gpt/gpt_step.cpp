// One side of the GPT memory benchmark (bench/gpt/run.sh): trains models/gpt.h (byte-level
// vocabulary, fp32 AdamW, random tokens) under cohort's DDP or the ZeRO engine at stage 1-3, its
// blocks being sharding units, with or without activation checkpointing; rank 0 prints samples/s and
// every rank's resident memory: before the model exists, after it is built, after it is wrapped, and
// the peak (VmHWM). Run it under cohortrun. --device cuda (a build with CUDA) trains on the rank's GPU,
// optionally with --precision bf16 and the GPU's memory held to --device-memory-gib (the caching
// allocator's fraction, as a cgroup holds host memory): bench/gpu/offload.sh.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "cohort/cohort.h"
#include "models/gpt.h"
#include "proc_status.h"
#if COHORT_BENCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/cuda.h>
#endif

namespace {

// A /proc/self/status field in MiB (VmRSS: resident now, VmHWM: the peak so far).
void synchronize_device();

// Bytes sent on every interface but loopback, from /proc/net/dev (this process's network namespace).
double network_sent_bytes() {
  std::ifstream dev("/proc/net/dev");
  std::string line;
  double total = 0;
  while (std::getline(dev, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    if (name == "lo") continue;
    std::istringstream fields(line.substr(colon + 1));
    double value = 0;
    for (int i = 0; i < 9 && fields >> value; ++i) {}  // receive: 8 fields, then transmit bytes
    total += value;
  }
  return total;
}

// With COHORT_BENCH_PHASES=1, each phase's own peak (VmHWM reset before it through clear_refs) and
// its time (the GPU synchronized at its end, so the phases' overlap is lost).
void phase(const char* name) {
  static const bool on = std::getenv("COHORT_BENCH_PHASES") != nullptr;
  static auto last = std::chrono::steady_clock::now();
  if (!on) return;
  synchronize_device();
  const auto now = std::chrono::steady_clock::now();
  std::fprintf(stderr, "phase %s peak %.0f MiB, now %.0f MiB, %.3f s\n", name, status_mib("VmHWM"),
               status_mib("VmRSS"), std::chrono::duration<double>(now - last).count());
  std::ofstream("/proc/self/clear_refs") << "5";
  last = std::chrono::steady_clock::now();
}

struct Flags {
  std::string mode = "ddp";
  bool checkpointing = false;
  bool sharded_init = false;
  int64_t n_layer = 6, n_head = 6, n_embd = 384, block_size = 128, vocab_size = 256, batch = 4;
  int steps = 10, warmup = 2, threads = 1;
  int replicas = 1;  // zero1-3/fsdp: HSDP's replicas (a {replicate, shard} mesh over the world)
  int tp = 1;        // zero1-3/fsdp: tensor parallel size (Megatron's split of the GPT; the engine shards the rest)
  int64_t prefetch_bucket_size = cohort::ZeroOptimizationConfig().stage3_prefetch_bucket_size();
  int64_t reduce_bucket_size = cohort::ZeroOptimizationConfig().reduce_bucket_size();
  std::string offload_optimizer = "none", offload_params = "none", nvme_path;
  std::string device = "cpu", precision = "fp32";
  double device_memory_gib = 0;  // 0: the whole GPU
  double lr = 1e-4;               // AdamW's
};

void synchronize_device() {
#if COHORT_BENCH_CUDA
  if (torch::cuda::is_available()) torch::cuda::synchronize();
#endif
}

// The GPU's allocator: held to `gib` when > 0; its peak of allocated bytes so far in MiB (0 on the CPU).
void limit_device_memory(const torch::Device& device, double gib) {
#if COHORT_BENCH_CUDA
  if (!device.is_cuda() || gib <= 0) return;
  torch::empty({1}, torch::TensorOptions().device(device));  // the allocator exists from the first allocation
  size_t free_bytes = 0, total_bytes = 0;
  C10_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  c10::cuda::CUDACachingAllocator::setMemoryFraction(std::min(1.0, gib * double(1 << 30) / double(total_bytes)),
                                                     device.index());
#else
  (void)device, (void)gib;
#endif
}

double device_peak_mib(const torch::Device& device) {
#if COHORT_BENCH_CUDA
  if (!device.is_cuda()) return 0;
  torch::cuda::synchronize();
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  return double(stats.allocated_bytes[0].peak) / (1 << 20);  // [0]: every pool together
#else
  (void)device;
  return 0;
#endif
}

cohort::OffloadDevice offload_device(const std::string& name) {
  return name == "nvme" ? cohort::OffloadDevice::kNvme
                        : name == "cpu" ? cohort::OffloadDevice::kCpu : cohort::OffloadDevice::kNone;
}

Flags parse(int argc, char** argv) {
  Flags f;
  CLI::App app{"GPT under cohort DDP or ZeRO 1-3: samples/s and resident memory per rank"};
  app.add_option("--mode", f.mode, "fsdp: zero3 prefetching one block, as FSDP2 does")
      ->check(CLI::IsMember({"ddp", "zero1", "zero2", "zero3", "fsdp"}));
  app.add_flag("--activation-checkpointing", f.checkpointing);
  app.add_flag("--sharded-init", f.sharded_init, "zero3/fsdp: shard each block as it is made (cohort::ShardedInit)");
  app.add_option("--n-layer", f.n_layer);
  app.add_option("--n-head", f.n_head);
  app.add_option("--n-embd", f.n_embd);
  app.add_option("--block-size", f.block_size);
  app.add_option("--vocab-size", f.vocab_size);
  app.add_option("--batch-size", f.batch, "sequences per rank and step");
  app.add_option("--steps", f.steps, "timed steps");
  app.add_option("--warmup", f.warmup, "untimed steps first");
  app.add_option("--threads", f.threads);
  app.add_option("--replicas", f.replicas,
                 "zero1-3/fsdp: HSDP, this many replicas of world / replicas consecutive ranks (1: flat)")
      ->check(CLI::PositiveNumber);
  app.add_option("--tp", f.tp,
                 "zero1-3/fsdp: tensor parallel over groups of this many consecutive ranks (models/gpt.h's plan), "
                 "the engine sharding over the data-parallel ranks (FSDP2's fully_shard on a 2-D mesh)")
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", f.lr, "AdamW's learning rate (1e-4)");
  app.add_option("--stage3-prefetch-bucket-size", f.prefetch_bucket_size, "elements (DeepSpeed's default 5e7)");
  app.add_option("--reduce-bucket-size", f.reduce_bucket_size, "elements (DeepSpeed's default 5e8)");
  app.add_option("--offload-optimizer", f.offload_optimizer, "zero1-3/fsdp: none, cpu or nvme")
      ->check(CLI::IsMember({"none", "cpu", "nvme"}));
  app.add_option("--offload-params", f.offload_params, "zero3/fsdp: none, cpu or nvme (every block on file)")
      ->check(CLI::IsMember({"none", "cpu", "nvme"}));
  app.add_option("--nvme-path", f.nvme_path, "the swap files' directory for nvme");
  app.add_option("--device", f.device, "cpu, or cuda (this rank's GPU; a build with CUDA)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--precision", f.precision, "fp32, or bf16 (ZeRO modes: bf16 parameters, fp32 masters)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--device-memory-gib", f.device_memory_gib, "cuda: hold the GPU's allocator to this many GiB")
      ->check(CLI::NonNegativeNumber);
  try {
    app.parse(argc, argv);
    if (f.sharded_init && f.mode != "zero3" && f.mode != "fsdp")
      throw CLI::ValidationError("--sharded-init", "needs --mode zero3 or fsdp, got --mode " + f.mode);
    if (f.sharded_init && f.device != "cpu") throw CLI::ValidationError("--sharded-init", "needs --device cpu");
    if (f.precision != "fp32" && f.mode == "ddp") throw CLI::ValidationError("--precision", "bf16 needs a ZeRO mode");
    if (f.replicas > 1 && f.mode == "ddp") throw CLI::ValidationError("--replicas", "HSDP needs a ZeRO mode");
    if (f.tp > 1 && (f.mode == "ddp" || f.replicas > 1 || f.sharded_init))
      throw CLI::ValidationError("--tp", "needs a ZeRO mode, without --replicas or --sharded-init");
    if (f.device == "cuda" && !COHORT_BENCH_CUDA)
      throw CLI::ValidationError("--device", "cuda needs a build against a LibTorch with CUDA");
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e));
  }
  return f;
}

using GPTEngine = cohort::ZeroEngine<cohort::models::GPTImpl>;

// One training step's body for the chosen mode: forward, loss, backward, optimizer step.
std::function<double()> make_step(const Flags& f, cohort::models::GPT& model, const torch::Tensor& tokens,
                                  const cohort::Mesh* hsdp, const cohort::Mesh* tp,
                                  std::unique_ptr<cohort::DistributedDataParallel<cohort::models::GPTImpl>>& ddp,
                                  std::unique_ptr<torch::optim::AdamW>& adamw, std::unique_ptr<GPTEngine>& engine) {
  auto input = tokens.narrow(1, 0, f.block_size), target = tokens.narrow(1, 1, f.block_size);
  // Plain cross-entropy, or loss parallel on vocabulary-split logits under --tp.
  auto loss_of = [gpt = model, target](const torch::Tensor& logits) { return gpt->loss_of(logits, target); };
  if (f.mode == "ddp") {
    ddp = std::make_unique<cohort::DistributedDataParallel<cohort::models::GPTImpl>>(model.ptr());
    adamw = std::make_unique<torch::optim::AdamW>(model->parameters(), torch::optim::AdamWOptions(f.lr));
    return [wrapped = ddp.get(), optimizer = adamw.get(), input, loss_of] {
      optimizer->zero_grad();
      auto loss = loss_of((*wrapped)->forward(input));
      loss.backward();
      optimizer->step();
      return loss.item<double>();
    };
  }
  const int stage = f.mode == "fsdp" ? 3 : f.mode.back() - '0';
  auto zero = cohort::ZeroOptimizationConfig().stage(stage).overlap_comm(true)
                  .stage3_prefetch_bucket_size(f.prefetch_bucket_size).reduce_bucket_size(f.reduce_bucket_size)
                  .offload_optimizer(cohort::OffloadOptimizerConfig().device(offload_device(f.offload_optimizer))
                                         .nvme_path(f.nvme_path))
                  .offload_param(cohort::OffloadParamConfig().device(offload_device(f.offload_params))
                                     .nvme_path(f.nvme_path).max_in_cpu(0));
  auto config = cohort::ZeroConfig().zero_optimization(zero).optimizer(
      cohort::OptimizerConfig().type(cohort::OptimizerType::kAdamW).lr(f.lr));
  if (f.precision == "bf16") config.bf16(cohort::Bf16Config().enabled(true));
  // FSDP2 gathers the next block while one runs: one unit ahead, as the Trainer's fsdp does
  auto options = cohort::EngineOptions().prefetch_units(f.mode == "fsdp" ? 1 : 0);
  if (hsdp) options.comm(hsdp->group_ptr("shard")).replicate_comm(hsdp->group_ptr("replicate"));
  if (tp) options.comm(tp->group_ptr("data_parallel")).model_parallel_comm(tp->group_ptr("tensor_parallel"));
  engine = std::make_unique<GPTEngine>(model.ptr(), config, options);
  // With COHORT_BENCH_PHASES, the engine's own account after each phase too: what of the resident
  // memory it holds (a gap to VmRSS is the allocator's or another part's).
  const auto account = [e = engine.get()] {
    if (std::getenv("COHORT_BENCH_PHASES") == nullptr) return;
    const auto r = e->memory_report();
    std::fprintf(stderr, "  engine: params %.0f, grads %.0f, optimizer %.0f, buffers %.0f, cached %.0f MiB\n",
                 r.parameter_bytes / 1048576.0, r.gradient_bytes / 1048576.0, r.optimizer_bytes / 1048576.0,
                 r.buffer_bytes / 1048576.0, r.cached_bytes / 1048576.0);
  };
  return [e = engine.get(), input, loss_of, account] {
    auto loss = loss_of(e->forward(input));
    phase("forward");
    account();
    e->backward(loss);
    phase("backward");
    account();
    e->step();
    phase("step");
    account();
    return loss.item<double>();
  };
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = parse(argc, argv);
  torch::set_num_threads(f.threads);
  auto world = cohort::init();
  const torch::Device device = f.device == "cuda" ? torch::Device(torch::kCUDA, world.local_rank()) : torch::kCPU;
  limit_device_memory(device, f.device_memory_gib);
  const double rss_start = status_mib("VmRSS");
  torch::manual_seed(0);
  auto config = cohort::models::GPTConfig().n_layer(f.n_layer).n_head(f.n_head).n_embd(f.n_embd)
                    .block_size(f.block_size).vocab_size(f.vocab_size)
                    .unit(cohort::UnitOptions().activation_checkpointing(f.checkpointing));
  std::unique_ptr<cohort::Mesh> hsdp, tp;
  if (f.tp > 1)  // the Trainer's mesh: a tensor-parallel group is f.tp consecutive ranks
    tp = std::make_unique<cohort::Mesh>(world.comm(), std::vector<cohort::MeshDim>{
                                                          {"data_parallel", world.size() / f.tp}, {"tensor_parallel", f.tp}});
  if (f.replicas > 1)
    hsdp = std::make_unique<cohort::Mesh>(world.comm(), std::vector<cohort::MeshDim>{
                                                            {"replicate", f.replicas}, {"shard", world.size() / f.replicas}});
  cohort::models::GPT model{nullptr};
  if (f.sharded_init) {
    cohort::ShardedInit sharded(hsdp ? cohort::ShardedInitOptions()
                                           .comm(hsdp->group_ptr("shard"))
                                           .replicate_comm(hsdp->group_ptr("replicate"))
                                     : cohort::ShardedInitOptions());  // no rank ever holds the whole model
    model = cohort::models::GPT(config);
  } else {
    model = cohort::models::GPT(config);
  }
  if (tp) cohort::tp::parallelize_module(*model, tp->group_ptr("tensor_parallel"), cohort::models::gpt_tensor_parallel_plan(false));
  // On a GPU each parameter goes over in the compute dtype, so the whole model is there once, at 2 bytes
  // a parameter with bf16.
  if (device.is_cuda()) model->to(device, f.precision == "bf16" ? torch::kBFloat16 : torch::kFloat);
  phase("built");
  const double rss_built = status_mib("VmRSS");
  auto tokens = torch::randint(0, f.vocab_size, {f.batch, f.block_size + 1}, torch::kLong).to(device);
  std::unique_ptr<cohort::DistributedDataParallel<cohort::models::GPTImpl>> ddp;
  std::unique_ptr<torch::optim::AdamW> adamw;
  std::unique_ptr<GPTEngine> engine;
  auto step = make_step(f, model, tokens, hsdp.get(), tp.get(), ddp, adamw, engine);
  phase("wrapped");
  const double rss_wrapped = status_mib("VmRSS");
  double first_loss = 0, last_loss = 0;
  const bool phases = std::getenv("COHORT_BENCH_PHASES") != nullptr;  // each step's loss too
  for (int i = 0; i < f.warmup; ++i) {
    double& loss = i == 0 ? first_loss : last_loss;
    loss = step();
    if (phases) std::fprintf(stderr, "loss %.4f\n", loss);
  }
  world.comm().barrier();
  const auto io_bytes = [&] { return engine ? double(engine->memory_report().file_io_bytes) : 0.0; };
  const double io_before = io_bytes();
  // Bytes this host sends out over the timed steps (its ranks' network namespace; counted once, by local
  // rank 0): the traffic between hosts under bench/hosts, where each host is a namespace.
  const auto sent = [&] { return world.local_rank() == 0 ? network_sent_bytes() : 0.0; };
  const double sent_before = sent();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < f.steps; ++i) {
    last_loss = step();  // .item(): a GPU step ends before the next begins
    if (phases) std::fprintf(stderr, "loss %.4f\n", last_loss);
    if (f.warmup == 0 && i == 0) first_loss = last_loss;
  }
  world.comm().barrier();
  const double io_mib_per_step = (io_bytes() - io_before) / f.steps / (1 << 20);
  const double sent_mib_per_step = (sent() - sent_before) / f.steps / (1 << 20);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The model state the engine says it holds (DDP: parameters, gradients, AdamW's two moments).
  const double state_mib = engine ? double(engine->memory_report().total()) / (1 << 20)
                                  : 16.0 * double(cohort::models::gpt_num_parameters(config)) / (1 << 20);
  auto mine = torch::tensor({rss_start, rss_built, rss_wrapped, status_mib("VmRSS"), status_mib("VmHWM"), state_mib,
                             io_mib_per_step, sent_mib_per_step},
                            torch::kDouble);
  auto all = world.comm().allgather(mine).reshape({world.size(), 8});
  if (world.rank() == 0) {
    auto peak = all.select(1, 4);
    const std::string suffix = std::string(f.checkpointing ? "+ckpt" : "") + (f.sharded_init ? "+sharded-init" : "") +
                               (f.replicas > 1 ? "+hsdp" + std::to_string(f.replicas) : "") + (f.tp > 1 ? "+tp" + std::to_string(f.tp) : "") +
                               (f.offload_optimizer != "none" ? "+optimizer-" + f.offload_optimizer : "") +
                               (f.offload_params != "none" ? "+params-" + f.offload_params : "");
    std::printf("RESULT impl=cohort mode=%s%s ranks=%d n_layer=%lld n_embd=%lld params=%lld samples_per_s=%.3f "
                "step_s=%.3f rss_start_mib=%.0f rss_built_mib=%.0f rss_wrapped_mib=%.0f rss_end_mib=%.0f "
                "peak_max_mib=%.0f peak_sum_mib=%.0f state_mib=%.0f file_mib=%.0f io_mib_per_step_sum=%.1f "
                "device=%s precision=%s device_peak_mib=%.0f first_loss=%.4f last_loss=%.4f sent_mib_per_step=%.2f\n",
                f.mode.c_str(), suffix.c_str(), world.size(), static_cast<long long>(f.n_layer),
                static_cast<long long>(f.n_embd), static_cast<long long>(cohort::models::gpt_num_parameters(config)),
                double(f.steps) * f.batch * (world.size() / f.tp) / seconds, seconds / f.steps,
                all.select(1, 0).max().item<double>(), all.select(1, 1).max().item<double>(),
                all.select(1, 2).max().item<double>(), all.select(1, 3).max().item<double>(),
                peak.max().item<double>(), peak.sum().item<double>(), all.select(1, 5).max().item<double>(),
                engine ? double(engine->memory_report().file_bytes) / (1 << 20) : 0.0,
                all.select(1, 6).sum().item<double>(), f.device.c_str(), f.precision.c_str(),
                device_peak_mib(device), first_loss, last_loss, all.select(1, 7).sum().item<double>());
  }
  return 0;
}
