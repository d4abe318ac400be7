// The timeline (include/cohort/trace.h, docs/timeline.md): the summary's interval arithmetic on a
// hand-made trace; a scripted two-rank workload (known sleeps in spans, one rank late) whose file
// parses, has well-formed events, collective phases in order, and a summary that matches the times
// the ranks measured themselves within 10%; HOROVOD_TIMELINE under cohort::hvd; off by default; the
// file written safely (a device or a planted link never written through, nothing left by a failed
// write, invalid UTF-8 in a span's name replaced), a dead rank not waited for, and a job stopped by
// SIGTERM still leaving its timeline; hostile files (deep, huge, not JSON) refused by the summary.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "cohort/horovod.h"
#include "cohort/trace.h"
#include "cohort/world.h"
#include "comm/comm_access.h"
#include "core/trace_summary.h"
#include "support/errors.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace timeline_test {

namespace fs = std::filesystem;
using cohort::detail::trace::StepSummary;
using cohort::detail::trace::summarize;
using cohort::testing::report;
using cohort::testing::run_ranks;

namespace {

// The test's directory, made once by the test process (its rank processes re-run the test body and
// read it back: a directory of their own would be left behind in /tmp).
fs::path fresh_dir(cohort::testing::RanksOptions& options, const std::string& name) {
  return cohort::testing::shared_temp_dir(options, "TIMELINE_TEST_DIR", "cohort-timeline-" + name + "-");
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "no file " << path;
  return nlohmann::json::parse(in);
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

nlohmann::json span(int pid, const std::string& cat, const std::string& name, double ts, double dur,
                    nlohmann::json args = nlohmann::json::object()) {
  return {{"ph", "X"},    {"pid", pid}, {"tid", 0},   {"cat", cat},
          {"name", name}, {"ts", ts},   {"dur", dur}, {"args", args}};
}

// Every complete event has a duration >= 0; every B has its E on the same row; each collective's
// phases come in the order queued, ready, agreement, transfer, done on each rank.
void expect_well_formed(const nlohmann::json& events, int ranks) {
  std::map<std::pair<int, int>, int> open;
  std::map<std::pair<int, std::string>, std::vector<std::pair<std::string, double>>> phases;
  std::set<int> named;
  for (const auto& e : events) {
    const std::string ph = e["ph"].get<std::string>();
    const int pid = e["pid"].get<int>();
    if (ph == "M" && e["name"] == "process_name") {
      named.insert(pid);
      EXPECT_EQ(e["args"]["name"].get<std::string>(), "rank " + std::to_string(pid));
    }
    if (ph == "B") ++open[{pid, e["tid"].get<int>()}];
    if (ph == "E") --open[{pid, e["tid"].get<int>()}];
    if (ph == "X") EXPECT_GE(e["dur"].get<double>(), 0) << e.dump();
    if (e.value("cat", "") != "comm") continue;
    const auto& args = e["args"];
    const std::string key = args.value("group", "") + "#" + std::to_string(args["seq"].get<int64_t>());
    phases[{pid, key}].push_back({args["phase"].get<std::string>(), e["ts"].get<double>()});
    EXPECT_TRUE(args.contains("transport") && args.contains("bytes") && args.contains("op")) << e.dump();
  }
  EXPECT_EQ(int(named.size()), ranks);
  for (const auto& [row, depth] : open) EXPECT_EQ(depth, 0) << "rank " << row.first << " row " << row.second;
  ASSERT_FALSE(phases.empty());
  const std::vector<std::string> order = {"queued", "ready", "agreement", "transfer", "done"};
  for (const auto& [op, list] : phases) {
    std::map<std::string, double> start;
    for (const auto& [phase, ts] : list) start[phase] = ts;
    ASSERT_EQ(list.size(), order.size()) << "rank " << op.first << " op " << op.second;
    ASSERT_EQ(start.size(), order.size()) << "rank " << op.first << " op " << op.second;
    for (size_t i = 0; i + 1 < order.size(); ++i)
      EXPECT_LE(start.at(order[i]), start.at(order[i + 1])) << "rank " << op.first << " op " << op.second;
  }
}

// The ranks with a process row in `events`.
std::set<int> rows_of(const nlohmann::json& events) {
  std::set<int> out;
  for (const auto& e : events)
    if (e["ph"] == "M" && e["name"] == "process_name") out.insert(e["pid"].get<int>());
  return out;
}

// cohort-trace summary: the table, the CSV (a header and a line per rank and step), and its errors.
void expect_tool_prints_the_summary(const fs::path& trace, int lines) {
  const std::string tool = "tools/cohort_trace/cohort-trace";
  const auto table = cohort::testing::run_tool(tool, "summary " + trace.string());
  EXPECT_EQ(table.code, 0) << table.out;
  EXPECT_NE(table.out.find("waited for"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("rank 1"), std::string::npos) << table.out;
  const auto csv = cohort::testing::run_tool(tool, "summary " + trace.string() + " --csv");
  EXPECT_EQ(csv.code, 0) << csv.out;
  EXPECT_EQ(csv.out.rfind("rank,step,wall_ms,compute_ms,comm_ms,hidden_ms,overlap_percent,", 0), 0u) << csv.out;
  EXPECT_EQ(std::count(csv.out.begin(), csv.out.end(), '\n'), lines + 1) << csv.out;
  const fs::path not_a_trace = trace.parent_path() / "other.json";
  std::ofstream(not_a_trace) << "{\"a\": 1}";
  const auto bad = cohort::testing::run_tool(tool, "summary " + not_a_trace.string());
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(
      bad.out.find("cohort-trace: error: " + not_a_trace.string() + ": not a cohort timeline (no traceEvents array)"),
      std::string::npos)
      << bad.out;
  EXPECT_EQ(cohort::testing::run_tool(tool, "summary").code, 2);
}

}  // namespace

// Two ranks: rank 0 computes 0-100 us and transfers 50-150 (half hidden); it then waits 150-250 in an
// agreement that rank 1 joined last (its ready mark is latest).
TEST(TimelineSummary, IntervalArithmeticOnAHandMadeTrace) {
  nlohmann::json trace = {{"traceEvents", nlohmann::json::array()}};
  auto& events = trace["traceEvents"];
  events.push_back(span(0, "user", "forward", 0, 60));
  events.push_back(span(0, "user", "backward", 40, 60));  // overlaps forward: counted once
  events.push_back(span(0, "comm", "allreduce", 50, 100, {{"phase", "transfer"}, {"seq", 0}}));
  events.push_back(span(0, "comm", "allreduce", 150, 100, {{"phase", "agreement"}, {"seq", 1}}));
  events.push_back({{"ph", "i"}, {"pid", 0}, {"cat", "comm"}, {"ts", 150}, {"args", {{"phase", "ready"}, {"seq", 1}}}});
  events.push_back({{"ph", "i"}, {"pid", 1}, {"cat", "comm"}, {"ts", 245}, {"args", {{"phase", "ready"}, {"seq", 1}}}});
  events.push_back(span(1, "comm", "allreduce", 245, 5, {{"phase", "agreement"}, {"seq", 1}}));
  const auto steps = summarize(trace);
  ASSERT_EQ(steps.size(), 2u);
  const StepSummary& r0 = steps[0];
  EXPECT_EQ(r0.step, -1);
  EXPECT_DOUBLE_EQ(r0.wall_ms, 0.25);
  EXPECT_DOUBLE_EQ(r0.compute_ms, 0.1);
  EXPECT_DOUBLE_EQ(r0.comm_ms, 0.1);
  EXPECT_DOUBLE_EQ(r0.hidden_ms, 0.05);
  EXPECT_DOUBLE_EQ(r0.exposed_ms, 0.05);
  EXPECT_DOUBLE_EQ(r0.overlap_percent(), 50);
  EXPECT_DOUBLE_EQ(r0.idle_ms, 0.1);
  EXPECT_EQ(r0.slowest_rank, 1);
  EXPECT_EQ(steps[1].slowest_rank, -1);  // rank 1 was the last: it waited for nobody
  EXPECT_THROW(summarize(nlohmann::json::object()), cohort::Error);
}

// A long run: each step is summarized from its own window, so the summary grows with the run, not
// with its cube (hostile pass 3, D11: 900 steps of a GPT ran past 300 s; this 2000-step run took
// longer than ctest's timeout before, a second now). Every step the same: every row the same numbers.
TEST(TimelineSummary, ALongRunIsSummarizedStepByStep) {
  constexpr int kSteps = 2000;
  nlohmann::json trace = {{"traceEvents", nlohmann::json::array()}};
  auto& events = trace["traceEvents"];
  for (int rank = 0; rank < 2; ++rank) {
    for (int s = 0; s < kSteps; ++s) {
      const double t = s * 1000.0;
      events.push_back(span(rank, "user", "step", t, 900));
      for (int k = 0; k < 4; ++k) {
        const double begin = t + k * 200;
        events.push_back(span(rank, "user", "forward", begin, 150));
        events.push_back(
            span(rank, "comm", "allreduce", begin + 100, 20, {{"phase", "agreement"}, {"seq", s * 4 + k}}));
        events.push_back(span(rank, "comm", "allreduce", begin + 120, 60, {{"phase", "transfer"}, {"seq", s * 4 + k}}));
      }
    }
  }
  const auto steps = summarize(trace);
  ASSERT_EQ(steps.size(), 2u * kSteps);
  for (const StepSummary& step : {steps.front(), steps.back()}) {
    EXPECT_DOUBLE_EQ(step.wall_ms, 0.9);
    EXPECT_DOUBLE_EQ(step.compute_ms, 0.6);  // 4 x 150 us
    EXPECT_DOUBLE_EQ(step.comm_ms, 0.24);    // 4 x 60 us
    EXPECT_DOUBLE_EQ(step.hidden_ms, 0.12);  // 4 x 30 us under the forward
    EXPECT_DOUBLE_EQ(step.idle_ms, 0.0);     // every agreement under compute
  }
  EXPECT_EQ(steps.back().step, kSteps - 1);
}

// DDP's bucket wait inside a user's backward span is waiting on communication, not compute; an
// agreement while computing is not idle time.
TEST(TimelineSummary, WaitsInsideUserSpansAreNotCompute) {
  nlohmann::json trace = {{"traceEvents", nlohmann::json::array()}};
  auto& events = trace["traceEvents"];
  events.push_back(span(0, "user", "step", 0, 200));
  events.push_back(span(0, "user", "backward", 0, 100));
  events.push_back(span(0, "ddp", "bucket wait", 60, 20, {{"phase", "wait"}}));
  events.push_back(span(0, "zero", "gather wait", 90, 30, {{"phase", "wait"}}));
  events.push_back(span(0, "comm", "allreduce", 50, 40, {{"phase", "transfer"}, {"seq", 0}}));
  // An agreement under compute is not idle; one after everything is.
  events.push_back(span(0, "comm", "allreduce", 20, 35, {{"phase", "agreement"}, {"seq", 1}}));
  events.push_back(span(0, "comm", "allreduce", 95, 30, {{"phase", "agreement"}, {"seq", 2}}));
  const auto steps = summarize(trace);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].step, 0);
  EXPECT_DOUBLE_EQ(steps[0].wall_ms, 0.2);
  EXPECT_DOUBLE_EQ(steps[0].compute_ms, 0.07);  // 0-60 and 80-90
  EXPECT_DOUBLE_EQ(steps[0].hidden_ms, 0.02);   // 50-60 and 80-90
  EXPECT_DOUBLE_EQ(steps[0].exposed_ms, 0.02);  // 60-80
  EXPECT_DOUBLE_EQ(steps[0].idle_ms, 0.03);     // 95-125
}

