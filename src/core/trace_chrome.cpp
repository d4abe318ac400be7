// Chrome-trace conversion of one rank's events (see trace_chrome.h).
#include "core/trace_chrome.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace cohort::detail::trace {
namespace {

// Each category's rows start at its own tid so the viewer groups them: user spans first. A constant
// table, not a static map: a SIGTERM's hand-over converts the events on the timeline's watcher thread
// while the main thread may already be in exit(), and a static first built there would be destroyed
// under it (its destructor registered after init's shutdown handler runs first).
int track_base(const std::string& category) {
  struct Base {
    const char* category;
    int tid;
  };
  static constexpr Base kBases[] = {{"user", 0}, {"ddp", 100}, {"zero", 200}, {"checkpoint", 300}, {"comm", 400}};
  for (const Base& base : kBases)
    if (category == base.category) return base.tid;
  return 900;
}

nlohmann::json args_of(const Event& event) {
  nlohmann::json args = nlohmann::json::object();
  if (*event.phase) args["phase"] = event.phase;
  if (event.seq >= 0) args["seq"] = event.seq;
  if (event.bytes >= 0) args["bytes"] = event.bytes;
  if (*event.transport) args["transport"] = event.transport;
  if (*event.group) args["group"] = event.group;
  if (*event.op) args["op"] = event.op;
  return args;
}

nlohmann::json metadata(const char* what, int rank, int tid, const std::string& name) {
  return {{"ph", "M"}, {"name", what}, {"pid", rank}, {"tid", tid}, {"args", {{"name", name}}}};
}

}  // namespace

std::string to_chrome_text(const std::vector<Event>& events, int rank, int64_t offset_us, size_t* count) {
  std::vector<const Event*> order;
  for (const auto& event : events) order.push_back(&event);
  std::stable_sort(order.begin(), order.end(), [](const Event* a, const Event* b) {
    return a->begin_us != b->begin_us ? a->begin_us < b->begin_us : a->end_us > b->end_us;
  });
  std::string out = "[";
  size_t written = 0;
  const auto add = [&](const nlohmann::json& event) {
    out += written++ == 0 ? "" : ",";
    out += event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);  // a name is the program's text
  };
  add(metadata("process_name", rank, 0, "rank " + std::to_string(rank)));
  add({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", rank}, {"tid", 0}, {"args", {{"sort_index", rank}}}});
  // Per category: the end of the last event on each row; an event takes the first row that is free.
  std::map<std::string, std::vector<int64_t>> rows;
  for (const Event* event : order) {
    const std::string category = event->category;
    const int base = track_base(category);
    nlohmann::json chrome = {{"name", event->name},
                             {"cat", category},
                             {"pid", rank},
                             {"ts", event->begin_us + offset_us},
                             {"args", args_of(*event)}};
    if (event->end_us == event->begin_us && *event->phase) {  // a mark: drawn on the category's first row
      chrome["ph"] = "i";
      chrome["s"] = "t";
      chrome["tid"] = base;
      add(chrome);
      continue;
    }
    auto& ends = rows[category];
    size_t row = 0;
    while (row < ends.size() && ends[row] > event->begin_us) ++row;
    if (row == ends.size()) {
      ends.push_back(0);
      add(metadata("thread_name", rank, base + int(row), category + " " + std::to_string(row)));
    }
    ends[row] = event->end_us;
    chrome["ph"] = "X";
    chrome["dur"] = event->end_us - event->begin_us;
    chrome["tid"] = base + int(row);
    add(chrome);
  }
  if (count != nullptr) *count = written;
  return out + "]";
}

}  // namespace cohort::detail::trace
