// The supervisor's poll loop (see supervisor.h): one thread, poll() over the signal self-pipe and
// every worker's stdout/stderr, waitpid(WNOHANG) on each wake-up, and a deadline for SIGKILL once a
// stop began. Workers are signalled by process group so their own children stop with them; children
// that left the group (setsid) are re-parented to cohortrun, the subreaper, and ended at the end.
#include "cohortrun/supervisor.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <ctime>
#include <fstream>
#include <memory>
#include <set>

#include "cohortrun/cpu_binding.h"
#include "cohortrun/orphans.h"
#include "cohortrun/output.h"
#include "cohortrun/signals.h"
#include "core/socket.h"

namespace cohort::detail::launch {
namespace {

using Clock = std::chrono::steady_clock;

struct Slot {
  int rank = 0;
  int local_rank = 0;
  std::string error_file;
  std::unique_ptr<WorkerOutput> output;
  std::unique_ptr<WorkerProcess> process;
  bool counted = false;  // its end was looked at
};

std::string now_text() {
  const std::time_t t = std::time(nullptr);
  char text[64];
  std::strftime(text, sizeof text, "%Y-%m-%d_%H:%M:%S", std::localtime(&t));
  return text;
}

// Reads what is available on one of a worker's pipes; closes it at end of stream.
void pump(Slot& slot, int stream, bool until_empty) {
  char buffer[65536];
  for (;;) {
    const int fd = stream == StdSpec::kOut ? slot.process->out_fd() : slot.process->err_fd();
    if (fd < 0) return;
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n > 0) {
      slot.output->on_data(stream, buffer, static_cast<size_t>(n));
      if (!until_empty) return;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    slot.output->finish(stream);  // end of stream or error
    if (stream == StdSpec::kOut) slot.process->close_out();
    else slot.process->close_err();
    return;
  }
}

void make_dirs(const std::string& path) {
  for (size_t slash = 1; slash != std::string::npos; slash = path.find('/', slash + 1)) {
    ::mkdir(path.substr(0, slash).c_str(), 0755);
  }
  ::mkdir(path.c_str(), 0755);
}

class Attempt {
 public:
  explicit Attempt(const AttemptSpec& spec) : spec_(spec) {}

  AttemptResult run() {
    start_workers();
    loop();
    finish();
    return std::move(result_);
  }

 private:
  void start_workers() {
    const LaunchOptions& options = *spec_.options;
    for (int local_rank = 0; local_rank < spec_.layout.local_world_size; ++local_rank) {
      auto slot = std::make_unique<Slot>();
      slot->local_rank = local_rank;
      slot->rank = spec_.layout.rank_base + local_rank;
      const std::string dir = spec_.attempt_dir + "/" + std::to_string(local_rank);
      make_dirs(dir);
      slot->error_file = dir + "/error.json";
      ::unlink(slot->error_file.c_str());
      slot->output = std::make_unique<WorkerOutput>(
          expand_prefix(spec_.prefix_template, slot->rank, local_rank, spec_.layout.role),
          route_stream(options, local_rank, StdSpec::kOut), route_stream(options, local_rank, StdSpec::kErr), dir);
      SpawnRequest request;
      request.path = options.program_path;
      request.argv.push_back(options.program);
      for (std::string arg : options.args) {  // torchrun's macro: ${local_rank}
        for (size_t at; (at = arg.find("${local_rank}")) != std::string::npos;) {
          arg.replace(at, 13, std::to_string(local_rank));
        }
        request.argv.push_back(arg);
      }
      EnvVars env = build_worker_env(spec_.base_env, spec_.layout, local_rank, slot->error_file);
      if (!options.local_rank_cpus.empty()) {  // --bind-cores
        request.cpus = options.local_rank_cpus[static_cast<size_t>(local_rank)];
        set_thread_counts(env, spec_.base_env, request.cpus.size());
      }
      request.envp = to_envp(env);
      try {
        slot->process = WorkerProcess::spawn(request);
      } catch (const std::exception& e) {
        WorkerFailure failure;
        failure.rank = slot->rank;
        failure.local_rank = local_rank;
        failure.status.exited = true;
        failure.status.code = 127;
        failure.time = now_text();
        failure.error_message = e.what();
        result_.failures.push_back(failure);
        begin_stop(SIGTERM);
        return;
      }
      slots_.push_back(std::move(slot));
    }
  }

  void begin_stop(int sig) {
    if (stopping_) return;
    stopping_ = true;
    stop_deadline_ = Clock::now() + std::chrono::milliseconds(static_cast<long>(spec_.options->stop_timeout * 1000));
    for (auto& slot : slots_) {
      slot->process->signal_group(sig);
      // A stopped worker (SIGSTOP, Ctrl-Z, a debugger's halt) acts on the signal only once it runs
      // again; without this it would sit out the whole --stop-timeout before SIGKILL.
      slot->process->signal_group(SIGCONT);
    }
  }

  void kill_all() {
    killed_ = true;
    for (auto& slot : slots_) slot->process->signal_group(SIGKILL);
  }

  bool any_running() const {
    for (const auto& slot : slots_) {
      if (slot->process->running()) return true;
    }
    return false;
  }

