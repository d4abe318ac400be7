// One rank of the pipeline benchmark: a deep MLP (--blocks Linear+ReLU blocks of --width, then a
// Linear to 10 classes; no BatchNorm) trained for --steps steps, either split into stages over the
// ranks cohortrun starts (--mode pipeline: cohort::pipeline::Pipeline with GPipe, 1F1B or interleaved
// 1F1B) or whole in one process on the whole batch (--mode single). Rank 0 prints one RESULT line:
// samples/s, step time, the bubble measured on each rank (1 - compute time / time inside step(), the
// compute timed by ClockMark layers: compute_clock.h) beside the schedule's formula, peak RSS per rank
// and the runtime's activation counter. bench/pipeline/run.sh runs it against torch.distributed.pipelining
// (bench/pipeline/pipeline_step.py, the same model, batch, chunks and threads).
#include <sys/resource.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cohort/cohort.h>
#include <cohort/pipeline.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>

#include "compute_clock.h"
#include "../../examples/common/check.h"

namespace {

namespace pp = cohort::pipeline;
using cohort::bench::compute_clock;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string mode = "pipeline", schedule = "1f1b";
  int blocks = 16, width = 512, batch = 64, chunks = 8, stages_per_rank = 2;
  int steps = 20, warmup = 5, threads = 1;
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0;  // Linux: kilobytes
}

