// bench/allreduce: what cohort::Comm costs over the transport it wraps. nccl-tests style rows (float32,
// 4 KiB to 64 MiB) for cohort::Comm::allreduce and raw c10d ProcessGroupGloo on the same store, taking
// turns in rotating order (medians, per-repetition ratios; rank 0's clock); the fingerprint agreement
// alone; cohort's allreduce alone (--mode alone, what bench/allreduce_mpi times); tensor fusion
// (200 x 1 KiB, separate vs fused); send/recv ping-pong (8 B to 2 MiB).
// `--nproc N` re-runs this program as N local ranks; under a launcher (cohortrun, torchrun, mpirun,
// srun) each process is one rank.
#include <CLI/CLI.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/torch.h>


#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cohort/comm.h"
#include "cohort/world.h"
#include "comm/comm_access.h"
#include "comm/control_plane.h"
#include "comm/fingerprint.h"
#include "compat/c10d_compat.h"
#include "world/launch_env.h"
#include "world/rendezvous.h"

#include "bench_util.h"
#include "core/check.h"

namespace {

using cohort::detail::ProcessGroupBase;

struct BenchOptions : BlockTiming {
  int nproc = 1;
  int64_t min_bytes = 4 << 10;
  int64_t max_bytes = 64 << 20;
  int64_t block_bytes = 32 << 20;  // bytes reduced per timed block (2 to 100 calls)
  std::string mode = "all";  // all, sizes, alone, fusion, pingpong
  int64_t pingpong_max = 4 << 20;
  int fusion_tensors = 200;
  int fusion_floats = 256;
};

double gbps(int64_t bytes, double us) { return double(bytes) / (us * 1e-6) / 1e9; }

// Cohort's thread handoff without the agreement, for finding where time goes: a launcher thread
// starts the c10d op, a future callback marks it done, the caller waits on a condition variable and
// then on the work (what CommImpl::submit/launch/await_data do for a blocking allreduce).
class HandoffAllreduce {
 public:
  explicit HandoffAllreduce(c10::intrusive_ptr<ProcessGroupBase> group)
      : group_(std::move(group)), thread_([this] { loop(); }) {}
  ~HandoffAllreduce() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  void operator()(std::vector<at::Tensor>& tensors) {
    std::unique_lock<std::mutex> lock(mutex_);
    job_ = &tensors;
    launched_ = done_ = false;
    cv_.notify_all();
    cv_.wait(lock, [&] { return launched_ && done_; });
    auto work = std::move(work_);
    lock.unlock();
    work->wait();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || job_ != nullptr; });
      if (stop_) return;
      auto* tensors = job_;
      job_ = nullptr;
      lock.unlock();
      auto work = group_->allreduce(*tensors);
      work->getFuture()->addCallback([this](c10::ivalue::Future&) {
        std::lock_guard<std::mutex> guard(mutex_);
        done_ = true;
        cv_.notify_all();
      });
      lock.lock();
      work_ = std::move(work);
      launched_ = true;
      cv_.notify_all();
    }
  }

  c10::intrusive_ptr<ProcessGroupBase> group_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<at::Tensor>* job_ = nullptr;
  bool launched_ = false, done_ = false, stop_ = false;
  c10::intrusive_ptr<c10d::Work> work_;
  std::thread thread_;  // last: starts after the fields it uses exist
};

// ---- the benchmark ---------------------------------------------------------------------------------

struct Bench {
  const BenchOptions& options;
  cohort::Comm& comm;
  // Our own Gloo groups on prefixes of the world's store, one per variant (a group that sits idle while
  // the others run is no worse off than cohort's own) and one for lining the ranks up between blocks.
  std::function<c10::intrusive_ptr<ProcessGroupBase>(const std::string&)> make_group;
  c10::intrusive_ptr<ProcessGroupBase> sync_group, raw, raw_agree;
  std::unique_ptr<cohort::detail::ControlPlane> cp;  // our own control plane: agreement timed alone
  std::unique_ptr<HandoffAllreduce> handoff;         // cohort's thread handoff, on a group of its own
  bool print = false;
  uint64_t agree_seq = 0;