// Issue 39: an event nested 100,000 deep was dumped whole (recursively) to quote it, and a huge one
// would be too: the quote is its first 200 characters, serialized no further.
TEST(TimelineSummary, ADeepOrHugeEventIsQuotedBoundedly) {
  nlohmann::json deep = nlohmann::json::array();
  for (int i = 0; i < 100000; ++i) {  // moved in, never copied: a copy recurses once per level
    nlohmann::json outer = nlohmann::json::array();
    outer.push_back(std::move(deep));
    deep = std::move(outer);
  }
  nlohmann::json trace = {{"traceEvents", nlohmann::json::array()}};
  trace["traceEvents"].push_back(std::move(deep));
  EXPECT_EQ(cohort::testing::error_of([&] { summarize(trace); }),
            "not a cohort timeline: traceEvents[0] is not a well-formed event (" + std::string(200, '[') + "...)");
  nlohmann::json huge = {{"ph", "X"}, {"dur", 1}, {"pid", "zero"}, {"args", std::string(10'000'000, 'a')}};
  trace["traceEvents"] = nlohmann::json::array({span(0, "user", "step", 0, 1)});
  trace["traceEvents"].push_back(std::move(huge));
  EXPECT_EQ(cohort::testing::error_of([&] { summarize(trace); }),
            R"(not a cohort timeline: traceEvents[1] is not a well-formed event ({"args":")" + std::string(191, 'a') +
                "...)");
}

