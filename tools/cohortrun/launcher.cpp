// The round loop of cohortrun (see launcher.h). Node-local work (workers, output, signals) is in
// supervisor.cpp; agreement between nodes is in rendezvous.cpp; this file only sequences them and
// says, in one line each, what happened.
#include "cohortrun/launcher.h"

#include <torch/cuda.h>

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <thread>

#include "cohort/error.h"
#include "cohortrun/cpu_binding.h"
#include "cohortrun/flags.h"
#include "cohortrun/orphans.h"
#include "cohortrun/output.h"
#include "cohortrun/program.h"
#include "cohortrun/rendezvous.h"
#include "cohortrun/signals.h"
#include "cohortrun/summary.h"
#include "cohortrun/supervisor.h"
#include "core/job_secret.h"
#include "world/node_room.h"

namespace cohort::detail::launch {
namespace {

void say(const std::string& message) {
  const std::string line = "[cohortrun] " + message + "\n";
  write_all(2, line.data(), line.size());
}

std::string host_name() {
  char name[256] = {0};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// mkdtemp under `parent` with `prefix`; throws when it cannot be made.
std::string make_temp_dir(const std::string& parent, const std::string& prefix) {
  std::filesystem::create_directories(parent);
  std::string pattern = parent + "/" + prefix + "XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("cannot create a directory in " + parent);
  }
  return pattern;
}

// Where attempt_N/ directories go: under --log-dir (kept), or a temporary one (removed at exit)
// that holds only the workers' TORCHELASTIC_ERROR_FILEs.
struct RunDir {
  std::string path;
  bool temporary = false;
  ~RunDir() {
    std::error_code ignored;
    if (temporary && !path.empty()) std::filesystem::remove_all(path, ignored);
  }
};

GroupLayout make_layout(const RoundInfo& info, const LaunchOptions& options, int round) {
  GroupLayout layout;
  layout.group_rank = info.node_rank;
  layout.group_world_size = info.node_count;
  layout.local_world_size = options.nproc;
  layout.rank_base = info.rank_base;
  layout.world_size = info.world_size;
  layout.master_addr = info.master_addr;
  layout.master_port = info.master_port;
  layout.restart_count = round;
  layout.max_restarts = options.max_restarts;
  layout.run_id = info.run_id;
  layout.secret = info.secret;
  layout.launch_id = info.launch_id;
  layout.role = options.role;
  return layout;
}

// What stays the same for every round of one launch.
struct LaunchContext {
  const LaunchOptions& options;
  EnvVars base_env;
  std::string prefix_template;
  RunDir run_dir;
  std::vector<std::string> log_failures;  // of every attempt, said again when cohortrun ends
  int failure_restarts = 0;               // restarts after worker failures (--max-restarts bounds them)
  std::vector<RestartRecord> restarts;    // every restart this node went through, for the summary
};

// Makes the directory the attempts write to; false (and says why) when it cannot be made.
bool prepare_run_dir(LaunchContext& context) {
  const LaunchOptions& options = context.options;
  const std::string tmp = getenv_or_empty("TMPDIR").empty() ? "/tmp" : getenv_or_empty("TMPDIR");
  try {
    if (needs_log_files(options)) {
      const std::string base = options.log_dir.empty() ? make_temp_dir(tmp, "cohortrun_") : options.log_dir;
      context.run_dir.path = make_temp_dir(base, options.rdzv_id + "_");
      say("worker logs in " + context.run_dir.path + "/attempt_N/LOCAL_RANK/");
    } else {
      context.run_dir.path = make_temp_dir(tmp, "cohortrun_");
      context.run_dir.temporary = true;
    }
  } catch (const std::exception& e) {
    say(std::string("error: ") + e.what());
    return false;
  }
  return true;
}

AttemptSpec make_attempt(const LaunchContext& context, Rendezvous& rdzv, const RoundInfo& info, int round) {
  const LaunchOptions& options = context.options;
  if (options.nnodes.max > 1) {  // every round of a multi-node job, also one that closed with one node
    say(rdzv.where() + " round " + std::to_string(round) + ": node " + std::to_string(info.node_rank) + " of " +
        std::to_string(info.node_count) + ", ranks " + std::to_string(info.rank_base) + ".." +
        std::to_string(info.rank_base + options.nproc - 1) + " of " + std::to_string(info.world_size) +
        ", MASTER_ADDR=" + info.master_addr + " MASTER_PORT=" + std::to_string(info.master_port));
  }
  AttemptSpec spec;
  spec.options = &options;
  spec.base_env = context.base_env;
  spec.prefix_template = context.prefix_template;
  spec.attempt_dir = context.run_dir.path + "/attempt_" + std::to_string(round);
  spec.layout = make_layout(info, options, round);
  if (options.nnodes.max > 1) {  // a round of one node still watches for joining nodes
    const int node_rank = info.node_rank;
    const int node_count = info.node_count;
    const NodeRange range = options.nnodes;
    spec.check_remote = [&rdzv, round, node_rank, node_count, range]() -> std::optional<std::string> {
      try {
        if (auto outcome = rdzv.outcome(round)) return encode_outcome(*outcome);
        // Nodes waiting to join: restart every node into the bigger round (torchelastic's scale-up).
        const RoundCounts counts = rdzv.counts(round);
        if (should_rescale(counts.waiting, node_count, range, counts.done)) {
          const std::string waiting = std::to_string(counts.waiting) + (counts.waiting == 1 ? " node" : " nodes");
          const Outcome rescale{Outcome::Kind::kRescale, node_rank, waiting + " waiting to join"};
          return encode_outcome(rdzv.publish(round, rescale));
        }
      } catch (const RendezvousError& e) {
        return std::string("lost|") + std::to_string(node_rank) + "|" + e.what();
      }
      return std::nullopt;
    };
  }
  return spec;
}

// The outcome that stands after this node's attempt ended (not by a signal); nullopt when every
// node's workers succeeded.
std::optional<Outcome> standing_outcome(Rendezvous& rdzv, const LaunchContext& context, const RoundInfo& info,
                                        int round, const AttemptResult& result) {
  const LaunchOptions& options = context.options;
  if (result.end == AttemptEnd::kSucceeded) {
    rdzv.report_done(round);
    for (;;) {  // wait for every node's workers, or for a node to end the round otherwise
      if (rdzv.all_done(round)) return std::nullopt;
      if (auto outcome = rdzv.outcome(round)) return outcome;
      if (termination_signal() != 0) throw Interrupted(termination_signal());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  if (result.end == AttemptEnd::kFailed) {
    const WorkerFailure& first = result.failures.front();
    Outcome mine{decision_after_failure(context.failure_restarts, options.max_restarts), info.node_rank,
                 describe_failure(first) + " on node " + std::to_string(info.node_rank)};
    Outcome standing;
    try {
      standing = rdzv.publish(round, mine);
    } catch (const RendezvousError& e) {  // no restart without the other nodes
      say(std::string("error: ") + e.what());
      standing = mine;
      standing.kind = Outcome::Kind::kFail;
    }
    if (standing.kind == Outcome::Kind::kFail || standing.kind == Outcome::Kind::kStop) {
      SummaryInput summary{options.program,          host_name(),          info.node_rank,
                           context.failure_restarts, options.max_restarts, result.failures};
      const std::string text = format_failure_summary(summary);
      write_all(2, text.data(), text.size());
    }
    return standing;
  }
  // kStopped: another node ended the round, or the store is gone ("lost|node|why", from check_remote:
  // not an outcome record, so decode_outcome would refuse it)
  const std::string& reason = result.stop_reason;
  if (reason.rfind("lost|", 0) == 0) throw RendezvousError(reason.substr(reason.find('|', 5) + 1));
  return decode_outcome(reason);
}

// Records the restart that ends this round, and says it; for the summary.
void note_restart(LaunchContext& context, const RoundInfo& info, const Outcome& standing) {
  const bool failure = standing.kind == Outcome::Kind::kRestart;
  if (failure) {
    ++context.failure_restarts;
    say("worker group failed (" + standing.description + "); restarting it (restart " +
        std::to_string(context.failure_restarts) + " of " + std::to_string(context.options.max_restarts) + ")");
  } else {
    say(standing.description +
        ": restarting the worker group to take them in (a membership change; "
        "--max-restarts does not count it)");
  }
  context.restarts.push_back({info.round + 1, failure, standing.description, info.node_count, info.world_size});
}

// One round: join, run the workers, and decide. nullopt: restart (`round` is the round this node
// joined, later than asked for when it came while the job ran); else cohortrun's exit code.
std::optional<int> run_round(LaunchContext& context, Rendezvous& rdzv, int& round) {
  const LaunchOptions& options = context.options;
  if (termination_signal() != 0) throw Interrupted(termination_signal());
  const RoundInfo info = rdzv.join(round, context.failure_restarts);
  round = info.round;
  context.failure_restarts = info.failure_restarts;
  if (!context.restarts.empty() && context.restarts.back().round == round) {
    context.restarts.back().nodes_after = info.node_count;
    context.restarts.back().world_after = info.world_size;
  }
  const AttemptResult result = run_attempt(make_attempt(context, rdzv, info, round));
  context.log_failures.insert(context.log_failures.end(), result.log_failures.begin(), result.log_failures.end());
  if (result.end == AttemptEnd::kSignaled) {
    Outcome stop{Outcome::Kind::kStop, info.node_rank,
                 "node " + std::to_string(info.node_rank) + " got " + signal_name(result.signal)};
    try {
      if (info.node_count > 1) rdzv.publish(round, stop);
    } catch (const std::exception&) {
    }
    say("got " + signal_name(result.signal) + ": forwarded it to the workers and stopped them");
    rdzv.leave(round, "stopped");
    return 128 + result.signal;
  }
  const std::optional<Outcome> standing = standing_outcome(rdzv, context, info, round, result);
  if (!standing) {
    rdzv.leave(round, "succeeded");
    return 0;
  }
  if (standing->kind == Outcome::Kind::kRestart || standing->kind == Outcome::Kind::kRescale) {
    note_restart(context, info, *standing);
    return std::nullopt;
  }
  if (standing->node != info.node_rank || result.end != AttemptEnd::kFailed) {
    say("stopping: " + std::string(standing->kind == Outcome::Kind::kStop ? "" : "worker group failed: ") +
        standing->description);
  }
  rdzv.leave(round, standing->kind == Outcome::Kind::kStop ? "stopped" : "failed");
  return 1;
}

// The summary of worker output that did not reach --log-dir (each was also said when it happened).
void say_log_failures(const std::vector<std::string>& failures) {
  if (failures.empty()) return;
  say("warning: " + std::to_string(failures.size()) +
      " worker log file(s) are incomplete (the rest went to "
      "the console); the first: " +
      failures.front());
}

// An empty COHORT_JOB_SECRET is refused before any node joins or any worker starts (core/job_secret.h).
void check_given_secret() {
  try {
    (void)given_job_secret(process_env());
  } catch (const cohort::Error& e) {
    throw UsageError(e.what());
  }
}

}  // namespace

int run_launch(const LaunchOptions& options) {
  install_signal_handlers();
  become_subreaper();  // the workers' orphans come to cohortrun, which ends them (orphans.h)
  LaunchContext context{options, process_env(), getenv_or_empty("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"), {}};
  for (size_t local_rank = 0; local_rank < options.local_rank_cpus.size(); ++local_rank) {
    say(describe_binding(static_cast<int>(local_rank), options.local_rank_cpus[local_rank], context.base_env));
  }
  if (options.nproc > 1 && !options.bind_cores && !context.base_env.count("OMP_NUM_THREADS")) {
    say("setting OMP_NUM_THREADS=1 for each worker (more than one per node); set it yourself to tune");
  }
  if (!prepare_run_dir(context)) return 1;
  try {
    const std::unique_ptr<Rendezvous> rdzv = make_rendezvous(options);
    for (int round = 0;; ++round) {
      if (const std::optional<int> code = run_round(context, *rdzv, round)) {
        for (const std::string& line : format_restart_history(context.restarts, options.max_restarts)) say(line);
        say_log_failures(context.log_failures);
        return *code;
      }
    }
  } catch (const JobOver& e) {
    say("the job ended (" + e.how + ") while this node waited to join it; no worker ran here");
    return e.how == "succeeded" ? 0 : 1;
  } catch (const Interrupted& e) {
    say("got " + signal_name(e.signal) + " while waiting for other nodes; no worker is running");
    return 128 + e.signal;
  } catch (const RendezvousError& e) {
    say(std::string("error: ") + e.what());
    for (const std::string& line : format_restart_history(context.restarts, options.max_restarts)) say(line);
    return 1;
  }
}

int cohortrun_main(int argc, char** argv) {
  install_signal_handlers();
  const std::vector<std::string> args(argv + 1, argv + argc);
  ParsedCommandLine parsed;
  try {
    HostFacts host;
    host.cpu_count = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
    host.allowed_cpus = allowed_host_cpus();
    host.available_memory = available_memory();
    bool wants_gpus = false;  // ask CUDA only when the answer matters
    for (const auto& arg : args) {
      wants_gpus |= arg.find("gpu") != std::string::npos || arg.find("auto") != std::string::npos;
    }
    const std::string pet = getenv_or_empty("PET_NPROC_PER_NODE");
    wants_gpus |= pet == "gpu" || pet == "auto";
    if (wants_gpus) host.gpu_count = static_cast<int>(torch::cuda::device_count());
    parsed = parse_command_line(args, host);
    if (parsed.help.empty()) check_log_dir(parsed.options.log_dir);
    if (parsed.help.empty()) check_given_secret();
  } catch (const UsageError& e) {
    std::cerr << "cohortrun: error: " << e.what() << "\n" << usage_hint() << std::endl;
    return 2;
  }
  if (!parsed.help.empty()) {
    std::cout << parsed.help;
    return 0;
  }
  return run_launch(parsed.options);
}

}  // namespace cohort::detail::launch