  // Lines the ranks up before a timed block. Gloo's barrier lets ranks leave up to milliseconds apart
  // on this VM, which a block of 100 4-KiB calls would carry as tens of us per call; cohort's own
  // barrier after it (on one host: the shared-memory segment's) lines them up to microseconds, as
  // MPI_Barrier does for bench/allreduce_mpi.
  void sync() {
    sync_group->barrier()->wait();
    comm.barrier();
  }

  void raw_allreduce(std::vector<at::Tensor>& t, ProcessGroupBase* group = nullptr) {
    (group ? group : raw.get())->allreduce(t)->wait();
  }

  // What cohort adds before the data moves, done inline: hash the fingerprint, agree on it.
  void agree(const torch::Tensor& t) {
    cohort::detail::Fingerprint fp;
    fp.op = cohort::detail::OpKind::kAllreduce;
    fp.shape = t.sizes().vec();
    const uint64_t seq = agree_seq++;
    cohort::detail::AgreeResult result;
    auto failure = cp->agree(seq, fp.hash(seq), SteadyClock::now() + std::chrono::seconds(60), result);
    COHORT_CHECK(!failure && result.agreed(), "bench: agreement failed at #", seq);
  }

  // Both paths must produce the closed-form sum before anything is timed.
  void check_correct(int64_t count) {
    const int n = comm.size();
    const float expected = float(n * (n + 1) / 2);
    auto a = torch::full({count}, float(comm.rank() + 1));
    comm.allreduce(a);
    std::vector<at::Tensor> b{torch::full({count}, float(comm.rank() + 1))};
    raw_allreduce(b);
    COHORT_CHECK(a.eq(expected).all().item<bool>() && b[0].eq(expected).all().item<bool>(),
                 "bench: wrong allreduce result for ", count, " elements");
  }

  void sizes() {
    const int n = comm.size();
    const double bus = 2.0 * (n - 1) / n;
    if (print) {
      std::printf("# allreduce, float32 sum, %d ranks, Gloo; times: medians of %d interleaved repetitions "
                  "(warm-up %d);\n# ratios: medians [quartiles] of the per-repetition ratios. Diagnostics "
                  "(ratio to raw): +agree = raw\n# after the fingerprint hash + ControlPlane::agree inline; "
                  "+thread = raw started by a launcher\n# thread and awaited through a future callback "
                  "(cohort's handoff, no agreement)\n#\n", n, options.reps, options.warmup);
      std::printf("# %9s %9s %4s | %9s %6s %6s | %9s %6s %6s | %19s | %6s %7s\n", "size", "count", "iter",
                  "cohort", "algbw", "busbw", "raw c10d", "algbw", "busbw", "cohort/raw", "+agree", "+thread");
      std::printf("# %9s %9s %4s | %9s %6s %6s | %9s %6s %6s | %19s | %6s %7s\n", "(B)", "(elems)", "",
                  "time(us)", "(GB/s)", "(GB/s)", "time(us)", "(GB/s)", "(GB/s)", "median [p25, p75]", "/raw",
                  "/raw");
    }
    double ratio_1mib = 0, worst_large = 0;
    int64_t worst_bytes = 0;
    for (int64_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= 4) {
      const int64_t count = bytes / 4;
      const int iters = int(std::clamp<int64_t>(options.block_bytes / bytes, 2, 100));
      check_correct(count);
      auto a = torch::zeros({count});  // zeros: the sums stay finite however often they are reduced
      std::vector<at::Tensor> b{torch::zeros({count})}, c{torch::zeros({count})}, d{torch::zeros({count})};
      const Timings t = measure_interleaved({[&] { comm.allreduce(a); }, [&] { raw_allreduce(b); },
                                             [&] {
                                               agree(c[0]);
                                               raw_allreduce(c, raw_agree.get());
                                             },
                                             [&] { (*handoff)(d); }},
                                            iters, options, [&] { sync(); });
      const auto ratios = t.ratios(0, 1);
      const double ratio = quantile(ratios, 0.5);
      if (bytes == (1 << 20)) ratio_1mib = ratio;
      if (bytes >= (1 << 20) && ratio > worst_large) {
        worst_large = ratio;
        worst_bytes = bytes;
      }
      const double ta = t.median(0), tb = t.median(1);
      if (print)
        std::printf("  %9lld %9lld %4d | %9.1f %6.3f %6.3f | %9.1f %6.3f %6.3f | %5.3f [%5.3f, %5.3f] | %6.3f %7.3f\n",
                    (long long)bytes, (long long)count, iters, ta, gbps(bytes, ta), bus * gbps(bytes, ta), tb,
                    gbps(bytes, tb), bus * gbps(bytes, tb), ratio, quantile(ratios, 0.25), quantile(ratios, 0.75),
                    quantile(t.ratios(2, 1), 0.5), quantile(t.ratios(3, 1), 0.5));
      std::fflush(stdout);
    }
    // The agreement alone: one fingerprint hash and one ControlPlane::agree per call, no data.
    auto probe = torch::zeros({256});
    const double agree_us = measure_interleaved({[&] { agree(probe); }}, 200, options, [&] { sync(); }).median(0);
    if (print) {
      std::printf("#\n# fingerprint agreement alone (hash + ControlPlane::agree, no data): %.1f us per "
                  "collective\n", agree_us);
      if (ratio_1mib > 0)
        std::printf("# overhead at 1 MiB: cohort/raw = %.3f (%+.1f%%; target < 3%%)\n", ratio_1mib,
                    (ratio_1mib - 1) * 100);
      if (worst_bytes > 0)
        std::printf("# worst overhead at >= 1 MiB: %+.1f%% at %lld B (target <= 5%%)\n",
                    (worst_large - 1) * 100, (long long)worst_bytes);
      std::printf("#\n");
    }
  }

