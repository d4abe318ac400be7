// One rank of the DDP step benchmark: trains a model for --steps steps and rank 0 prints a RESULT line
// (samples/s over all ranks, step time, the time backward waited for buckets and the buckets' time alone).
// Modes: cohort (DistributedDataParallel), join (the same inside a cohort::Join that no rank leaves
// early), join-ab (Join's cost per step: both in one run, blocks alternating, bench/ddp/join_run.sh)
// and naive (raw c10d allreduce of each gradient after backward, as the LibTorch distributed example
// does). bench/ddp/run.sh runs it against PyTorch's Python DDP.
#include <CLI/CLI.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>

#include "bench/ddp/models.h"
#include "cohort/cohort.h"
#include "comm/comm_access.h"
#include "compat/c10d_compat.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string model = "mlp", mode = "cohort";
  int batch = 32, steps = 40, warmup = 10, threads = 1;
  double bucket_cap_mb = 25, first_bucket_cap_mb = 1;
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// join-ab: Join's cost measured within one run: blocks of steps outside and inside a cohort::Join
// (no rank leaves early) alternate A B B A, so both see the same processes, memory and CPU placement;
// a block is timed from a barrier to its last step (a Join's closing round is not counted).
template <typename Step>
int join_ab(const Args& args, const cohort::World& world, cohort::Joinable* ddp, const Step& one_step) {
  for (int i = 0; i < args.warmup; ++i) one_step();
  const int blocks = 20, per_block = std::max(1, args.steps / blocks);
  double took[2] = {0, 0};
  for (int b = 0; b < blocks; ++b) {
    const int inside = (b % 4 == 1 || b % 4 == 2) ? 1 : 0;
    auto steps = [&] {
      world.comm().barrier();
      const auto start = Clock::now();
      for (int i = 0; i < per_block; ++i) one_step();
      took[inside] += seconds_since(start);
    };
    if (inside) cohort::Join({ddp}).run(steps);
    else steps();
  }
  const int timed = per_block * blocks / 2;
  if (world.rank() == 0)
    for (int inside = 0; inside < 2; ++inside)
      std::printf("RESULT impl=%s model=%s ranks=%d batch=%d step_ms=%.3f\n", inside ? "join" : "cohort",
                  args.model.c_str(), world.size(), args.batch, 1000 * took[inside] / timed);
  return 0;
}

template <typename Net>
int run(const Args& args, const cohort::World& world) {
  torch::manual_seed(0);
  Net net;
  const bool cnn = args.model == "cnn";
  auto x = cnn ? torch::randn({args.batch, 1, 28, 28}) : torch::randn({args.batch, 512});
  auto y = torch::randint(0, 10, {args.batch}, torch::kLong);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  std::unique_ptr<cohort::DistributedDataParallel<typename Net::ContainedType>> ddp;
  c10::intrusive_ptr<cohort::detail::ProcessGroupBase> raw;
  if (args.mode != "naive") {
    ddp = std::make_unique<cohort::DistributedDataParallel<typename Net::ContainedType>>(
        net.ptr(), cohort::DDPOptions().bucket_cap_mb(args.bucket_cap_mb).first_bucket_cap_mb(args.first_bucket_cap_mb));
  } else if (world.size() > 1) {
    auto& impl = cohort::detail::comm_impl(world.comm());
    auto store = c10::make_intrusive<c10d::PrefixStore>("bench-naive", impl.store_ptr());
    cohort::detail::BackendConfig config{store, world.rank(), world.size(), "127.0.0.1", std::chrono::minutes(5)};
    raw = cohort::detail::make_gloo(config);
  }
  double wait = 0;
  Clock::time_point start;
  auto one_step = [&] {
    // Spans for the timeline (COHORT_TIMELINE; bench/timeline): free when it is off.
    cohort::trace::Span step_span("step");
    opt.zero_grad();
    torch::Tensor loss;
    {
      cohort::trace::Span forward("forward");
      loss = torch::nn::functional::cross_entropy(net->forward(x), y);
    }
    {
      cohort::trace::Span backward("backward");
      loss.backward();
    }
    if (ddp) {
      wait += ddp->last_wait_seconds();
    } else if (raw) {
      for (auto& p : net->parameters()) {
        std::vector<at::Tensor> grads{p.grad()};
        raw->allreduce(grads)->wait();
        p.grad().div_(world.size());
      }
    }
    cohort::trace::Span optimizer_step("optimizer step");
    opt.step();
  };
  auto loop = [&] {
    for (int step = 0; step < args.warmup + args.steps; ++step) {
      if (step == args.warmup) {
        world.comm().barrier();
        start = Clock::now();
        wait = 0;
      }
      one_step();
    }
  };
  if (args.mode == "join-ab") return join_ab(args, world, ddp.get(), one_step);
  // join: every step also runs the join allreduce (reducer.h, note "join wait").
  if (args.mode == "join") {
    cohort::Join({ddp.get()}).run(loop);
  } else {
    loop();
  }
  world.comm().barrier();
  const double elapsed = seconds_since(start);
  // The buckets' communication alone, for how much of it backward hid.
  double comm_alone = 0;
  if (ddp && world.size() > 1) {
    std::vector<torch::Tensor> flats;
    for (const auto& bucket : ddp->bucket_layout()) {
      int64_t n = 0;
      for (const auto& name : bucket) n += net->named_parameters()[name].numel();
      flats.push_back(torch::ones({n}));
    }
    const int reps = 10;
    world.comm().barrier();
    auto t = Clock::now();
    for (int r = 0; r < reps; ++r)
      for (auto& f : flats) world.comm().allreduce(f);
    comm_alone = seconds_since(t) / reps;
  }
  if (world.rank() == 0) {
    std::printf("RESULT impl=%s model=%s ranks=%d batch=%d samples_per_s=%.1f step_ms=%.2f wait_ms=%.3f comm_ms=%.3f\n",
                args.mode.c_str(), args.model.c_str(), world.size(), args.batch,
                double(args.steps) * args.batch * world.size() / elapsed, 1000 * elapsed / args.steps,
                1000 * wait / args.steps, 1000 * comm_alone);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"DDP step benchmark (one rank; launch with cohortrun)"};
  app.add_option("--model", args.model, "cnn or mlp")->check(CLI::IsMember({"cnn", "mlp"}));
  app.add_option("--mode", args.mode, "cohort, join, join-ab or naive")
      ->check(CLI::IsMember({"cohort", "join", "join-ab", "naive"}));
  app.add_option("--batch", args.batch, "batch per rank");
  app.add_option("--steps", args.steps, "timed steps");
  app.add_option("--warmup", args.warmup, "untimed steps first");
  app.add_option("--threads", args.threads, "torch threads per rank");
  app.add_option("--bucket-cap-mb", args.bucket_cap_mb, "DDPOptions::bucket_cap_mb");
  app.add_option("--first-bucket-cap-mb", args.first_bucket_cap_mb, "DDPOptions::first_bucket_cap_mb");
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(args.threads);
  try {
    auto world = cohort::init();
    return args.model == "cnn" ? run<cohort::bench::Cnn>(args, world) : run<cohort::bench::Mlp>(args, world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
