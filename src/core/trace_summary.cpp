// The timeline summary (see trace_summary.h): interval arithmetic over each rank's events.
#include "core/trace_summary.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "cohort/error.h"
#include "core/check.h"
#include "core/json_read.h"
#include "core/text.h"

namespace cohort::detail::trace {
namespace {

using Interval = std::pair<double, double>;  // [begin, end) in microseconds
using Intervals = std::vector<Interval>;

// Sorted, disjoint intervals covering the same time as `in`.
Intervals merged(Intervals in) {
  std::sort(in.begin(), in.end());
  Intervals out;
  for (const auto& interval : in) {
    if (!out.empty() && interval.first <= out.back().second)
      out.back().second = std::max(out.back().second, interval.second);
    else out.push_back(interval);
  }
  return out;
}

// The parts of merged `from` not covered by merged `cut`.
Intervals minus(const Intervals& from, const Intervals& cut) {
  Intervals out;
  for (auto [begin, end] : from) {
    for (const auto& [cut_begin, cut_end] : cut) {
      if (cut_end <= begin || cut_begin >= end) continue;
      if (cut_begin > begin) out.push_back({begin, cut_begin});
      begin = std::max(begin, cut_end);
      if (begin >= end) break;
    }
    if (begin < end) out.push_back({begin, end});
  }
  return out;
}

// The intervals of merged `set` that meet `window`, cut to it: a binary search, then only those.
Intervals clip(const Intervals& set, Interval window) {
  Intervals out;
  auto it = std::upper_bound(set.begin(), set.end(), window.first,
                             [](double time, const Interval& interval) { return time < interval.second; });
  for (; it != set.end() && it->first < window.second; ++it) {
    const Interval cut{std::max(it->first, window.first), std::min(it->second, window.second)};
    if (cut.first < cut.second) out.push_back(cut);
  }
  return out;
}

double total(const Intervals& set) {
  double sum = 0;
  for (const auto& [begin, end] : set) sum += end - begin;
  return sum;
}

// Time covered by both merged sets: one pass over the two, as they are sorted.
double overlap(const Intervals& a, const Intervals& b) {
  double sum = 0;
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    sum += std::max(0.0, std::min(a[i].second, b[j].second) - std::max(a[i].first, b[j].first));
    if (a[i].second < b[j].second) ++i;
    else ++j;
  }
  return sum;
}

struct Agreement {
  Interval span;
  std::string op_key;  // group and sequence number: the same collective on every rank
};

struct RankEvents {
  Intervals compute, waits, transfer, steps;  // waits: DDP/ZeRO waiting on communication
  std::vector<Agreement> agreements;
};

// One rank's time, merged once for all its steps (each step then looks at its window only: a
// summary of a long run is a sort, not a pass over the whole run per step).
struct RankTime {
  Intervals compute;                  // compute not spent waiting on communication
  Intervals transfer;                 // the collectives' own time
  Intervals busy;                     // either
  std::vector<Agreement> agreements;  // sorted by begin
  double longest_agreement = 0;
};

RankTime time_of(const RankEvents& events) {
  RankTime out;
  out.compute = minus(merged(events.compute), merged(events.waits));
  out.transfer = merged(events.transfer);
  out.busy = out.compute;
  out.busy.insert(out.busy.end(), out.transfer.begin(), out.transfer.end());
  out.busy = merged(out.busy);
  out.agreements = events.agreements;
  std::sort(out.agreements.begin(), out.agreements.end(),
            [](const Agreement& a, const Agreement& b) { return a.span < b.span; });
  for (const auto& agreement : out.agreements)
    out.longest_agreement = std::max(out.longest_agreement, agreement.span.second - agreement.span.first);
  return out;
}

std::string op_key(const nlohmann::json& args) {
  return args.value("group", std::string()) + "#" + std::to_string(args.value("seq", int64_t(-1)));
}

// The rank whose "ready" mark for each op came last, and so was waited for.
using LastReady = std::map<std::string, std::pair<double, int>>;

// An event's rank ("pid" as the timeline writes it): 2^62 was read as rank 0 and -5 as a rank.
int rank_of(const nlohmann::json& event) {
  constexpr int64_t kMaxRank = 1 << 24;
  const auto found = event.find("pid");
  if (found == event.end()) return 0;
  const auto value = found->get<int64_t>();  // not a number: nlohmann's type error, a malformed event
  COHORT_CHECK_KIND(kInvalidArgument, found->is_number_integer() && value >= 0 && value <= kMaxRank, "'pid' is ",
                    json_excerpt(*found), ", not a rank (0 to ", kMaxRank, ")");
  return static_cast<int>(value);
}

// An event's "ts" or "dur" in microseconds: finite and within a century either way (1e308 summed to inf);
// a duration is not negative (it made a negative wall time).
double microseconds_of(const nlohmann::json& event, const char* key, bool may_be_negative) {
  constexpr double kCentury = 3.2e15;
  const auto found = event.find(key);
  if (found == event.end()) return 0;
  const auto value = found->get<double>();  // not a number: nlohmann's type error, a malformed event
  COHORT_CHECK_KIND(kInvalidArgument, value <= kCentury && value >= (may_be_negative ? -kCentury : 0), "'", key,
                    "' is ", json_excerpt(*found), ", not a time in microseconds",
                    may_be_negative ? "" : " (0 or more)");
  return value;
}

// A collective's "args.seq", where there is one: a whole number 0 or more (a string "5" went unread).
void check_sequence_number(const nlohmann::json& args) {
  const auto found = args.find("seq");
  if (found == args.end()) return;
  COHORT_CHECK_KIND(kInvalidArgument, found->is_number_integer() && found->get<int64_t>() >= 0, "'args.seq' is ",
                    json_excerpt(*found), ", not a collective's sequence number (0 or more)");
}

void collect(const nlohmann::json& event, std::map<int, RankEvents>& ranks, LastReady& last_ready) {
  const std::string ph = event.value("ph", "");
  if (ph != "X" && ph != "i") return;
  // A complete event is a span: without its length it read as a span of 0 (a step of no time).
  COHORT_CHECK_KIND(kInvalidArgument, ph != "X" || event.contains("dur"),
                    "a complete event (\"ph\": \"X\") without 'dur'");
  const int rank = rank_of(event);
  const double ts = microseconds_of(event, "ts", true), end = ts + microseconds_of(event, "dur", false);
  const std::string category = event.value("cat", ""), name = event.value("name", "");
  // A reference, not value()'s copy: copying recurses once per level of whatever "args" holds.
  static const nlohmann::json kNoArgs = nlohmann::json::object();
  const auto found = event.find("args");
  const nlohmann::json& args = found != event.end() ? *found : kNoArgs;
  const std::string phase = args.value("phase", "");
  auto& mine = ranks[rank];
  if (category == "user" && ph == "X") (name == "step" ? mine.steps : mine.compute).push_back({ts, end});
  if (phase == "wait" && ph == "X") mine.waits.push_back({ts, end});
  if (category != "comm") return;
  check_sequence_number(args);
  // Queued (behind earlier ops, or handed to the launcher) and transfer: the collective's own time.
  if (phase == "transfer" || phase == "queued") mine.transfer.push_back({ts, end});
  if (phase == "agreement") mine.agreements.push_back({{ts, end}, op_key(args)});
  if (phase == "ready") {
    auto& last = last_ready[op_key(args)];
    if (last.second < 0 || ts > last.first || (ts == last.first && rank < last.second)) last = {ts, rank};
  }
}

StepSummary summarize_window(int rank, int step, Interval window, const RankTime& time, const LastReady& last_ready) {
  StepSummary out;
  out.rank = rank;
  out.step = step;
  out.wall_ms = (window.second - window.first) / 1000;
  const Intervals compute = clip(time.compute, window);
  const Intervals transfer = clip(time.transfer, window);
  out.compute_ms = total(compute) / 1000;
  out.comm_ms = total(transfer) / 1000;
  out.hidden_ms = overlap(transfer, compute) / 1000;
  out.exposed_ms = out.comm_ms - out.hidden_ms;
  // Idle: agreement time with nothing else going on (an async op agreed on while backward computes,
  // or while an earlier op transfers, costs nothing), so compute + exposed + idle <= wall.
  std::map<int, double> waited_for;
  Intervals idle;
  auto agreement = std::lower_bound(
      time.agreements.begin(), time.agreements.end(), window.first - time.longest_agreement,
      [](const Agreement& a, double begin) { return a.span.first < begin; });  // none earlier reaches the window
  for (; agreement != time.agreements.end() && agreement->span.first < window.second; ++agreement) {
    const Interval span{std::max(agreement->span.first, window.first), std::min(agreement->span.second, window.second)};
    if (span.first >= span.second) continue;
    const Intervals alone = minus({span}, clip(time.busy, span));
    const double inside = total(alone);
    if (inside <= 0) continue;
    idle.insert(idle.end(), alone.begin(), alone.end());
    auto last = last_ready.find(agreement->op_key);
    if (last != last_ready.end() && last->second.second != rank) waited_for[last->second.second] += inside;
  }
  out.idle_ms = total(merged(idle)) / 1000;
  double most = 0;
  for (const auto& [other, time_waited] : waited_for)
    if (time_waited > most) most = time_waited, out.slowest_rank = other;
  return out;
}

}  // namespace

