// AsyncSaves (see async_saves.h).
#include "checkpoint/async_saves.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "checkpoint/entry.h"
#include "checkpoint/group.h"
#include "cohort/error.h"
#include "core/log.h"

namespace cohort::detail::ckpt {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The writer yields the cores to training: its CRCs and copies into the page cache run when a core
// would idle (SCHED_IDLE: a rank waiting on a collective, a GPU step), else at the lowest priority.
void lower_this_threads_priority() {
  const auto tid = static_cast<pid_t>(::syscall(SYS_gettid));
  const sched_param none{};
  if (::sched_setscheduler(tid, SCHED_IDLE, &none) != 0) (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(tid), 19);
}

}  // namespace

AsyncSaves& AsyncSaves::instance() {
  static AsyncSaves* saves = [] {
    // Registered after cohort::init()'s own, so it runs first: the save ends before the world does.
    std::atexit([] { AsyncSaves::instance().finish_at_exit(); });
    return new AsyncSaves;  // never destroyed: the writer is joined at exit, not in static teardown
  }();
  return *saves;
}

bool AsyncSaves::in_flight() {
  std::lock_guard<std::mutex> lock(mutex_);
  return !done_;
}

void AsyncSaves::wait(const std::string& waiter) {
  if (thread_.joinable()) {
    const auto before = std::chrono::steady_clock::now();
    const bool was_running = in_flight();
    thread_.join();
    if (was_running)
      COHORT_INFO(waiter, " waited ", seconds_since(before), " s for ", running_, ", still being written (",
                  seconds_since(started_), " s since it started; one save is in flight at a time)");
  }
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error = std::exchange(error_, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

void AsyncSaves::settle(Group& group, const std::string& waiter) {
  const auto statuses = group.allgather(status_of([&] { wait(waiter); }));
  const auto failed = std::count_if(statuses.begin(), statuses.end(), [](const std::string& s) { return !s.empty(); });
  if (failed == 0) return;
  // Every rank ran the same write, so all usually hold its error (as each saw it): each raises its own.
  const std::string& mine = statuses[static_cast<size_t>(group.rank())];
  if (failed == static_cast<int64_t>(statuses.size()))
    throw Error(waiter + " was not done: " + mine.substr(1), static_cast<ErrorKind>(mine[0] - '0'));
  check_statuses(statuses, group.rank(), waiter + " was not done: the save before it");
}

bool AsyncSaves::needs_writer_comm(const std::shared_ptr<Comm>& comm) const {
  return comm->size() > 1 && (writer_ == nullptr || source_.lock() != comm);
}

std::shared_ptr<Comm> AsyncSaves::writer_comm(const std::shared_ptr<Comm>& comm, bool split) {
  if (comm->size() == 1) return comm;  // no collective to keep apart
  if (split) {
    // The writer yields its cores to training, so it may be slow: its peers wait for it longer than a
    // training collective would (a dead rank is still named at once).
    const auto timeout = std::max(comm->timeout(), std::chrono::milliseconds(std::chrono::minutes(30)));
    writer_ = comm->split(0, comm->rank(), GroupOptions().name("checkpoint writer").timeout(timeout));
    source_ = comm;
  }
  return writer_;
}

void AsyncSaves::start(const std::shared_ptr<Comm>& comm, SaveJob job, bool split) {
  std::shared_ptr<Comm> writer = writer_comm(comm, split);
  running_ = job.what;
  started_ = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mutex_);  // the writer sets done_ under it: not before it is false
  done_ = false;
  try {
    thread_ = std::thread(
        [this, writer = std::move(writer), job = std::move(job)]() mutable { run(std::move(writer), std::move(job)); });
  } catch (...) {
    done_ = true;
    throw;
  }
}

void AsyncSaves::run(std::shared_ptr<Comm> comm, SaveJob job) {
  lower_this_threads_priority();
  std::exception_ptr error;
  try {
    Group group(std::move(comm));
    write_and_commit(group, job);
    COHORT_INFO("saved checkpoint ", job.final_dir.string(), " (in the background, ", seconds_since(started_), " s)");
  } catch (const Error& e) {
    // The protocol's own errors name the save; a Comm's (a rank died) gets the save's name in front.
    const std::string text = without_rank_prefix(e.what());
    const std::string named = text.rfind(job.what, 0) == 0 ? text : job.what + " failed: " + text;
    error = std::make_exception_ptr(Error("async " + named, e.kind(), e.ranks()));
  } catch (const std::exception& e) {
    error = std::make_exception_ptr(Error("async " + job.what + " failed: " + e.what(), ErrorKind::kIO));
  }
  job.written_here.clear();  // the snapshot's views go before the next save reuses it
  std::lock_guard<std::mutex> lock(mutex_);
  error_ = error;
  done_ = true;
}

void AsyncSaves::finish() {
  // The buffer and the writer's Comm go whether the last write succeeded or not.
  struct Release {
    AsyncSaves& saves;
    ~Release() {
      saves.snapshot_.release();
      saves.writer_.reset();
    }
  } release{*this};
  wait("finish_checkpoint_saves()");
}

void AsyncSaves::finish_at_exit() {
  try {
    finish();
  } catch (const std::exception& e) {
    COHORT_WARN("at exit: ", e.what());
  }
}

}  // namespace cohort::detail::ckpt