// Issue 39: `cohort-trace summary` on a 200 KB file of nested arrays died of SIGSEGV; it is refused
// while parsing, in one line, and a file that is not JSON is named in cohort's words.
TEST(TimelineSummary, TheToolRefusesADeeplyNestedFileInOneLine) {
  char pattern[] = "/tmp/cohort-trace-deep-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const fs::path dir = pattern;
  std::ofstream(dir / "trd.json") << "{\"traceEvents\":" << std::string(100000, '[') << std::string(100000, ']') << "}";
  std::ofstream(dir / "cut.json") << "{\"traceEvents\": [";
  const std::string tool = "tools/cohort_trace/cohort-trace";
  const auto deep = cohort::testing::run_tool(tool, "summary " + (dir / "trd.json").string());
  EXPECT_EQ(deep.code, 1) << deep.out;
  EXPECT_EQ(deep.out, "cohort-trace: error: " + (dir / "trd.json").string() +
                          ": not a cohort timeline: objects and arrays nested more than 64 levels deep\n");
  // Hostile pass 7, M2: events of no cohort category, or none, printed a bare header with exit 0.
  std::ofstream(dir / "other.json") << R"({"traceEvents":[{"ph":"X","name":"step","pid":0,"tid":0,"ts":1,"dur":5}]})";
  std::ofstream(dir / "empty.json") << R"({"traceEvents":[]})";
  for (const char* name : {"other.json", "empty.json"}) {
    const auto none = cohort::testing::run_tool(tool, "summary " + (dir / name).string());
    EXPECT_EQ(none.code, 1) << none.out;
    EXPECT_EQ(none.out, "cohort-trace: error: " + (dir / name).string() +
                            ": it holds no step of a cohort timeline (no 'step' span of a cohort category): is it a "
                            "file COHORT_TIMELINE wrote?\n");
  }
  const auto cut = cohort::testing::run_tool(tool, "summary " + (dir / "cut.json").string());
  EXPECT_EQ(cut.code, 1) << cut.out;
  EXPECT_EQ(cut.out, "cohort-trace: error: " + (dir / "cut.json").string() +
                         ": not a cohort timeline: not valid JSON: parse error at line 1, column 18: syntax error "
                         "while parsing value - unexpected end of input; expected '[', '{', or a literal\n");
  fs::remove_all(dir);
}

