// Gathering the timeline (see timeline.h). Clocks: the ranks' steady clocks differ between hosts, so
// each rank plays a few ping-pong rounds with rank 0 through the store and keeps the round with the
// shortest round trip: offset = rank 0's reply time - the round's midpoint (error under half that trip).
// Events travel through the store too, as one JSON text per rank, so the gather adds no collectives
// of its own to the trace and works even when the Comm is already poisoned.
#include "world/timeline.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "comm/comm_impl.h"
#include "core/log.h"
#include "core/trace_chrome.h"
#include "core/trace_recorder.h"

namespace cohort::detail {
namespace {

constexpr int kClockRounds = 8;
constexpr auto kGatherWait = std::chrono::seconds(60);
int64_t g_offset_us = 0;  // add to this rank's clock to read rank 0's

std::string key(const char* what, int rank, int round = -1) {
  std::string out = std::string("cohort/trace/") + what + "/" + std::to_string(rank);
  return round < 0 ? out : out + "/" + std::to_string(round);
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

// Rank 0: every rank's events (its own first); a rank that sends nothing in time is named and skipped.
nlohmann::json gather_events(c10d::Store& store, int size, nlohmann::json own) {
  nlohmann::json all = std::move(own);
  const auto until = std::chrono::steady_clock::now() + kGatherWait;
  std::vector<bool> got(size, false);
  got[0] = true;
  for (int left = size - 1; left > 0;) {
    for (int r = 1; r < size; ++r) {
      if (got[r] || !store.check({key("events", r)})) continue;
      const auto raw = store.get(key("events", r));
      for (auto& event : nlohmann::json::parse(raw.begin(), raw.end())) all.push_back(std::move(event));
      got[r] = true;
      --left;
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > until) {
      std::string missing;
      for (int r = 1; r < size; ++r)
        if (!got[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      COHORT_WARN("timeline: ranks ", missing, " sent no events within ", kGatherWait.count(),
                  " s; the file leaves them out");
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return all;
}

void write_file(const std::string& path, const nlohmann::json& events, int size) {
  const nlohmann::json document = {{"traceEvents", events}, {"displayTimeUnit", "ms"},
                                   {"otherData", {{"producer", "cohort"}, {"world_size", size}}}};
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary);
    COHORT_CHECK(out, "timeline: cannot write ", temporary, " (COHORT_TIMELINE=", path, ")");
    out << document.dump() << "\n";
    COHORT_CHECK(out.good(), "timeline: writing ", temporary, " failed (disk full?)");
  }
  COHORT_CHECK(std::rename(temporary.c_str(), path.c_str()) == 0, "timeline: cannot rename ", temporary, " to ",
               path);
  COHORT_INFO("timeline: wrote ", events.size(), " events of ", size, " ranks to ", path);
}

}  // namespace

void timeline_start(Comm& world) {
  if (const char* path = std::getenv("COHORT_TIMELINE")) trace::configure(path);
  if (!trace::enabled() || world.size() == 1) return;
  g_offset_us = measure_offset(*world.impl().store(), world.rank(), world.size());
}

void timeline_finish(Comm& world) {
  if (!trace::enabled()) return;
  const std::string path = trace::path();
  auto events = trace::to_chrome(trace::take_events(), world.rank(), g_offset_us);
  try {
    if (world.size() == 1) return write_file(path, events, 1);
    auto& store = *world.impl().store();
    if (world.rank() != 0) return store.set(key("events", world.rank()), bytes_of(events.dump()));
    write_file(path, gather_events(store, world.size(), std::move(events)), world.size());
  } catch (const std::exception& e) {
    // At exit nothing may throw: the timeline is lost, the run's outcome is not.
    COHORT_WARN("timeline: not written to ", path, ": ", e.what());
  }
}

}  // namespace cohort::detail