  // Failures seen in one pass are all reported (torchrun's "other failures"); those after the stop
  // began were caused by it and are not.
  void reap_all() {
    bool failed = false;
    for (auto& slot : slots_) {
      if (slot->counted || !slot->process->reap()) continue;
      slot->counted = true;
      const ExitStatus& status = slot->process->status();
      if (status.success() || stopping_) continue;
      WorkerFailure failure;
      failure.rank = slot->rank;
      failure.local_rank = slot->local_rank;
      failure.pid = slot->process->pid();
      failure.status = status;
      failure.time = now_text();
      result_.failures.push_back(failure);
      failed = true;
    }
    if (failed) begin_stop(SIGTERM);
  }

  void check_termination() {
    const int sig = termination_signal();
    if (sig == 0) return;
    if (result_.signal == 0) {
      result_.signal = sig;
      begin_stop(sig);  // forward the signal itself, as torchrun does
    }
    if (termination_count() > 1 && !killed_) kill_all();  // a second signal: stop now
  }

  int poll_timeout_ms() const {
    Clock::time_point deadline = Clock::time_point::max();
    if (stopping_ && !killed_) deadline = stop_deadline_;
    else if (!stopping_ && spec_.check_remote) deadline = next_check_;
    if (deadline == Clock::time_point::max()) return 1000;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return static_cast<int>(std::max<long>(0, std::min<long>(left, 1000)));
  }

  void loop() {
    next_check_ = Clock::now() + interval();
    while (any_running()) {
      std::vector<pollfd> fds{{signal_fd(), POLLIN, 0}};
      std::vector<std::pair<Slot*, int>> owners{{nullptr, 0}};
      for (auto& slot : slots_) {
        if (slot->process->out_fd() >= 0) {
          fds.push_back({slot->process->out_fd(), POLLIN, 0});
          owners.emplace_back(slot.get(), StdSpec::kOut);
        }
        if (slot->process->err_fd() >= 0) {
          fds.push_back({slot->process->err_fd(), POLLIN, 0});
          owners.emplace_back(slot.get(), StdSpec::kErr);
        }
      }
      const int ready = net::poll_fds(fds, poll_timeout_ms());
      if (ready > 0) {
        if (fds[0].revents && drain_signals()) reap_orphans(worker_pids());  // an orphan's zombie
        for (size_t i = 1; i < fds.size(); ++i) {
          if (fds[i].revents) pump(*owners[i].first, owners[i].second, false);
        }
      }
      check_termination();
      reap_all();
      const auto now = Clock::now();
      if (!stopping_ && spec_.check_remote && now >= next_check_) {
        next_check_ = now + interval();
        if (auto reason = spec_.check_remote()) {
          result_.stop_reason = *reason;
          begin_stop(SIGTERM);
        }
      }
      if (stopping_ && !killed_ && now >= stop_deadline_) kill_all();
    }
  }

  std::chrono::milliseconds interval() const {
    return std::chrono::milliseconds(static_cast<long>(spec_.options->monitor_interval * 1000));
  }

  std::set<pid_t> worker_pids() const {
    std::set<pid_t> pids;
    for (const auto& slot : slots_) pids.insert(slot->process->pid());
    return pids;
  }

  void finish() {
    for (auto& slot : slots_) slot->process->signal_group(SIGKILL);  // children left in its group
    // Descendants that left the workers' groups (setsid) and were re-parented to this subreaper.
    end_orphans(worker_pids(), spec_.options->stop_timeout);
    for (auto& slot : slots_) {
      pump(*slot, StdSpec::kOut, true);
      pump(*slot, StdSpec::kErr, true);
      slot->output->finish(StdSpec::kOut);
      slot->output->finish(StdSpec::kErr);
      slot->process->close_out();
      slot->process->close_err();
      for (const auto& failure : slot->output->log_failures()) result_.log_failures.push_back(failure);
    }
    for (auto& failure : result_.failures) {
      for (auto& slot : slots_) {
        if (slot->local_rank != failure.local_rank) continue;
        failure.stderr_tail = slot->output->stderr_tail();
        const std::string message = read_error_file(slot->error_file);
        if (!message.empty()) failure.error_message = message;
      }
    }
    if (result_.signal != 0) result_.end = AttemptEnd::kSignaled;
    else if (!result_.failures.empty()) result_.end = AttemptEnd::kFailed;
    else if (!result_.stop_reason.empty()) result_.end = AttemptEnd::kStopped;
    else result_.end = AttemptEnd::kSucceeded;
  }

  const AttemptSpec& spec_;
  std::vector<std::unique_ptr<Slot>> slots_;
  AttemptResult result_;
  bool stopping_ = false;
  bool killed_ = false;
  Clock::time_point stop_deadline_;
  Clock::time_point next_check_;
};

}  // namespace

AttemptResult run_attempt(const AttemptSpec& spec) {
  install_signal_handlers();
  return Attempt(spec).run();
}

std::string read_error_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  try {
    const auto json = nlohmann::json::parse(in);
    const auto& message = json.at("message");
    if (message.is_string()) return message.get<std::string>();
    return message.at("message").get<std::string>();
  } catch (const std::exception&) {
    return "";
  }
}

}  // namespace cohort::detail::launch
