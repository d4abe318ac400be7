// Gathering the timeline (see timeline.h). Clocks: the ranks' steady clocks differ between hosts, so
// each rank plays a few ping-pong rounds with rank 0 through the store and keeps the round with the
// shortest round trip: offset = rank 0's reply time - the round's midpoint (error under half that trip).
// Events travel through the store too, as one JSON text per rank, so the gather adds no collectives
// of its own to the trace and works even when the Comm is already poisoned.
#include "world/timeline.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/comm_access.h"
#include "core/json_read.h"
#include "core/log.h"
#include "core/safe_file.h"
#include "core/stop_signal.h"
#include "core/trace_chrome.h"
#include "core/trace_recorder.h"

namespace cohort::detail {
namespace {

constexpr int kClockRounds = 8;
constexpr auto kGatherWait = std::chrono::seconds(60);    // a live rank still finishing its work
constexpr auto kStoppingWait = std::chrono::seconds(10);  // after SIGTERM: inside cohortrun's 30 s grace
int64_t g_offset_us = 0;                                  // add to this rank's clock to read rank 0's
// Set while a timeline is being recorded. Not trace::enabled(): handing the events over stops the
// recording, and the exit that follows a SIGTERM must still wait for that hand-over to end.
std::atomic<bool> g_started{false};

std::string key(const char* what, int rank, int round = -1) {
  std::string out = std::string("cohort/trace/") + what + "/" + std::to_string(rank);
  return round < 0 ? out : out + "/" + std::to_string(round);
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

std::vector<uint8_t> bytes_of(const std::string& text) { return std::vector<uint8_t>(text.begin(), text.end()); }

int64_t measure_offset(c10d::Store& store, int rank, int size) {
  if (rank == 0) {  // answers each rank's pings in turn with its own clock
    for (int r = 1; r < size; ++r)
      for (int round = 0; round < kClockRounds; ++round) {
        store.get(key("ping", r, round));
        store.set(key("pong", r, round), bytes_of(std::to_string(trace::now_us())));
      }
    return 0;
  }
  int64_t best_trip = INT64_MAX, best_offset = 0;
  for (int round = 0; round < kClockRounds; ++round) {
    const int64_t sent = trace::now_us();
    store.set(key("ping", rank, round), bytes_of("1"));
    const auto reply = store.get(key("pong", rank, round));
    const int64_t received = trace::now_us();
    const int64_t remote = std::stoll(std::string(reply.begin(), reply.end()));
    if (received - sent < best_trip) {
      best_trip = received - sent;
      best_offset = remote - (sent + received) / 2;
    }
  }
  return best_offset;
}

// The text between a JSON array's brackets ("" for "[]").
std::string inside(const std::string& array) {
  const size_t open = array.find('['), close = array.rfind(']');
  return open == std::string::npos || close == std::string::npos || close <= open
             ? ""
             : array.substr(open + 1, close - open - 1);
}

// Rank 0: every rank's events (its own first) as the text inside one array, and how many. A rank
// whose events are not there yet is waited for until `wait` passes, except one the control plane saw
// die: its events will never come.
std::pair<std::string, size_t> gather_events(Comm& world, std::string all, size_t total, std::chrono::seconds wait) {
  auto& store = *detail::comm_impl(world).store();
  const int size = world.size();
  const auto until = std::chrono::steady_clock::now() + wait;
  std::vector<bool> done(size, false);
  done[0] = true;
  std::vector<std::string> died, left_out;
  const auto take = [&](int r) {
    const auto raw = store.get(key("events", r));
    const std::string text(raw.begin(), raw.end());
    JsonReadOptions checked;  // nested at most kMaxJsonDepth, counted without building a document
    checked.source = "rank " + std::to_string(r) + "'s events";
    try {
      total += static_cast<size_t>(check_json_array(text, checked));
      const std::string events = inside(text);
      if (!events.empty()) all += (all.empty() ? "" : ",") + events;
    } catch (const Error&) {  // not what a rank sends: leave it out, keep the others
      left_out.push_back(std::to_string(r));
    }
    done[r] = true;
  };
  for (int left = size - 1; left > 0;) {
    for (int r = 1; r < size; ++r) {
      if (done[r] || !store.check({key("events", r)})) continue;
      take(r);
      --left;
    }
    for (int r : detail::comm_impl(world).dead_peers()) {
      if (done[r]) continue;
      if (store.check({key("events", r)})) {
        take(r);  // sent before it died
      } else {
        done[r] = true;
        died.push_back(std::to_string(r));
      }
      --left;
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > until) {
      std::string missing;
      for (int r = 1; r < size; ++r)
        if (!done[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      COHORT_WARN("timeline: ranks ", missing, " sent no events within ", wait.count(), " s; the file leaves them out");
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!died.empty())
    COHORT_WARN("timeline: ", died.size() == 1 ? "rank " : "ranks ", join(died), " died before sending ",
                died.size() == 1 ? "its" : "their", " events; the file leaves ", died.size() == 1 ? "it" : "them",
                " out");
  if (!left_out.empty())
    COHORT_WARN("timeline: the events of ranks ", join(left_out), " are not JSON; the file leaves them out");
  return {std::move(all), total};
}

// The file: the events' text spliced into the document as it is, never parsed into one.
void write_file(const std::string& path, const std::string& events, size_t count, int size) {
  write_file_safely(path, "{\"traceEvents\":[" + events + "],\"displayTimeUnit\":\"ms\",\"otherData\":{" +
                              "\"producer\":\"cohort\",\"world_size\":" + std::to_string(size) + "}}\n");
  COHORT_INFO("timeline: wrote ", count, " events of ", size, " ranks to ", path);
}

// Rank r > 0: its events to the store for rank 0. Said as what failed (the store gone with rank 0,
// say), not as a file this rank never writes.
void send_events(c10d::Store& store, int rank, const std::string& events) {
  try {
    store.set(key("events", rank), bytes_of(events));
    store.check({key("events", rank)});  // a round trip: the store has it before this rank goes
  } catch (const std::exception& e) {
    COHORT_WARN("timeline: this rank's events could not be sent to rank 0 (", json_error_text(e),
                "); the file leaves them out");
  }
}

// Hands this rank's events over (rank r > 0: to the store; rank 0: gathers and writes), once per
// recording: at shutdown, or on SIGTERM (then waiting for the others at most kStoppingWait).
std::mutex g_finish_mutex;
bool g_finished = false;

void finish(Comm& world, std::chrono::seconds wait) {
  std::lock_guard<std::mutex> lock(g_finish_mutex);
  if (g_finished) return;
  g_finished = true;
  const std::string path = trace::path();
  try {
    size_t count = 0;
    const std::string events = trace::to_chrome_text(trace::take_events(), world.rank(), g_offset_us, &count);
    if (world.size() == 1) return write_file(path, inside(events), count, 1);
    auto& store = *detail::comm_impl(world).store();
    if (world.rank() != 0) return send_events(store, world.rank(), events);
    const auto [all, total] = gather_events(world, inside(events), count, wait);
    write_file(path, all, total, world.size());
  } catch (const std::exception& e) {
    // At exit nothing may throw: the timeline is lost, the run's outcome is not.
    COHORT_WARN("timeline: not written to ", path, ": ", json_error_text(e));  // never nlohmann's own tag
  }
}

// SIGTERM or SIGINT while recording (cohortrun stopping the job after a rank failed, scancel, a time
// limit, Ctrl-C): the handler only wakes a thread through a pipe with the signal's number; the thread
// hands the events over as at shutdown, then ends the process by that signal as before. A program
// with its own handler for a signal keeps it.
constexpr int kStopSignals[] = {SIGTERM, SIGINT};
int g_wake[2] = {-1, -1};
std::mutex g_on_sigterm_mutex;
std::function<void()> g_on_sigterm;  // timeline_on_sigterm's
std::thread* g_watcher = nullptr;    // never destroyed: a joinable std::thread at exit would terminate

void on_stop_signal(int signal) {
  const char wake = static_cast<char>(signal);
  (void)!::write(g_wake[1], &wake, 1);
}

void watch_stop_signals(Comm& world) {
  std::vector<int> watched;
  for (int signal : kStopSignals) {
    struct sigaction current {};
    if (::sigaction(signal, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) watched.push_back(signal);
  }
  if (watched.empty() || ::pipe2(g_wake, O_CLOEXEC) != 0) return;
  g_watcher = new std::thread([&world] {
    char why = 0;
    while (::read(g_wake[0], &why, 1) < 0 && errno == EINTR) {
    }
    if (why == 0) return;  // shutdown: nothing to do
    note_stop_signal(why);
    {
      std::lock_guard<std::mutex> lock(g_on_sigterm_mutex);
      if (g_on_sigterm) g_on_sigterm();
    }
    // This rank stops training now, and its peers are told: a signal to this process alone (a kill of
    // one rank) would otherwise leave them training while this rank waits for their events.
    world.abort("this rank hands its timeline over and ends");
    finish(world, kStoppingWait);
    ::signal(why, SIG_DFL);
    ::raise(why);
  });
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int signal : watched) ::sigaction(signal, &action, nullptr);
}

void stop_watching() {
  if (g_watcher == nullptr) return;
  for (int signal : kStopSignals) {
    struct sigaction current {};
    if (::sigaction(signal, nullptr, &current) == 0 && current.sa_handler == on_stop_signal) ::signal(signal, SIG_DFL);
  }
  const char stop = 0;
  (void)!::write(g_wake[1], &stop, 1);
  g_watcher->join();  // a signal already taken is finished first (and ends the process)
  delete g_watcher;
  g_watcher = nullptr;
  ::close(g_wake[0]);
  ::close(g_wake[1]);
}

}  // namespace

void timeline_start(Comm& world) {
  if (const char* path = std::getenv("COHORT_TIMELINE")) trace::configure(path);
  if (!trace::enabled()) return;
  if (world.rank() == 0) {
    try {  // said at the start, not after the whole run: a temporary made and removed where the file goes
      SafeFile probe(trace::path());
    } catch (const Error& e) {
      COHORT_WARN("timeline: ", e.what(), "; the timeline will not be written there");
    }
  }
  {
    std::lock_guard<std::mutex> lock(g_finish_mutex);
    g_finished = false;
  }
  if (world.size() > 1) g_offset_us = measure_offset(*detail::comm_impl(world).store(), world.rank(), world.size());
  watch_stop_signals(world);
  g_started = true;
}

// At shutdown, also the exit of a program whose main thread failed (a peer gone) while a SIGTERM's
// hand-over runs on the watcher: finish() then waits for that hand-over instead of ending the process
// under it.
void timeline_on_sigterm(std::function<void()> stop) {
  std::lock_guard<std::mutex> lock(g_on_sigterm_mutex);
  g_on_sigterm = std::move(stop);
}

void timeline_finish(Comm& world) {
  if (!g_started.exchange(false)) return;
  finish(world, kGatherWait);
  stop_watching();
}

}  // namespace cohort::detail