  // cohort's allreduce timed by itself, blocks lined up by cohort's own barrier only: what
  // bench/allreduce_mpi does with MPI_Barrier, so the two compare like with like. (In `sizes` the Gloo
  // variants and the Gloo barrier between blocks sleep in the kernel; unbound, the scheduler then may
  // leave both ranks on one CPU for the next block.)
  void alone() {
    const int n = comm.size();
    const double bus = 2.0 * (n - 1) / n;
    if (print)
      std::printf("# allreduce alone, float32 sum, %d ranks; medians of %d repetitions (warm-up %d)\n#\n"
                  "# %9s %9s %4s | %9s %6s %6s\n# %9s %9s %4s | %9s %6s %6s\n", n, options.reps, options.warmup,
                  "size", "count", "iter", "cohort", "algbw", "busbw", "(B)", "(elems)", "", "time(us)", "(GB/s)",
                  "(GB/s)");
    for (int64_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= 4) {
      const int64_t count = bytes / 4;
      const int iters = int(std::clamp<int64_t>(options.block_bytes / bytes, 2, 100));
      auto a = torch::zeros({count});
      const double t = measure_interleaved({[&] { comm.allreduce(a); }}, iters, options, [&] { comm.barrier(); }).median(0);
      if (print) {
        std::printf("  %9lld %9lld %4d | %9.1f %6.3f %6.3f\n", (long long)bytes, (long long)count, iters, t,
                    gbps(bytes, t), bus * gbps(bytes, t));
        std::fflush(stdout);
      }
    }
  }

