// The timeline's per-rank event list (see trace_recorder.h). One mutex guards the list: events are few
// (a handful per collective and span), so a lock per event costs well under a microsecond.
#include "core/trace_recorder.h"

#include <chrono>
#include <mutex>
#include <unordered_set>

namespace cohort::trace::detail {
std::atomic<bool> g_recording{false};
}  // namespace cohort::trace::detail

namespace cohort::detail::trace {
namespace {

std::mutex g_mutex;
std::string g_path;
std::vector<Event> g_events;
std::unordered_set<std::string> g_texts;  // intern(): nodes never move, so their c_str() stays valid

}  // namespace

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const char* intern(const std::string& text) {
  if (text.empty()) return "";
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_texts.insert(text).first->c_str();
}

void configure(const std::string& path) {
  if (path.empty()) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_path.empty()) return;
  g_path = path;
  cohort::trace::detail::g_recording.store(true, std::memory_order_relaxed);
}

std::string path() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_path;
}

void record(Event event) {
  if (!cohort::trace::enabled()) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_events.push_back(std::move(event));
}

void record_span(const std::string& name, const char* category, int64_t begin_us, const char* phase) {
  Event event;
  event.name = intern(name);
  event.category = category;
  event.phase = phase;
  event.begin_us = begin_us;
  event.end_us = now_us();
  record(std::move(event));
}

void record_mark(const std::string& name, const char* category, const char* phase, int64_t bytes) {
  Event event;
  event.name = intern(name);
  event.category = category;
  event.phase = phase;
  event.begin_us = event.end_us = now_us();
  event.bytes = bytes;
  record(std::move(event));
}

std::vector<Event> take_events() {
  std::lock_guard<std::mutex> lock(g_mutex);
  cohort::trace::detail::g_recording.store(false, std::memory_order_relaxed);
  return std::move(g_events);
}

}  // namespace cohort::detail::trace

namespace cohort::trace {

void Span::begin(const char* name) {
  name_ = name;
  begin_us_ = cohort::detail::trace::now_us();
  active_ = true;
}

void Span::end() { cohort::detail::trace::record_span(name_, "user", begin_us_); }

}  // namespace cohort::trace
