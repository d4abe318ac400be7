// The timeline: a per-rank record of user spans and cohort's own collectives, DDP buckets, ZeRO
// collectives and checkpoint saves, merged at cohort::shutdown() into one Chrome-trace JSON file
// (chrome://tracing, https://ui.perfetto.dev) with one process row per rank. Off by default; set
// COHORT_TIMELINE=trace.json (or HOROVOD_TIMELINE under cohort::hvd) to record. Off, a Span costs one
// relaxed atomic load. docs/timeline.md explains the rows and tools/cohort_trace summarises a file.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort::trace {

namespace detail {
/// True while this process records (set once by cohort::init when COHORT_TIMELINE names a file).
extern std::atomic<bool> g_recording;
}  // namespace detail

/// True when this process records a timeline.
inline bool enabled() { return detail::g_recording.load(std::memory_order_relaxed); }

/// A named stretch of this rank's time, from construction to destruction:
///   { cohort::trace::Span s("forward"); auto y = net->forward(x); }
/// Spans named "step" delimit steps for `cohort-trace summary`; other user spans count as compute.
class Span {
 public:
  explicit Span(const char* name) {
    if (enabled()) begin(name);
  }
  explicit Span(const std::string& name) {
    if (enabled()) begin(name.c_str());
  }
  ~Span() {
    if (active_) end();
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  void begin(const char* name);
  void end();
  std::string name_;
  int64_t begin_us_ = 0;
  bool active_ = false;
};

}  // namespace cohort::trace
COHORT_EXPORT_END