  // Point to point between ranks 0 and 1: a message goes there and back, the one-way time is half the
  // round trip. cohort's send/recv against raw c10d Gloo's, interleaved; from 8 B in x4 steps up to
  // --pingpong-max-bytes (default 4 MiB, so the last size is 2 MiB).
  void pingpong() {
    const int rank = comm.rank();
    if (print)
      std::printf("# send/recv ping-pong, ranks 0 and 1, float32; one-way time = round trip / 2; medians of %d "
                  "interleaved repetitions (warm-up %d)\n#\n# %9s %9s %4s | %9s | %9s | %10s\n# %9s %9s %4s | "
                  "%9s | %9s | %10s\n", options.reps, options.warmup, "size", "count", "iter", "cohort", "raw c10d",
                  "cohort/raw", "(B)", "(elems)", "", "time(us)", "time(us)", "median");
    for (int64_t bytes = 8; bytes <= options.pingpong_max; bytes *= 4) {
      const int64_t count = bytes / 4;
      const int iters = int(std::clamp<int64_t>(options.block_bytes / bytes, 2, 100));
      auto a = torch::arange(count, torch::kFloat);
      std::vector<at::Tensor> b{torch::zeros({count})};
      const auto cohort_trip = [&] {
        if (rank == 0) {
          comm.send(a, 1);
          comm.recv(a, 1);
        } else if (rank == 1) {
          comm.recv(a, 0);
          comm.send(a, 0);
        }
      };
      const auto raw_trip = [&] {
        if (rank == 0) {
          raw->send(b, 1, 0)->wait();
          raw->recv(b, 1, 0)->wait();
        } else if (rank == 1) {
          raw->recv(b, 0, 0)->wait();
          raw->send(b, 0, 0)->wait();
        }
      };
      cohort_trip();  // the message must come back unchanged before anything is timed
      COHORT_CHECK(rank > 1 || torch::equal(a, torch::arange(count, torch::kFloat)), "bench: ping-pong of ",
                   count, " elements came back changed");
      const Timings t = measure_interleaved({cohort_trip, raw_trip}, iters, options, [&] { sync(); });
      if (print)
        std::printf("  %9lld %9lld %4d | %9.2f | %9.2f | %10.3f\n", (long long)bytes, (long long)count, iters,
                    t.median(0) / 2, t.median(1) / 2, quantile(t.ratios(0, 1), 0.5));
      std::fflush(stdout);
    }
    if (print) std::printf("#\n");
  }

