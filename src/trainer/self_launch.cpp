// The Trainer's self-launch (see self_launch.h).
#include "trainer/self_launch.h"

#include "core/job_secret.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iterator>
#include <sstream>

#include "cohort/error.h"
#include "core/check.h"
#include "core/socket.h"
#include "world/node_room.h"
#include "world/timeline.h"
#include "world/worker_env.h"

namespace cohort::detail {
namespace {

// This program's arguments as it was started (argv is not passed to the Trainer).
std::vector<std::string> own_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  size_t begin = 0;
  for (size_t end; (end = text.find('\0', begin)) != std::string::npos; begin = end + 1)
    args.push_back(text.substr(begin, end - begin));
  COHORT_CHECK_KIND(kIO, !args.empty(), "self-launch: cannot read this program's arguments from /proc/self/cmdline");
  return args;
}

std::string own_executable() {
  char path[4096];
  const ssize_t size = ::readlink("/proc/self/exe", path, sizeof path - 1);
  COHORT_CHECK_KIND(kIO, size > 0, "self-launch: cannot read /proc/self/exe");
  return std::string(path, static_cast<size_t>(size));
}

// The workers get OMP_NUM_THREADS=1 (as under torchrun and cohortrun), which the OpenMP runtime reads
// only at process start; for rank 0 to compute exactly as they do (the same params-sha256 as under
// cohortrun), this process starts over with it: the same program, arguments and pid (execve).
void restart_with_worker_threads(const launch::EnvVars& base, const std::vector<std::string>& args,
                                 const std::string& path) {
  if (base.count("OMP_NUM_THREADS")) return;
  launch::EnvVars env = base;
  env["OMP_NUM_THREADS"] = "1";
  std::vector<std::string> envp = launch::to_envp(env);
  std::vector<char*> argv_c, envp_c;
  for (const auto& arg : args) argv_c.push_back(const_cast<char*>(arg.c_str()));
  for (const auto& item : envp) envp_c.push_back(const_cast<char*>(item.c_str()));
  argv_c.push_back(nullptr);
  envp_c.push_back(nullptr);
  std::fflush(nullptr);
  ::execve(path.c_str(), argv_c.data(), envp_c.data());
  throw Error("self-launch: cannot restart " + path + " with OMP_NUM_THREADS=1: " + std::strerror(errno),
              ErrorKind::kIO);
}

// cohortrun's worker variables, and COHORT_SELF_LAUNCH=1 so the ranks say who started them.
launch::EnvVars self_launch_env(const launch::EnvVars& base, const launch::GroupLayout& layout, int rank) {
  launch::EnvVars env = launch::build_worker_env(base, layout, rank, "");
  env["COHORT_SELF_LAUNCH"] = "1";
  return env;
}

// SIGTERM to the worker's group, then SIGCONT: a stopped worker (SIGSTOP, Ctrl-Z, a debugger's halt)
// acts on the SIGTERM only once it runs again; without SIGCONT it would sit out the grace period
// until SIGKILL, as cohortrun's supervisor also avoids.
void send_stop(const launch::WorkerProcess& process) {
  process.signal_group(SIGTERM);
  process.signal_group(SIGCONT);
}

}  // namespace