// Hostile pass 4, D7: a pid of 2^62 was summarised as rank 0, -5 as rank -5, a negative duration gave
// a negative wall time and 1e308 an infinite one; each is now refused naming the event and the value.
// An unknown subcommand is named, as cohort-ckpt names one.
TEST(TimelineSummary, OutOfRangeRanksAndTimesAreRefusedNamingThem) {
  const auto error = [](nlohmann::json event) {
    nlohmann::json trace = {{"traceEvents", nlohmann::json::array({span(0, "user", "step", 0, 10), event})}};
    return cohort::testing::error_of([&] { summarize(trace); });
  };
  nlohmann::json far = span(0, "user", "x", 0, 1);
  far["pid"] = int64_t(1) << 62;
  EXPECT_EQ(error(far),
            "not a cohort timeline: traceEvents[1]: 'pid' is 4611686018427387904, not a rank (0 to 16777216)");
  EXPECT_EQ(error(span(-5, "user", "x", 0, 1)),
            "not a cohort timeline: traceEvents[1]: 'pid' is -5, not a rank (0 to 16777216)");
  EXPECT_EQ(error(span(0, "user", "x", 0, -50)),
            "not a cohort timeline: traceEvents[1]: 'dur' is -50.0, not a time in microseconds (0 or more)");
  EXPECT_EQ(error(span(0, "user", "x", 1e308, 1)),
            "not a cohort timeline: traceEvents[1]: 'ts' is 1e+308, not a time in microseconds");
  // Hostile pass 6: a step without 'dur' read as a step of no time, a string sequence number went
  // unread, and a step listed twice counted its time twice.
  nlohmann::json no_dur = span(0, "user", "step", 20, 5);
  no_dur.erase("dur");
  EXPECT_EQ(error(no_dur), "not a cohort timeline: traceEvents[1]: a complete event (\"ph\": \"X\") without 'dur'");
  nlohmann::json string_seq = span(0, "comm", "allreduce", 20, 5);
  string_seq["args"] = {{"phase", "transfer"}, {"seq", "5"}};
  EXPECT_EQ(error(string_seq),
            "not a cohort timeline: traceEvents[1]: 'args.seq' is \"5\", not a collective's sequence number (0 or more)");
  EXPECT_EQ(error(span(0, "user", "step", 0, 10)),
            "not a cohort timeline: rank 0's 'step' spans overlap (one 0..10 us, another 0..10 us): each step must end "
            "before the next begins");
  nlohmann::json steps_in_turn = {{"traceEvents", {span(0, "user", "step", 0, 10), span(0, "user", "step", 10, 10)}}};
  EXPECT_EQ(summarize(steps_in_turn).size(), 2u);
  const auto unknown = cohort::testing::run_tool("tools/cohort_trace/cohort-trace", "bogus x.json");
  EXPECT_EQ(unknown.code, 2);
  EXPECT_EQ(unknown.out, "cohort-trace: error: unknown subcommand 'bogus': expected summary\n");
}

