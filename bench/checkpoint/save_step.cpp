// One run of the async-save benchmark (bench/checkpoint/run.sh): the GPT (models/gpt.h, AdamW, random
// tokens) under DDP or fsdp, timing in rounds, interleaved: plain steps, a synchronous save (the time
// every rank is blocked), then an async save (the time its call blocks) with the steps that run while
// it is written. Rank 0 prints one RESULT line per round. With --kill-loop it only trains and saves
// async every step, printing "snapshot <step>" as each background write starts, for bench/checkpoint/
// kill.sh to SIGKILL a rank at a chosen moment of a write; --load-only loads the newest checkpoint and
// prints its step.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "cohort/cohort.h"
#include "models/gpt.h"

namespace {

using Clock = std::chrono::steady_clock;
using GPTEngine = cohort::ZeroEngine<cohort::models::GPTImpl>;

struct Flags {
  std::string mode = "fsdp", dir;
  int64_t n_layer = 16, n_head = 16, n_embd = 1024, block_size = 64, batch = 1;
  int rounds = 3, plain_steps = 3, threads = 1;
  bool kill_loop = false, load_only = false;
};

Flags parse(int argc, char** argv) {
  Flags f;
  CLI::App app{"Async against synchronous checkpoint saves on the GPT"};
  app.add_option("--mode", f.mode)->check(CLI::IsMember({"ddp", "fsdp"}));
  app.add_option("--dir", f.dir, "the checkpoint directory")->required();
  app.add_option("--n-layer", f.n_layer);
  app.add_option("--n-head", f.n_head);
  app.add_option("--n-embd", f.n_embd);
  app.add_option("--block-size", f.block_size);
  app.add_option("--batch-size", f.batch);
  app.add_option("--rounds", f.rounds);
  app.add_option("--plain-steps", f.plain_steps, "steps without a save per round");
  app.add_option("--threads", f.threads);
  app.add_flag("--kill-loop", f.kill_loop, "train and save async every step until killed");
  app.add_flag("--load-only", f.load_only, "load the newest checkpoint, print its step");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e));
  }
  return f;
}

double seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// The slowest rank's value: what the job waits for.
double slowest(cohort::Comm& comm, double value) {
  return comm.allreduce(torch::tensor({value}, torch::kDouble), cohort::ReduceOp::kMax).item<double>();
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = parse(argc, argv);
  torch::set_num_threads(f.threads);
  auto world = cohort::init();
  cohort::Comm& comm = world.comm();
  torch::manual_seed(0);
  cohort::models::GPT model(cohort::models::GPTConfig().n_layer(f.n_layer).n_head(f.n_head).n_embd(f.n_embd)
                                .block_size(f.block_size).vocab_size(256));
  const auto tokens = torch::randint(0, 256, {f.batch, f.block_size + 1}, torch::kLong);
  const auto input = tokens.narrow(1, 0, f.block_size), target = tokens.narrow(1, 1, f.block_size);
  std::unique_ptr<cohort::DistributedDataParallel<cohort::models::GPTImpl>> ddp;
  std::unique_ptr<torch::optim::AdamW> adamw;
  std::unique_ptr<GPTEngine> engine;
  cohort::CheckpointState state;
  std::function<void()> step;
  if (f.mode == "ddp") {
    ddp = std::make_unique<cohort::DistributedDataParallel<cohort::models::GPTImpl>>(model.ptr());
    adamw = std::make_unique<torch::optim::AdamW>(model->parameters(), torch::optim::AdamWOptions(1e-4));
    state.add("model", *model).add("optimizer", *adamw);
    step = [&] {
      adamw->zero_grad();
      model->loss_of((*ddp)->forward(input), target).backward();
      adamw->step();
    };
  } else {
    auto config = cohort::ZeroConfig()
                      .zero_optimization(cohort::ZeroOptimizationConfig().stage(3).overlap_comm(true))
                      .optimizer(cohort::OptimizerConfig().type(cohort::OptimizerType::kAdamW).lr(1e-4));
    engine = std::make_unique<GPTEngine>(model.ptr(), config, cohort::EngineOptions().prefetch_units(1));
    state.add("engine", *engine);
    step = [&] { engine->backward(model->loss_of(engine->forward(input), target)), engine->step(); };
  }
  if (f.load_only) {
    const auto info = cohort::load_checkpoint(f.dir, state, cohort::LoadOptions().must_exist(true).fallback(false));
    if (world.rank() == 0) std::printf("loaded step %lld\n", static_cast<long long>(info->step));
    return 0;
  }
  const auto async = cohort::SaveOptions().async(true).keep_last(2);
  int64_t n = 0;
  step();  // warm up
  if (f.kill_loop) {
    for (;;) {
      step();
      cohort::save_checkpoint(f.dir, state.set_step(++n), async);
      if (world.rank() == 0) std::printf("snapshot %lld\n", static_cast<long long>(n)), std::fflush(stdout);
    }
  }
  for (int round = 0; round < f.rounds; ++round) {
    std::vector<double> plain, during;
    for (int i = 0; i < f.plain_steps; ++i) {
      comm.barrier();
      const auto t = Clock::now();
      step();
      plain.push_back(slowest(comm, seconds(t)));
    }
    comm.barrier();
    auto t = Clock::now();
    cohort::save_checkpoint(f.dir, state.set_step(++n), cohort::SaveOptions().keep_last(2));
    const double sync_blocked = slowest(comm, seconds(t));
    comm.barrier();
    t = Clock::now();
    cohort::save_checkpoint(f.dir, state.set_step(++n), async);
    const double async_blocked = slowest(comm, seconds(t));
    // Steps while any rank's write is still going (agreed each step, so every rank runs as many).
    while (slowest(comm, cohort::checkpoint_save_in_flight() ? 1 : 0) > 0) {
      const auto s = Clock::now();
      step();
      during.push_back(slowest(comm, seconds(s)));
    }
    const double write = slowest(comm, seconds(t));
    cohort::finish_checkpoint_saves();
    std::vector<double> after;  // plain steps again: what the writes left behind (page cache, heap)
    for (int i = 0; i < f.plain_steps; ++i) {
      comm.barrier();
      const auto a = Clock::now();
      step();
      after.push_back(slowest(comm, seconds(a)));
    }
    if (world.rank() == 0)
      std::printf("RESULT mode=%s ranks=%d params=%lld step_s=%.4f sync_blocked_s=%.4f async_blocked_s=%.4f "
                  "steps_during=%zu step_during_s=%.4f write_s=%.3f step_after_s=%.4f\n",
                  f.mode.c_str(), world.size(), static_cast<long long>(cohort::models::gpt_num_parameters(model->config)),
                  median(plain), sync_blocked, async_blocked, during.size(), median(during), write, median(after));
    std::fflush(stdout);
  }
  return 0;
}