double current_rss_mb() {
  long pages = 0, resident = 0;
  std::ifstream("/proc/self/statm") >> pages >> resident;
  return double(resident) * double(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

// The model cut into `stages` stages, each a ClockMark, its blocks (the last stage also the head) and a
// ClockMark; returns the Sequential and the stage boundaries (layer indices) for PartitionOptions.
std::pair<torch::nn::Sequential, std::vector<int64_t>> marked_mlp(const Args& args, int stages) {
  examples::require(args.blocks % stages == 0, "--blocks ", args.blocks, " is not a multiple of the stage count ",
               stages, " (every stage gets the same blocks)");
  torch::nn::Sequential net;
  std::vector<int64_t> boundaries;
  for (int s = 0; s < stages; ++s) {
    boundaries.push_back(int64_t(net->size()));
    net->push_back(cohort::bench::ClockMark(true));
    for (int b = 0; b < args.blocks / stages; ++b) {
      auto linear = torch::nn::Linear(args.width, args.width);
      // The last gradients a stage's backward computes: its first Linear's.
      if (b == 0)
        for (auto& p : linear->parameters())
          p.register_hook([](torch::Tensor) { compute_clock().backward_progress(); });
      net->push_back(linear);
      net->push_back(torch::nn::ReLU());
    }
    if (s == stages - 1) net->push_back(torch::nn::Linear(args.width, 10));
    net->push_back(cohort::bench::ClockMark(false));
  }
  boundaries.push_back(int64_t(net->size()));
  return {net, boundaries};
}

torch::Tensor timed_loss(const torch::Tensor& out, const torch::Tensor& y) {
  compute_clock().forward_begin();
  auto loss = torch::nn::functional::cross_entropy(out, y);
  compute_clock().forward_end();
  loss.register_hook([](torch::Tensor) { compute_clock().backward_begin(); });
  return loss;
}

// (p - 1) / (v m + p - 1): GPipe and 1F1B with v = 1, interleaved with v stages per rank.
double bubble_formula(int ranks, int chunks, int per_rank) {
  return double(ranks - 1) / double(per_rank * chunks + ranks - 1);
}

struct Measured {
  double elapsed = 0;   // the timed steps, optimizer included, between barriers
  double in_step = 0;   // of which inside forward/backward (Pipeline::step or the single process's)
  double busy = 0;      // of which computing (compute_clock)
  int peak_activations = 0;
};

// Runs warmup + steps steps of `step_once` (forward and backward) and an SGD step each.
template <typename Step>
Measured train(const Args& args, cohort::Comm& comm, std::vector<torch::Tensor> parameters, Step step_once) {
  torch::optim::SGD opt(parameters, torch::optim::SGDOptions(0.01).momentum(0.9));
  Measured m;
  Clock::time_point start;
  for (int step = 0; step < args.warmup + args.steps; ++step) {
    if (step == args.warmup) {
      comm.barrier();
      start = Clock::now();
      m.in_step = 0;
      compute_clock().reset();
    }
    opt.zero_grad();
    const auto t = Clock::now();
    step_once();
    compute_clock().commit();
    m.in_step += seconds_since(t);
    opt.step();
  }
  comm.barrier();
  m.elapsed = seconds_since(start);
  m.busy = compute_clock().busy_seconds();
  return m;
}

// Every rank's figures on rank 0 (a sum of slots: each rank fills its own row).
torch::Tensor gather(cohort::Comm& comm, const std::vector<double>& mine) {
  auto all = torch::zeros({comm.size(), int64_t(mine.size())}, torch::kDouble);
  for (size_t i = 0; i < mine.size(); ++i) all[comm.rank()][int64_t(i)] = mine[i];
  return comm.allreduce(all);
}

std::string joined(const torch::Tensor& column, const char* format) {
  std::string text;
  for (int64_t r = 0; r < column.size(0); ++r) {
    char cell[32];
    std::snprintf(cell, sizeof cell, format, column[r].item<double>());
    text += (r ? "/" : "") + std::string(cell);
  }
  return text;
}

void report(const Args& args, cohort::Comm& comm, const Measured& m, double rss_before, int per_rank) {
  const double bubble = 1 - m.busy / m.in_step;
  auto all = gather(comm, {bubble, peak_rss_mb(), peak_rss_mb() - rss_before, double(m.peak_activations)});
  if (comm.rank() != 0) return;
  const int ranks = comm.size();
  const bool single = args.mode == "single";
  std::printf("RESULT impl=cohort schedule=%s ranks=%d v=%d chunks=%d batch=%d samples_per_s=%.1f step_ms=%.2f "
              "bubble=%.3f bubble_ranks=%s bubble_formula=%.3f rss_mb=%s rss_added_mb=%s%s%s\n",
              single ? "single" : args.schedule.c_str(), ranks, per_rank, single ? 1 : args.chunks, args.batch,
              double(args.steps) * args.batch / m.elapsed, 1000 * m.elapsed / args.steps,
              all.select(1, 0).mean().item<double>(), joined(all.select(1, 0), "%.3f").c_str(),
              single ? 0.0 : bubble_formula(ranks, args.chunks, per_rank), joined(all.select(1, 1), "%.0f").c_str(),
              joined(all.select(1, 2), "%.0f").c_str(), single ? "" : " activations=",
              single ? "" : joined(all.select(1, 3), "%.0f").c_str());
  std::fflush(stdout);
}

int run(const Args& args) {
  torch::set_num_threads(args.threads);
  auto world = cohort::init();
  const bool single = args.mode == "single";
  examples::require(!single || world.size() == 1, "--mode single runs on one rank, not ", world.size());
  const int per_rank = args.schedule == "interleaved" && !single ? args.stages_per_rank : 1;
  const double rss_before = current_rss_mb();
  torch::manual_seed(0);
  const auto marked = marked_mlp(args, world.size() * per_rank);
  auto model = marked.first;
  auto x = torch::randn({args.batch, args.width});
  auto y = torch::randint(0, 10, {args.batch}, torch::kLong);
  Measured m;
  if (single) {
    m = train(args, world.comm(), model->parameters(), [&] { timed_loss(model->forward(x), y).backward(); });
  } else {
    auto part = pp::partition(model, world.size() * per_rank, pp::PartitionOptions().boundaries(marked.second));
    pp::Pipeline pipeline(world.comm_ptr(), pp::stages_of_rank(part, world.size(), world.rank()),
                          pp::PipelineOptions()
                              .schedule(args.schedule)
                              .chunks(args.chunks)
                              .stages_per_rank(per_rank)
                              .loss_fn(timed_loss));
    int peak = 0;
    m = train(args, world.comm(), pipeline.parameters(), [&] {
      pipeline.step(x, y);
      peak = std::max(peak, pipeline.peak_activations());
    });
    m.peak_activations = peak;
  }
  report(args, world.comm(), m, rss_before, per_rank);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"Pipeline step benchmark (one rank; launch with cohortrun)"};
  app.add_option("--mode", args.mode, "pipeline or single (the whole model in one process)")
      ->check(CLI::IsMember({"pipeline", "single"}));
  app.add_option("--schedule", args.schedule, "gpipe, 1f1b or interleaved")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved"}));
  app.add_option("--blocks", args.blocks, "Linear+ReLU blocks (a multiple of the stage count)");
  app.add_option("--width", args.width, "features of every block");
  app.add_option("--batch", args.batch, "samples per step");
  app.add_option("--chunks", args.chunks, "microbatches per step");
  app.add_option("--stages-per-rank", args.stages_per_rank, "stages per rank with --schedule interleaved");
  app.add_option("--steps", args.steps, "timed steps");
  app.add_option("--warmup", args.warmup, "untimed steps first");
  app.add_option("--threads", args.threads, "torch threads per rank");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