// Each step: a compute span (rank 1 sleeps 100 ms longer), then an allreduce of 64 MiB (tens of ms: the
// call's fixed costs outside the recorded phases, a ms or two under load, stay within the 10%).
TEST(Timeline, ScriptedWorkloadSummaryMatchesMeasuredTimes) {
  cohort::testing::RanksOptions options;
  const fs::path dir = fresh_dir(options, "scripted");
  options.env["COHORT_TIMELINE"] = (dir / "trace.json").string();
  constexpr int kSteps = 3;
  auto results = run_ranks(
      2,
      [](int rank, int) {
        auto& comm = cohort::init().comm();
        auto data = torch::ones({1 << 24});
        for (int step = 0; step < kSteps; ++step) {
          cohort::trace::Span step_span("step");
          const auto compute_start = std::chrono::steady_clock::now();
          {
            cohort::trace::Span compute("compute");
            std::this_thread::sleep_for(std::chrono::milliseconds(rank == 1 ? 160 : 60));
          }
          const double compute_ms = ms_since(compute_start);
          const auto comm_start = std::chrono::steady_clock::now();
          comm.allreduce(data);
          report(std::to_string(compute_ms) + " " + std::to_string(ms_since(comm_start)));
        }
        cohort::shutdown();
      },
      options);
  const auto trace = read_json(dir / "trace.json");
  expect_well_formed(trace["traceEvents"], 2);
  const auto steps = summarize(trace);
  ASSERT_EQ(steps.size(), size_t(2 * kSteps));
  std::map<int, std::vector<std::pair<double, double>>> measured;  // rank -> (compute ms, allreduce ms)
  for (const auto& result : results)
    for (const auto& line : result.reports) {
      const auto space = line.find(' ');
      measured[result.rank].push_back({std::stod(line.substr(0, space)), std::stod(line.substr(space + 1))});
    }
  ASSERT_EQ(measured[0].size(), size_t(kSteps));
  ASSERT_EQ(measured[1].size(), size_t(kSteps));
  for (const auto& s : steps) {
    const auto [compute, allreduce] = measured[s.rank][size_t(s.step)];
    EXPECT_NEAR(s.compute_ms, compute, 0.1 * compute) << "rank " << s.rank << " step " << s.step;
    EXPECT_GT(s.comm_ms, 0) << "rank " << s.rank << " step " << s.step;
    // The call also hashes the fingerprint and hands the op to the launcher and back: 10%.
    EXPECT_NEAR(s.comm_ms + s.idle_ms, allreduce, 0.1 * allreduce) << "rank " << s.rank << " step " << s.step;
    if (s.rank == 0 && s.step > 0) {  // after step 0 both ranks start a step together
      const double late = measured[1][size_t(s.step)].first - compute;
      EXPECT_NEAR(s.idle_ms, late, 0.1 * late) << "step " << s.step;
      EXPECT_EQ(s.slowest_rank, 1) << "step " << s.step;
    }
  }
  expect_tool_prints_the_summary(dir / "trace.json", 2 * kSteps);
  fs::remove_all(dir);
}

TEST(Timeline, HorovodTimelineVariableWritesTheFile) {
  cohort::testing::RanksOptions options;
  const fs::path dir = fresh_dir(options, "hvd");
  options.env["HOROVOD_TIMELINE"] = (dir / "hvd.json").string();
  run_ranks(
      2,
      [](int, int) {
        cohort::hvd::init();
        cohort::hvd::allreduce(torch::ones({4}), "x");
        cohort::hvd::shutdown();
      },
      options);
  const auto trace = read_json(dir / "hvd.json");
  expect_well_formed(trace["traceEvents"], 2);
  fs::remove_all(dir);
}