std::vector<StepSummary> summarize(const nlohmann::json& trace) {
  COHORT_CHECK_KIND(kInvalidArgument,
                    trace.is_object() && trace.contains("traceEvents") && trace["traceEvents"].is_array(),
                    "not a cohort timeline (no traceEvents array)");
  std::map<int, RankEvents> ranks;
  LastReady last_ready;
  size_t index = 0;
  for (const auto& event : trace["traceEvents"]) {
    try {
      collect(event, ranks, last_ready);
    } catch (const nlohmann::json::exception&) {  // a field of the wrong type: say which event, not the library's words
      throw Error("not a cohort timeline: traceEvents[" + std::to_string(index) + "] is not a well-formed event (" +
                      json_excerpt(event) + ")",
                  ErrorKind::kInvalidArgument);  // quoted without dumping it: it can be any size or depth
    } catch (const Error& e) {                   // a value out of range, named by rank_of or microseconds_of
      throw Error("not a cohort timeline: traceEvents[" + std::to_string(index) + "]: " + e.what(),
                  ErrorKind::kInvalidArgument);
    }
    ++index;
  }
  std::vector<StepSummary> out;
  for (auto& [rank, events] : ranks) {
    std::sort(events.steps.begin(), events.steps.end());
    if (events.steps.empty()) {
      double begin = 1e300, end = -1e300;
      for (const auto* set : {&events.compute, &events.transfer})
        for (const auto& interval : *set) begin = std::min(begin, interval.first), end = std::max(end, interval.second);
      for (const auto& agreement : events.agreements)
        begin = std::min(begin, agreement.span.first), end = std::max(end, agreement.span.second);
      if (begin <= end) out.push_back(summarize_window(rank, -1, {begin, end}, time_of(events), last_ready));
      continue;
    }
    // Steps follow one another: overlapping ones (a file's events twice, steps nested) would count
    // the same time twice in the summary.
    for (size_t s = 1; s < events.steps.size(); ++s)
      COHORT_CHECK_KIND(
          kInvalidArgument, events.steps[s].first >= events.steps[s - 1].second, "not a cohort timeline: rank ", rank,
          "'s 'step' spans overlap (one ", events.steps[s - 1].first, "..", events.steps[s - 1].second, " us, another ",
          events.steps[s].first, "..", events.steps[s].second, " us): each step must end before the next begins");
    const RankTime time = time_of(events);
    for (size_t s = 0; s < events.steps.size(); ++s)
      out.push_back(summarize_window(rank, int(s), events.steps[s], time, last_ready));
  }
  return out;
}

