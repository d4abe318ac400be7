// The timeline's per-rank recorder (include/cohort/trace.h is its public face): an in-memory list of
// events, each a stretch [begin, end] of this process's steady clock in microseconds with a category
// ("user", "comm", "ddp", "zero", "checkpoint") and a few arguments. Core knows nothing of Comm: the
// merge of every rank's events into one file lives in world/timeline_merge.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cohort/trace.h"

namespace cohort::detail::trace {

using cohort::trace::enabled;

// Every text of an event is a static string or one interned by intern(): an event owns no heap
// memory. Owning strings, the recorder's small long-lived allocations landed between the large blocks a
// training step frees and reuses, split them, and glibc served each step's tensors from fresh pages
// instead (measured: ZeRO-2 MLP, 2,500 more page faults per rank and step, 30% slower with the
// timeline on; docs/BENCHMARKS.md).
struct Event {
  const char* name = "";  // "forward", "allreduce", "bucket 2 launch"
  const char* category = "user";
  const char* phase = "";  // a collective's phase: "queued", "agreement", "transfer", "done"; or ""
  int64_t begin_us = 0;
  int64_t end_us = 0;          // == begin_us for an instant (a "ready" or "done" mark)
  int64_t seq = -1;            // a collective's sequence number on its Comm
  int64_t bytes = -1;          // bytes moved, when known
  const char* transport = "";  // "shm", "gloo", "nccl" or ""
  const char* group = "";      // the Comm's group name ("" for the world)
  const char* op = "";         // a collective's full description: "allreduce(sum) float32 [3]"
};

/// A copy of `text` that lives as long as the process, one per distinct text (events repeat the same
/// few names step after step).
const char* intern(const std::string& text);

/// Microseconds on this process's steady clock (the clock every event uses).
int64_t now_us();
/// Turns recording on, with `path` the file rank 0 writes at shutdown. The first call wins (so
/// HOROVOD_TIMELINE, configured before cohort::init reads COHORT_TIMELINE, is not overridden).
void configure(const std::string& path);
/// The configured file, or "" when off.
std::string path();
/// Appends one event (thread-safe); a no-op while off.
void record(Event event);
/// Records [begin_us, now] under `category`; `phase` "wait" marks time spent waiting for communication
/// (the summary does not count it as compute even inside a user span).
void record_span(const std::string& name, const char* category, int64_t begin_us, const char* phase = "");
/// Records an instant `phase` mark ("ready", "launch") named `name` under `category`.
void record_mark(const std::string& name, const char* category, const char* phase, int64_t bytes = -1);
/// Hands over every recorded event and stops recording (the merge at shutdown).
std::vector<Event> take_events();

/// RAII span of an internal category ("ddp", "zero", "checkpoint"): free when recording is off.
class ScopedSpan {
 public:
  ScopedSpan(const char* name, const char* category, const char* phase = "")
      : name_(name), category_(category), phase_(phase) {
    if (cohort::trace::enabled()) begin_us_ = now_us();
  }
  ~ScopedSpan() {
    if (begin_us_ >= 0 && cohort::trace::enabled()) record_span(name_, category_, begin_us_, phase_);
  }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

 private:
  const char* name_;
  const char* category_;
  const char* phase_;
  int64_t begin_us_ = -1;
};

}  // namespace cohort::detail::trace