bool same_refusal(const std::string& failure, const std::string& own) {
  const auto without_rank = [](const std::string& text) {
    return text.rfind("[rank ", 0) == 0 && text.find("] ") != std::string::npos ? text.substr(text.find("] ") + 2)
                                                                                : text;
  };
  // A load's agreement names the rank that found each problem ("rank 0: ..."), which the rank that
  // found it does not: the same refusal reads "rank N: " apart, anywhere in it (hostile pass 19 m-2:
  // "no usable checkpoint in D: D/step-10: rank 0: ...; D/step-5: rank 0: ..." said twice).
  const auto unranked = [](const std::string& text) {  // without each "rank <digits>: "
    std::string out;
    for (size_t at = 0; at < text.size();) {
      size_t end = text.compare(at, 5, "rank ") == 0 ? at + 5 : at;
      while (end > at && end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
      if (end > at + 5 && text.compare(end, 2, ": ") == 0) {
        at = end + 2;
      } else {
        out += text[at++];
      }
    }
    return out;
  };
  const size_t said = failure.find(": error: ");
  if (said == std::string::npos) return false;
  return unranked(without_rank(failure.substr(said + 9))) == unranked(without_rank(own));
}

void check_launch_matches(const LaunchEnv& env, int devices, int64_t num_nodes) {
  if (env.launcher == "none") {
    COHORT_CHECK_KIND(kInvalidArgument, num_nodes == 1, "TrainerOptions.num_nodes is ", num_nodes,
                      ", but this process was started "
                      "without a launcher: start one process per node with srun, mpirun or cohortrun --nnodes ",
                      num_nodes);
    return;
  }
  if (devices == 0) return;  // "auto": the launcher's world as it is
  const int64_t expected = int64_t(devices) * num_nodes;
  const std::string tasks = env.launcher == "slurm" ? " (SLURM_NTASKS)" : "";
  COHORT_CHECK_KIND(kInvalidArgument, env.size == expected, env.launcher, " started ", env.size, " task(s)", tasks,
                    ", but the Trainer asks for devices ", devices, " x num_nodes ", num_nodes, " = ", expected,
                    ": make the launcher's tasks per node equal devices and its nodes num_nodes");
}

SelfLauncher::SelfLauncher(const LaunchEnv& env, int devices) {
  if (env.launcher != "none" || devices <= 1) return;
  start(devices);
}

void SelfLauncher::start(int devices) {
  // Before the first fork, not after hundreds of them or gigabytes of workers.
  WorkerRoom room;
  room.workers = devices;
  room.started = devices - 1;
  room.cores = usable_cores();
  room.each = resident_bytes();
  room.available = available_memory();
  room.asked = "TrainerOptions.devices " + std::to_string(devices);
  room.setting = "devices";
  room.elsewhere = "a launcher over several nodes";
  room.each_is = "this process's resident memory";
  const std::string refusal = refuse_workers(room);
  COHORT_CHECK_KIND(kInvalidArgument, refusal.empty(), refusal);
  launch::GroupLayout layout;
  layout.local_world_size = devices;
  layout.world_size = devices;
  layout.master_port = net::pick_free_port();
  layout.run_id = "cohort-trainer-" + std::to_string(::getpid());
  COHORT_CHECK_KIND(kIO, layout.master_port > 0, "self-launch: no free TCP port on this machine for the rendezvous");
  const launch::EnvVars base = launch::process_env();
  // The job's secret, as cohortrun hands its workers one (docs/security.md): the user's, else a new one.
  const std::string given = given_job_secret(base);
  layout.secret = given.empty() ? new_job_secret() : given;
  const std::vector<std::string> args = own_arguments();
  const std::string path = own_executable();
  restart_with_worker_threads(base, args, path);
  for (int rank = 1; rank < devices; ++rank) {
    auto worker = std::make_unique<Worker>();
    worker->rank = rank;
    worker->prefix = launch::expand_prefix("", rank, rank, layout.role);
    const launch::SpawnRequest request{
        path, args, launch::to_envp(self_launch_env(base, layout, rank)), {}};  // the CPUs it inherits
    try {
      worker->process = launch::WorkerProcess::spawn(request);
    } catch (const std::runtime_error& e) {
      stop_workers();
      throw Error(std::string("self-launch of rank ") + std::to_string(rank) + ": " + e.what(), ErrorKind::kIO);
    }
    workers_.push_back(std::move(worker));
  }
  // This process is rank 0: the same variables, set before cohort::init() reads them.
  for (const auto& [key, value] : self_launch_env(base, layout, 0)) {
    const auto found = base.find(key);
    if (found == base.end() || found->second != value) ::setenv(key.c_str(), value.c_str(), 1);
  }
  pump_ = std::thread([this] { pump(); });
  // A SIGTERM to this process while it records a timeline stops the workers too, as cohortrun forwards
  // one: they hand their events over at once rather than being waited for.
  timeline_on_sigterm([this] { stop_workers(); });
}

bool SelfLauncher::forward(Worker& worker, int fd, launch::LineSplitter& splitter, bool is_err) {
  char buffer[4096];
  const ssize_t got = ::read(fd, buffer, sizeof buffer);
  if (got < 0) return errno == EAGAIN || errno == EINTR;
  std::vector<std::string> lines = splitter.feed(buffer, static_cast<size_t>(got));
  if (got == 0) {
    const std::string rest = splitter.flush();
    if (!rest.empty()) lines.push_back(rest);
  }
  std::FILE* stream = is_err ? stderr : stdout;
  for (const std::string& line : lines) {
    if (is_err) worker.tail.push(line);
    if (is_err && line.rfind("error: ", 0) == 0) {
      worker.errors.push_back(line);
      continue;
    }
    std::fprintf(stream, "%s%s\n", worker.prefix.c_str(), line.c_str());
  }
  std::fflush(stream);
  return got > 0;
}

void SelfLauncher::on_exit(Worker& worker) {
  const launch::ExitStatus& status = worker.process->status();
  std::function<void(const std::string&)> hook;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status.success() || !failure_.empty() || stopping_) {
      for (const std::string& line : worker.errors)  // not again what another worker's failure said
        if (failure_.empty() || !same_refusal(failure_, line.substr(7)))
          std::fprintf(stderr, "%s%s\n", worker.prefix.c_str(), line.c_str());
      std::fflush(stderr);
      return;
    }
    const auto tail = worker.tail.lines();
    failure_ = "rank " + std::to_string(worker.rank) + " " + status.describe() +
               (tail.empty() ? "" : ": " + tail.back());
    for (auto& other : workers_)
      if (other->process->running()) send_stop(*other->process);
    hook = failure_hook_;
    changed_.notify_all();
  }
  if (hook) hook(failure_);  // failure_ is set once: read outside the lock without a race
}