TEST(Timeline, OffByDefaultRecordsNothingAndWritesNoFile) {
  cohort::testing::RanksOptions options;
  const fs::path dir = fresh_dir(options, "off");
  run_ranks(
      2,
      [](int, int) {
        ::unsetenv("COHORT_TIMELINE");
        fs::current_path(std::getenv("TIMELINE_TEST_DIR"));
        auto& comm = cohort::init().comm();
        {
          cohort::trace::Span span("step");
          comm.allreduce(torch::ones({4}));
        }
        EXPECT_FALSE(cohort::trace::enabled());
        cohort::shutdown();
      },
      options);
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

// Issue 28: COHORT_TIMELINE=/dev/null turned the device into a regular file (as root), and a link
// planted at `trace.json.tmp` had the write go through it.
TEST(TimelineFile, ADeviceIsRefusedAndAPlantedLinkIsNotFollowed) {
  cohort::testing::RanksOptions options;
  const fs::path dir = fresh_dir(options, "device");
  options.env["COHORT_TIMELINE"] = "/dev/null";
  const auto body = [](int, int) {
    auto& comm = cohort::init().comm();
    {
      cohort::trace::Span span("step");
      comm.barrier();
    }
    cohort::shutdown();
  };
  auto results = run_ranks(1, body, options);
  const std::string why = "/dev/null is a character device, not a regular file: cohort writes regular files only";
  EXPECT_NE(results[0].output.find("timeline: " + why + "; the timeline will not be written there"), std::string::npos)
      << results[0].output;
  EXPECT_NE(results[0].output.find("timeline: not written to /dev/null: " + why), std::string::npos)
      << results[0].output;
  struct stat info {};
  ASSERT_EQ(::stat("/dev/null", &info), 0);
  EXPECT_TRUE(S_ISCHR(info.st_mode)) << "/dev/null is no longer a character device";

  std::ofstream(dir / "victim") << "precious";
  fs::create_symlink(dir / "victim", dir / "trace.json.tmp");
  options.env["COHORT_TIMELINE"] = (dir / "trace.json").string();
  run_ranks(1, body, options);
  EXPECT_EQ(rows_of(read_json(dir / "trace.json")["traceEvents"]), std::set<int>{0});
  std::ifstream victim(dir / "victim");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(victim), {}), "precious");

  // Hostile pass 6: a directory the file cannot be made in was said only after the whole run.
  const fs::path missing = dir / "missing" / "trace.json";
  options.env["COHORT_TIMELINE"] = missing.string();
  results = run_ranks(1, body, options);
  EXPECT_NE(results[0].output.find("timeline: cannot create a temporary file in " + (dir / "missing").string() +
                                   " to write " + missing.string() +
                                   ": No such file or directory; the timeline will not be written there"),
            std::string::npos)
      << results[0].output;
  fs::remove_all(dir);
}

// Issue 39: a span named in invalid UTF-8 made nlohmann's dump() throw, so the timeline was lost with a
// warning in the library's words ("[json.exception.type_error.316] ..."); the byte is now replaced.
TEST(TimelineFile, ASpanNamedInInvalidUtf8IsWrittenNotLost) {
  cohort::testing::RanksOptions options;
  const fs::path dir = fresh_dir(options, "utf8");
  options.env["COHORT_TIMELINE"] = (dir / "trace.json").string();
  auto results = run_ranks(
      2,
      [](int, int) {
        auto& comm = cohort::init().comm();
        {
          cohort::trace::Span span("caf\xe9");
          comm.barrier();
        }
        cohort::shutdown();
      },
      options);
  for (const auto& result : results) {
    EXPECT_EQ(result.output.find("json.exception"), std::string::npos) << result.output;
  }
  const auto trace = read_json(dir / "trace.json");
  EXPECT_EQ(rows_of(trace["traceEvents"]), (std::set<int>{0, 1}));
  int replaced = 0;  // one span per rank, its byte 0xe9 replaced by U+FFFD
  for (const auto& e : trace["traceEvents"]) replaced += e.value("name", "") == "caf\xef\xbf\xbd";
  EXPECT_EQ(replaced, 2);
  fs::remove_all(dir);
}

// A write that fails (RLIMIT_FSIZE standing in for a full disk: 20000 spans are ~2 MB, the limit 512 KiB)
// is one warning naming the file, and leaves no temporary behind.
TEST(TimelineFile, AFailedWriteLeavesNoTemporary) {
  cohort::testing::RanksOptions options;
  const fs::path dir = fresh_dir(options, "full");
  options.env["COHORT_TIMELINE"] = (dir / "trace.json").string();
  auto results = run_ranks(
      1,
      [](int, int) {
        cohort::init();
        for (int i = 0; i < 20000; ++i) cohort::trace::Span span("step");
        ::signal(SIGXFSZ, SIG_IGN);  // write() then fails with EFBIG instead of a signal
        struct rlimit limit {};
        ::getrlimit(RLIMIT_FSIZE, &limit);
        const rlim_t saved = limit.rlim_cur;
        limit.rlim_cur = 512 << 10;
        ::setrlimit(RLIMIT_FSIZE, &limit);
        cohort::shutdown();
        limit.rlim_cur = saved;
        ::setrlimit(RLIMIT_FSIZE, &limit);
      },
      options);
  const std::string path = (dir / "trace.json").string();
  EXPECT_NE(results[0].output.find("timeline: not written to " + path + ": cannot write " + path + ": File too large"),
            std::string::npos)
      << results[0].output;
  EXPECT_TRUE(fs::is_empty(dir)) << "a temporary was left behind";
  fs::remove_all(dir);
}