std::string format_summary(const std::vector<StepSummary>& steps, bool csv) {
  std::ostringstream out;
  char line[256];
  if (csv) out << "rank,step,wall_ms,compute_ms,comm_ms,hidden_ms,overlap_percent,exposed_ms,idle_ms,slowest_rank\n";
  else out << "rank  step    wall ms  compute ms  comm ms  hidden ms  overlap %  exposed ms  idle ms  waited for\n";
  for (const auto& s : steps) {
    const std::string step = s.step < 0 ? "all" : std::to_string(s.step);
    const std::string slowest = s.slowest_rank < 0 ? "-" : "rank " + std::to_string(s.slowest_rank);
    const char* format = csv ? "%d,%s,%.3f,%.3f,%.3f,%.3f,%.1f,%.3f,%.3f,%s\n"
                             : "%4d  %4s  %9.2f  %10.2f  %7.2f  %9.2f  %9.1f  %10.2f  %7.2f  %s\n";
    std::snprintf(line, sizeof(line), format, s.rank, step.c_str(), s.wall_ms, s.compute_ms, s.comm_ms, s.hidden_ms,
                  s.overlap_percent(), s.exposed_ms, s.idle_ms,
                  csv ? std::to_string(s.slowest_rank).c_str() : slowest.c_str());
    out << line;
  }
  return out.str();
}

}  // namespace cohort::detail::trace