void SelfLauncher::on_failure(std::function<void(const std::string&)> hook) {
  std::string failed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failure_hook_ = hook;
    failed = failure_;
  }
  if (hook && !failed.empty()) hook(failed);
}

// Forwards every worker's output and notices each exit as it happens, until all have ended.
void SelfLauncher::pump() {
  for (size_t ended = 0; ended < workers_.size();) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Worker*, bool>> owners;
    for (auto& worker : workers_) {
      for (bool is_err : {false, true}) {
        const int fd = is_err ? worker->process->err_fd() : worker->process->out_fd();
        if (fd < 0) continue;
        fds.push_back({fd, POLLIN, 0});
        owners.emplace_back(worker.get(), is_err);
      }
    }
    net::poll_fds(fds, 100);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto [worker, is_err] = owners[i];
      if (!forward(*worker, fds[i].fd, is_err ? worker->err : worker->out, is_err))
        is_err ? worker->process->close_err() : worker->process->close_out();
    }
    for (auto& worker : workers_) {
      const bool closed = worker->process->out_fd() < 0 && worker->process->err_fd() < 0;
      if (worker->ended || !closed || !worker->process->reap()) continue;
      worker->ended = true;
      ++ended;
      on_exit(*worker);
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  stopping_ = true;
  changed_.notify_all();
}

std::string SelfLauncher::failure(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, wait, [&] { return !failure_.empty() || stopping_; });
  return failure_;
}

void SelfLauncher::stop_workers() {
  for (auto& worker : workers_)
    if (worker->process && worker->process->running()) send_stop(*worker->process);
}

SelfLauncher::~SelfLauncher() {
  if (workers_.empty()) return;
  timeline_on_sigterm({});
  // On success the workers finish the same job; on an error in this process they are stopped.
  if (std::uncaught_exceptions() > 0) {
    stop_workers();
    std::unique_lock<std::mutex> lock(mutex_);
    if (!changed_.wait_for(lock, kStopGrace, [&] { return stopping_; })) {
      for (auto& worker : workers_)
        if (worker->process->running()) worker->process->signal_group(SIGKILL);
    }
  }
  if (pump_.joinable()) pump_.join();
}

}  // namespace cohort::detail