// Issue 28: with the timeline on, a dead rank held rank 0 at exit for 60 s (0.2 s without it). The
// control plane knows the rank died: its events will never come. (The bound is generous for a loaded
// machine; the old wait was 60 s, past the ranks' deadline.)
// Two ranks recording a timeline into `dir` (made here) take a step; then rank `killed` dies by SIGKILL
// and the other, its next allreduce failed, shuts down and reports how long that took in seconds.
std::vector<cohort::testing::RankResult> run_with_a_rank_killed(const std::string& name, int killed, fs::path& dir) {
  cohort::testing::RanksOptions options;
  dir = fresh_dir(options, name);
  options.env["COHORT_TIMELINE"] = (dir / "trace.json").string();
  options.expect_all_pass = false;
  return run_ranks(
      2,
      [killed](int rank, int) {
        auto& comm = cohort::init().comm();
        {
          cohort::trace::Span span("step");
          comm.allreduce(torch::ones({4}));
        }
        if (rank == killed) ::raise(SIGKILL);
        EXPECT_THROW(comm.allreduce(torch::ones({4})), cohort::Error);
        const auto start = std::chrono::steady_clock::now();
        cohort::shutdown();
        report(std::to_string(ms_since(start) / 1000));
      },
      options);
}

TEST(Timeline, ADeadRanksMissingEventsEndTheWaitAtOnce) {
  fs::path dir;
  const auto results = run_with_a_rank_killed("dead", 1, dir);
  ASSERT_TRUE(results[0].passed) << cohort::testing::describe(results);
  EXPECT_EQ(results[1].signal, SIGKILL);
  ASSERT_EQ(results[0].reports.size(), 1u);
  EXPECT_LT(std::stod(results[0].reports[0]), 30.0) << "rank 0 waited for the dead rank's events";
  EXPECT_NE(results[0].output.find("timeline: rank 1 died before sending its events; the file leaves it out"),
            std::string::npos)
      << results[0].output;
  EXPECT_EQ(rows_of(read_json(dir / "trace.json")["traceEvents"]), std::set<int>{0});
  fs::remove_all(dir);
}

// What a rank sends is checked (nested at most 64 deep, an array) and counted, not parsed into a
// document; text that is not an array of events is left out with a warning, the others kept.
TEST(Timeline, EventsThatAreNotJsonAreLeftOutAndTheFileWritten) {
  cohort::testing::RanksOptions options;
  const fs::path dir = fresh_dir(options, "notjson");
  options.env["COHORT_TIMELINE"] = (dir / "trace.json").string();
  options.expect_all_pass = false;
  auto results = run_ranks(
      2,
      [](int rank, int) {
        auto& comm = cohort::init().comm();
        {
          cohort::trace::Span span("step");
          comm.allreduce(torch::ones({4}));
        }
        if (rank == 1) {
          const std::string garbage = "[{\"ph\":\"X\"} not json";
          cohort::detail::comm_impl(comm).store()->set("cohort/trace/events/1",
                                                       std::vector<uint8_t>(garbage.begin(), garbage.end()));
          ::raise(SIGKILL);
        }
        EXPECT_THROW(comm.allreduce(torch::ones({4})), cohort::Error);
        cohort::shutdown();
      },
      options);
  ASSERT_TRUE(results[0].passed) << cohort::testing::describe(results);
  EXPECT_NE(results[0].output.find("timeline: the events of ranks 1 are not JSON; the file leaves them out"),
            std::string::npos)
      << results[0].output;
  const auto file = read_json(dir / "trace.json");
  EXPECT_EQ(rows_of(file["traceEvents"]), std::set<int>{0});
  EXPECT_EQ(file["otherData"]["world_size"], 2);
  fs::remove_all(dir);
}

// Two ranks recording a timeline take a stop signal after one step, each doing `then` (rank) after the
// kill; every rank must end by `signal` and the file hold both ranks' events.
void expect_stopped_job_writes_its_timeline(const std::string& name, void (*then)(int rank), int signal = SIGTERM) {
  cohort::testing::RanksOptions options;
  const fs::path dir = fresh_dir(options, name);
  options.env["COHORT_TIMELINE"] = (dir / "trace.json").string();
  options.expect_all_pass = false;
  auto results = run_ranks(
      2,
      [then, signal](int rank, int) {
        // As from a terminal: a shell running the tests in the background has them ignore SIGINT.
        ::signal(signal, SIG_DFL);
        auto& comm = cohort::init().comm();
        {
          cohort::trace::Span span("step");
          comm.allreduce(torch::ones({4}));
        }
        comm.barrier();
        then(rank);
        for (;;) ::pause();
      },
      options);
  for (const auto& result : results) EXPECT_EQ(result.signal, signal) << cohort::testing::describe(results);
  expect_well_formed(read_json(dir / "trace.json")["traceEvents"], 2);
  fs::remove_all(dir);
}