  // Tensor fusion: many small tensors, one collective each against one fused collective.
  void fusion() {
    const int k = options.fusion_tensors;
    const int64_t floats = options.fusion_floats;
    std::vector<torch::Tensor> separate, fused;
    std::vector<std::vector<at::Tensor>> raw_separate;
    for (int i = 0; i < k; ++i) {
      separate.push_back(torch::zeros({floats}));
      fused.push_back(torch::zeros({floats}));
      raw_separate.push_back({torch::zeros({floats})});
    }
    std::vector<torch::Tensor> check;
    for (int i = 0; i < k; ++i) check.push_back(torch::full({floats}, float(i + comm.rank())));
    comm.allreduce_fused(check);
    const int n = comm.size();
    for (int i = 0; i < k; ++i)
      COHORT_CHECK(check[i].eq(float(n * i + n * (n - 1) / 2)).all().item<bool>(),
                   "bench: wrong fused allreduce result in tensor ", i);
    const auto t = measure_interleaved(
        {[&] {
           for (auto& x : separate) comm.allreduce(x);
         },
         [&] { comm.allreduce_fused(fused); },
         [&] {
           for (auto& x : raw_separate) raw_allreduce(x);
         }},
        1, options, [&] { sync(); });
    if (print) {
      const long long bytes = (long long)(floats * 4);
      std::printf("# fusion: %d tensors x %lld B (%lld float32), %d ranks; medians of %d interleaved "
                  "repetitions (warm-up %d)\n#\n", k, bytes, (long long)floats, n, options.reps, options.warmup);
      const std::string count = std::to_string(k);
      std::printf("  %-44s %10.1f us\n", (count + " x Comm::allreduce").c_str(), t.median(0));
      std::printf("  %-44s %10.1f us\n", ("1 x Comm::allreduce_fused (" + count + " tensors)").c_str(), t.median(1));
      std::printf("  %-44s %10.1f us\n", (count + " x raw c10d allreduce (reference)").c_str(), t.median(2));
      const auto speedup = t.ratios(0, 1);
      std::printf("#\n# fused speed-up: separate/fused = %.1fx [%.1f, %.1f] (target >= 5x)\n",
                  quantile(speedup, 0.5), quantile(speedup, 0.25), quantile(speedup, 0.75));
      std::printf("# per-call cost of Comm::allreduce over raw c10d at %lld B: %.1f us (separate: cohort/raw = "
                  "%.3f)\n#\n", bytes, (t.median(0) - t.median(2)) / k, quantile(t.ratios(0, 2), 0.5));
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  BenchOptions options;
  CLI::App app{"cohort allreduce benchmark: cohort::Comm vs raw c10d Gloo, and tensor fusion"};
  app.add_option("--nproc", options.nproc, "without a launcher: run this many local ranks")
      ->check(CLI::Range(1, 64));
  app.add_option("--reps", options.reps, "timed repetitions per variant (median)")->check(CLI::Range(1, 1000));
  app.add_option("--warmup", options.warmup, "untimed blocks per variant first")->check(CLI::Range(0, 100));
  app.add_option("--min-bytes", options.min_bytes, "smallest message")->check(CLI::Range(int64_t(4), int64_t(1) << 32));
  app.add_option("--max-bytes", options.max_bytes, "largest message (sizes grow x4)")
      ->check(CLI::Range(int64_t(4), int64_t(1) << 32));
  app.add_option("--block-bytes", options.block_bytes, "bytes reduced per timed block (2 to 100 calls)")
      ->check(CLI::Range(int64_t(4), int64_t(1) << 36));
  app.add_option("--mode", options.mode, "what to measure")
      ->check(CLI::IsMember({"all", "sizes", "alone", "fusion", "pingpong"}));
  app.add_option("--pingpong-max-bytes", options.pingpong_max, "largest ping-pong message (from 8 B, x4)")
      ->check(CLI::Range(int64_t(8), int64_t(1) << 32));
  app.add_option("--fusion-tensors", options.fusion_tensors, "tensors in the fusion test")
      ->check(CLI::Range(1, 100000));
  app.add_option("--fusion-floats", options.fusion_floats, "float32 elements per fused tensor")
      ->check(CLI::Range(1, 1 << 24));
  CLI11_PARSE(app, argc, argv);

  try {
    const auto launch = cohort::detail::detect_launch_env(cohort::detail::current_env());
    if (launch.launcher == "none" && options.nproc > 1) return run_local_ranks(options.nproc, argv);

    auto world = cohort::init(cohort::InitOptions().backend(cohort::Backend::kGloo));
    if (world.size() < 2) {
      std::fprintf(stderr, "bench: a world of %d has nothing to measure; run with --nproc 2 or a launcher\n",
                   world.size());
      return 2;
    }
    auto& comm = world.comm();
    auto store = c10::intrusive_ptr<c10d::Store>::reclaim_copy(cohort::detail::comm_impl(comm).store());
    const std::string address = cohort::detail::local_address_towards(world.master_addr(), world.master_port());
    Bench bench{options, comm, [&](const std::string& name) {
                  return cohort::detail::make_gloo({c10::make_intrusive<c10d::PrefixStore>("bench/" + name, store),
                                                    world.rank(), world.size(), address, std::chrono::seconds(120)});
                }};
    bench.sync_group = bench.make_group("sync");
    bench.raw = bench.make_group("raw");
    bench.raw_agree = bench.make_group("raw-agree");
    bench.cp = std::make_unique<cohort::detail::ControlPlane>(
        *store, cohort::detail::ControlPlaneConfig{"bench/agree", world.rank(), world.size(), address,
                                                   std::chrono::seconds(60), cohort::detail::comm_impl(comm).config().run_id});
    bench.handoff = std::make_unique<HandoffAllreduce>(bench.make_group("raw-thread"));
    bench.print = world.is_main();
    if (bench.print)
      std::printf("# cohort bench/allreduce: %d ranks (launcher: %s), torch %s, intra-op threads %d\n#\n",
                  world.size(), world.launcher().c_str(), TORCH_VERSION, torch::get_num_threads());
    if (options.mode == "all" || options.mode == "sizes") bench.sizes();
    if (options.mode == "alone") bench.alone();
    if (options.mode == "all" || options.mode == "fusion") bench.fusion();
    if (options.mode == "all" || options.mode == "pingpong") bench.pingpong();
    bench.sync();  // nobody tears down its control plane while a peer still uses it
    bench.cp.reset();
    bench.handoff.reset();
    world.comm().barrier();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