// Issue 28: a job stopped by SIGTERM (cohortrun stopping the workers, scancel) wrote no timeline. Each
// rank hands its events over and still ends by SIGTERM.
TEST(Timeline, AJobStoppedBySigtermStillWritesItsTimeline) {
  expect_stopped_job_writes_its_timeline("sigterm", [](int) { ::kill(::getpid(), SIGTERM); });
}

// Hostile pass 6: Ctrl-C (SIGINT, which cohortrun forwards to the workers) wrote no timeline and said
// nothing; it is handled as SIGTERM is, and the process still ends by SIGINT.
TEST(Timeline, AJobStoppedBySigintStillWritesItsTimeline) {
  expect_stopped_job_writes_its_timeline("sigint", [](int) { ::kill(::getpid(), SIGINT); }, SIGINT);
}

// Hostile pass 4, D2: under cohortrun both ranks take the SIGTERM; rank 1 hands its events over and
// ends, so rank 0's main thread fails (a peer gone) and exits while its SIGTERM hand-over still runs.
// That exit stopped the hand-over: no file, no warning. It now waits for it.
TEST(Timeline, AnExitDuringTheSigtermHandOverWaitsForTheFile) {
  expect_stopped_job_writes_its_timeline("sigterm_exit", [](int rank) {
    if (rank == 1) std::this_thread::sleep_for(std::chrono::seconds(1));  // rank 0 is gathering by then
    ::kill(::getpid(), SIGTERM);
    if (rank == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the hand-over has begun
      std::exit(1);                                                 // as a failed main thread does
    }
  });
}

// Hostile pass 6: with rank 0 (and the store it hosts) gone, rank 1 warned "timeline: not written to
// <path>: ... setting key failed", a file it never writes. It now says its events could not be sent.
TEST(Timeline, ARankThatCannotSendItsEventsSaysSo) {
  fs::path dir;
  const auto results = run_with_a_rank_killed("nosend", 0, dir);
  EXPECT_EQ(results[0].signal, SIGKILL);
  ASSERT_TRUE(results[1].passed) << cohort::testing::describe(results);
  EXPECT_NE(results[1].output.find("timeline: this rank's events could not be sent to rank 0 ("), std::string::npos)
      << results[1].output;
  EXPECT_EQ(results[1].output.find("not written to"), std::string::npos) << results[1].output;
  fs::remove_all(dir);
}

// Hostile pass 6, M1: a SIGTERM to rank 0 alone (a kill of one process) left it training for 10 s while
// it waited for events the others, never stopped, did not send; a job ending meanwhile was reported
// failed. The signal now stops the rank's training (its Comm aborts and tells the peers), so every rank
// stops within moments and hands its events over, and the file holds both.
TEST(Timeline, ASigtermToOneRankStopsEveryRanksTrainingAtOnce) {
  cohort::testing::RanksOptions options;
  const fs::path dir = fresh_dir(options, "sigterm_one");
  options.env["COHORT_TIMELINE"] = (dir / "trace.json").string();
  options.expect_all_pass = false;
  auto results = run_ranks(
      2,
      [](int rank, int) {
        auto& comm = cohort::init().comm();
        comm.barrier();
        const auto start = std::chrono::steady_clock::now();
        if (rank == 0) ::kill(::getpid(), SIGTERM);
        try {
          for (;;) {
            cohort::trace::Span span("step");
            comm.allreduce(torch::ones({4}));
          }
        } catch (const cohort::Error& e) {
          report(std::to_string(ms_since(start) / 1000));
          report(e.what());
        }
        cohort::shutdown();  // rank 0 then ends by the SIGTERM, once the file is written
      },
      options);
  EXPECT_EQ(results[0].signal, SIGTERM) << cohort::testing::describe(results);
  EXPECT_TRUE(results[1].passed) << cohort::testing::describe(results);
  for (const auto& result : results) {
    ASSERT_EQ(result.reports.size(), 2u) << cohort::testing::describe(results);
    EXPECT_LT(std::stod(result.reports[0]), 5.0) << "rank " << result.rank << " trained on after the SIGTERM";
    EXPECT_NE(result.reports[1].find("stopped by SIGTERM (this job was asked to stop): this rank hands its "
                                     "timeline over and ends"),
              std::string::npos)
        << result.reports[1];
  }
  EXPECT_NE(results[1].reports[1].find("because rank 0 failed"), std::string::npos) << results[1].reports[1];
  EXPECT_EQ(results[0].output.find("sent no events"), std::string::npos) << results[0].output;
  expect_well_formed(read_json(dir / "trace.json")["traceEvents"], 2);
  fs::remove_all(dir);
}

}  // namespace timeline_test
