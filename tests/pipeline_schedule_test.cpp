// Pipeline schedules as data (include/cohort/pipeline_schedule.h), without processes or tensors: the
// builders over a grid of counts, their activations and bubbles against the closed forms, broken
// schedules and the exact problem each produces, the grid, CSV and action notation, and the compute
// order against what torch.distributed.pipelining runs (tests/python/pipeline_schedule_reference.py).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include "cohort/error.h"
#include "cohort/pipeline_schedule.h"
#include "support/errors.h"
#include "support/python.h"

namespace cohort::pipeline {

// gtest prints actions in the notation (found by argument-dependent lookup: outside the anonymous namespace).
void PrintTo(const Action& action, std::ostream* out) { *out << to_string(action); }

namespace {

using ::testing::HasSubstr;
using cohort::testing::error_of;

bool is_compute(const Action& action) {
  return action.kind == ActionKind::kForward || action.kind == ActionKind::kBackward;
}

// A rank's forwards and backwards only, as "2F0,1B3".
std::string compute_row(const std::vector<Action>& actions) {
  std::string row;
  for (const Action& action : actions)
    if (is_compute(action)) row += (row.empty() ? "" : ",") + to_string(action);
  return row;
}

std::string problems_text(const std::vector<ScheduleProblem>& problems) {
  std::string text;
  for (const auto& p : problems)
    text += "rank " + std::to_string(p.rank) + " action " + std::to_string(p.index) + ": " + p.what + "\n";
  return text;
}

struct Counts {
  const char* name;
  int ranks, microbatches, stages_per_rank;
};

std::vector<Counts> every_count() {
  std::vector<Counts> all;
  for (const char* name : {"gpipe", "1f1b", "interleaved"})
    for (int ranks = 1; ranks <= 4; ++ranks)
      for (int microbatches = 1; microbatches <= 8; ++microbatches)
        for (int v = 1; v <= (std::string(name) == "interleaved" ? 3 : 1); ++v) all.push_back({name, ranks, microbatches, v});
  return all;
}

TEST(PipelineSchedule, EveryBuilderIsSoundAndCoversEachStageAndMicrobatchOnce) {
  for (const Counts& c : every_count()) {
    SCOPED_TRACE(std::string(c.name) + " ranks=" + std::to_string(c.ranks) + " microbatches=" +
                 std::to_string(c.microbatches) + " stages_per_rank=" + std::to_string(c.stages_per_rank));
    Schedule schedule = make_schedule(c.name, c.ranks, c.microbatches, c.stages_per_rank);
    ASSERT_EQ(schedule.name, c.name);
    ASSERT_EQ(schedule.stages, c.ranks * c.stages_per_rank);
    auto problems = find_problems(schedule);
    ASSERT_TRUE(problems.empty()) << problems_text(problems) << format_grid(schedule, problems);
    EXPECT_NO_THROW(validate(schedule));
    std::map<std::string, int> seen;
    int transfers = 0;
    for (int r = 0; r < c.ranks; ++r)
      for (const Action& action : schedule.actions[r]) {
        EXPECT_EQ(schedule.rank_of(action.stage), r) << to_string(action);
        is_compute(action) ? ++seen[to_string(action)] : ++transfers;
      }
    EXPECT_EQ(seen.size(), size_t(2 * schedule.stages * c.microbatches));
    for (int s = 0; s < schedule.stages; ++s)
      for (int m = 0; m < c.microbatches; ++m) {
        EXPECT_EQ(seen[to_string({s, ActionKind::kForward, m})], 1);
        EXPECT_EQ(seen[to_string({s, ActionKind::kBackward, m})], 1);
      }
    // Every boundary between two stages: a send and a receive each way per microbatch, none on one rank.
    EXPECT_EQ(transfers, c.ranks == 1 ? 0 : 4 * (schedule.stages - 1) * c.microbatches);
  }
}

TEST(PipelineSchedule, OneFOneBHoldsRanksMinusRankActivationsAndGPipeAllOfThem) {
  for (int ranks = 1; ranks <= 4; ++ranks)
    for (int microbatches = 1; microbatches <= 8; ++microbatches) {
      Simulation one_f_one_b_run = simulate(one_f_one_b(ranks, microbatches));
      Simulation gpipe_run = simulate(gpipe(ranks, microbatches));
      for (int r = 0; r < ranks; ++r) {
        EXPECT_EQ(one_f_one_b_run.peak_activations[r], std::min(ranks - r, microbatches)) << ranks << " " << microbatches;
        EXPECT_EQ(gpipe_run.peak_activations[r], microbatches);
      }
    }
  // Rank 0 of 1F1B on 4 ranks and 8 microbatches: 4 forwards, then one backward, one forward.
  EXPECT_EQ(compute_row(one_f_one_b(4, 8).actions[0]), "0F0,0F1,0F2,0F3,0B0,0F4,0B1,0F5,0B2,0F6,0B3,0F7,0B4,0B5,0B6,0B7");
}

TEST(PipelineSchedule, BubbleIsPMinusOneOverMPlusPMinusOneForGPipeAnd1F1B) {
  const SimulationCosts equal{1.0, 1.0, 0.0};
  for (int p = 1; p <= 4; ++p)
    for (int m = 1; m <= 8; ++m) {
      const double expected = double(p - 1) / double(m + p - 1);
      for (const Schedule& schedule : {gpipe(p, m), one_f_one_b(p, m)}) {
        Simulation run = simulate(schedule, equal);
        EXPECT_EQ(run.bubble_fraction, expected) << schedule.name << " p=" << p << " m=" << m;
        EXPECT_EQ(run.makespan, 2.0 * (m + p - 1)) << schedule.name << " p=" << p << " m=" << m;
      }
    }
  // A backward twice a forward (the default costs) stretches every step alike: the same fraction.
  EXPECT_EQ(simulate(one_f_one_b(4, 8)).bubble_fraction, 3.0 / 11.0);
  EXPECT_EQ(simulate(one_f_one_b(4, 8)).makespan, 3.0 * 11.0);
}

TEST(PipelineSchedule, InterleavedBubbleIsPMinusOneOverVMPlusPMinusOneAndBelow1F1B) {
  const SimulationCosts equal{1.0, 1.0, 0.0};
  for (int p = 2; p <= 4; ++p)
    for (int v = 2; v <= 3; ++v)
      for (int m = p; m <= 8; m += p) {  // Megatron-LM's condition: m a multiple of p
        Simulation run = simulate(interleaved_1f1b(p, v, m), equal);
        EXPECT_EQ(run.bubble_fraction, double(p - 1) / double(v * m + p - 1)) << "p=" << p << " v=" << v << " m=" << m;
      }
  for (int p = 2; p <= 4; ++p)
    for (int m = 1; m <= 8; ++m)
      for (int v = 2; v <= 3; ++v) {
        double interleaved = simulate(interleaved_1f1b(p, v, m), equal).bubble_fraction;
        double plain = simulate(one_f_one_b(p, m), equal).bubble_fraction;
        // One microbatch walks through every stage in turn however they are placed: nothing to overlap.
        if (m == 1) EXPECT_EQ(interleaved, plain) << "p=" << p << " v=" << v;
        else EXPECT_LT(interleaved, plain) << "p=" << p << " v=" << v << " m=" << m;
      }
  // One rank never waits, whatever it runs.
  EXPECT_EQ(simulate(interleaved_1f1b(1, 3, 5)).bubble_fraction, 0.0);
}

// The broken schedules below start from 1F1B and GPipe on 2 ranks and 2 microbatches:
//   1f1b  rank 0: 0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1
//         rank 1: 1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1
//   gpipe rank 1: 1RECV_F0,1F0,1RECV_F1,1F1,1B0,1SEND_B0,1B1,1SEND_B1
const char* kOneFOneBRank1 = "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n";

TEST(PipelineSchedule, BuildersWriteTheListsTheBrokenCasesStartFrom) {
  EXPECT_EQ(to_csv(one_f_one_b(2, 2)), std::string("0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n") + kOneFOneBRank1);
  EXPECT_EQ(to_csv(gpipe(2, 2)), "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
                                 "1RECV_F0,1F0,1RECV_F1,1F1,1B0,1SEND_B0,1B1,1SEND_B1\n");
}

// The problems of a broken schedule as text, and validate()'s message.
struct Broken {
  std::string problems;
  std::string message;
};

Broken check(const std::string& csv) {
  Schedule schedule = from_csv(csv, "broken");
  return {problems_text(find_problems(schedule)), error_of([&] { validate(schedule); })};
}

TEST(PipelineSchedule, ARemovedSendIsNamedOnBothSides) {
  Broken broken = check(std::string("0F0,0SEND_F0,0F1,0RECV_B0,0B0,0RECV_B1,0B1\n") + kOneFOneBRank1);
  EXPECT_EQ(broken.problems,
            "rank 0 action 2: 0F1 is not followed by 0SEND_F1\n"
            "rank 1 action 4: 1RECV_F1 has no matching 0SEND_F1 on rank 0\n");
  EXPECT_THAT(broken.message, HasSubstr("pipeline schedule 'broken' cannot run: rank 0, action 2 (0F1): 0F1 is not "
                                        "followed by 0SEND_F1 (and 1 more, marked below)\n"));
  EXPECT_THAT(broken.message, HasSubstr("Step 1: !!0F1        1RECV_F0 1F0  <-- rank 0, action 2: 0F1 is not followed by 0SEND_F1\n"));
  EXPECT_THAT(broken.message, HasSubstr("!!1RECV_F1 1F1  <-- rank 1, action 4: 1RECV_F1 has no matching 0SEND_F1 on rank 0\n"));
}

TEST(PipelineSchedule, ABackwardBeforeItsForward) {
  Broken broken = check("0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
                        "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1B1,1F1,1SEND_B1\n");
  EXPECT_EQ(broken.problems, "rank 1 action 5: 1B1 runs before 1F1 (a backward needs its forward's activations)\n");
  EXPECT_THAT(broken.message, HasSubstr("rank 1, action 5 (1B1): 1B1 runs before 1F1"));
  EXPECT_THAT(broken.message, HasSubstr("1RECV_F1 !!1B1  <-- rank 1, action 5: 1B1 runs before 1F1"));
}

TEST(PipelineSchedule, ASwappedPairThatMakesRanksWaitOnEachOtherIsADeadlock) {
  // GPipe's rank 0 running microbatch 0's backward before microbatch 1's forward: rank 1 (still
  // GPipe) waits for that forward before it sends the gradient rank 0 waits for.
  Broken broken = check("0F0,0SEND_F0,0RECV_B0,0B0,0F1,0SEND_F1,0RECV_B1,0B1\n"
                        "1RECV_F0,1F0,1RECV_F1,1F1,1B0,1SEND_B0,1B1,1SEND_B1\n");
  EXPECT_EQ(broken.problems,
            "rank 0 action 3: deadlock: waits for 1SEND_B0 from rank 1, which waits at its action 3 (1F1)\n"
            "rank 1 action 3: deadlock: waits for 0SEND_F1 from rank 0, which waits at its action 3 (0B0)\n");
  EXPECT_THAT(broken.message, HasSubstr("Step 2: 0RECV_B0 !!0B0 1RECV_F1 !!1F1  <-- rank 0, action 3: deadlock"));
  // Each rank's list alone is sound: only running them together finds the cycle.
  EXPECT_THAT(broken.message, HasSubstr("rank 0, action 3 (0B0): deadlock: waits for 1SEND_B0"));
}

TEST(PipelineSchedule, AStageOnTheWrongRank) {
  Broken broken = check("0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1,1F0\n"
                        "1RECV_F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n");
  EXPECT_EQ(broken.problems,
            "rank 0 action 8: stage 1 belongs to rank 1 (stage % ranks), not rank 0\n"
            "rank 1 action 7: 1F0 never runs\n");
  EXPECT_THAT(broken.message, HasSubstr("!!1F0"));
  EXPECT_THAT(broken.message, HasSubstr("End   :              !!missing  <-- rank 1, action 7: 1F0 never runs\n"));
}

TEST(PipelineSchedule, ADuplicatedMicrobatch) {
  Broken broken = check(std::string("0F0,0SEND_F0,0F0,0SEND_F0,0RECV_B0,0B0,0RECV_B1,0B1\n") + kOneFOneBRank1);
  EXPECT_EQ(broken.problems,
            "rank 0 action 2: 0F0 appears a second time (first at index 0)\n"
            "rank 0 action 3: 0SEND_F0 appears a second time (first at index 1)\n"
            "rank 0 action 8: 0F1 never runs\n"
            "rank 1 action 4: 1RECV_F1 has no matching 0SEND_F1 on rank 0\n");
  EXPECT_THAT(broken.message, HasSubstr("Step 1: !!0F0 !!0SEND_F0 1RECV_F0 1F0  <-- rank 0, action 2: 0F0 appears"));
}

TEST(PipelineSchedule, TransfersAtTheEndsOrWithinOneRankAndCountsOutOfRange) {
  EXPECT_EQ(problems_text(find_problems(from_csv("0RECV_F0,0F0,0B0\n"))),
            "rank 0 action 0: stage 0 has no previous stage to exchange with\n");
  EXPECT_EQ(problems_text(find_problems(from_csv("0F0,0B0,0SEND_B0\n"))),
            "rank 0 action 2: stage 0 has no previous stage to exchange with\n");
  Schedule one_rank = one_f_one_b(2, 1);  // 2 stages on 1 rank hand over without transfers
  one_rank.ranks = 1;
  one_rank.actions = {{Action{0, ActionKind::kForward, 0}, Action{0, ActionKind::kSendForward, 0},
                       Action{1, ActionKind::kForward, 0}, Action{1, ActionKind::kBackward, 0},
                       Action{0, ActionKind::kBackward, 0}}};
  EXPECT_EQ(problems_text(find_problems(one_rank)), "rank 0 action 1: stages 0 and 1 are both on rank 0: nothing to transfer\n");
  one_rank.actions[0].erase(one_rank.actions[0].begin() + 1);
  std::swap(one_rank.actions[0][0], one_rank.actions[0][1]);
  EXPECT_EQ(problems_text(find_problems(one_rank)), "rank 0 action 0: 1F0 runs before 0F0, whose output it takes\n");
  Schedule wrong = gpipe(1, 2);
  wrong.actions[0].push_back({3, ActionKind::kForward, 0});
  wrong.actions[0].push_back({0, ActionKind::kForward, 7});
  EXPECT_EQ(problems_text(find_problems(wrong)),
            "rank 0 action 4: stage 3 is outside 0..0 (the schedule has 1 stages)\n"
            "rank 0 action 5: microbatch 7 is outside 0..1 (the schedule has 2 microbatches)\n");
  wrong.actions.clear();
  EXPECT_EQ(problems_text(find_problems(wrong)),
            "rank 0 action 0: the schedule has ranks=1, stages=1, microbatches=2 and 0 action lists (expected counts "
            "of 1 or more, one list per rank)\n");
}

TEST(PipelineSchedule, CsvRoundTripsAndReadsTorchsDumps) {
  for (const Counts& c : every_count()) {
    Schedule built = make_schedule(c.name, c.ranks, c.microbatches, c.stages_per_rank);
    Schedule read = from_csv(to_csv(built), c.name);
    EXPECT_EQ(read.ranks, built.ranks);
    EXPECT_EQ(read.stages, built.stages);
    EXPECT_EQ(read.microbatches, built.microbatches);
    EXPECT_EQ(read.actions, built.actions);
  }
  // torch's csv.writer ends rows with \r\n, writes idle steps as empty cells and marks the gradient
  // reduction and FSDP unshard/reshard, which cohort's runtime does by itself.
  Schedule torch_dump = from_csv("0UNSHARD,0F0,,0B0,0REDUCE_GRAD,0RESHARD\r\n,1F0,1B0,1REDUCE_GRAD\r\n", "torch");
  EXPECT_EQ(torch_dump.name, "torch");
  EXPECT_EQ(to_csv(torch_dump), "0F0,0B0\n1F0,1B0\n");
  EXPECT_EQ(to_csv(add_transfers(torch_dump)), "0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n");
  EXPECT_EQ(error_of([] { from_csv("0F0,0B0\n1F0,1X0\n"); }),
            "from_csv: row 1 (rank 1): pipeline action '1X0' is not [stage][F|B|SEND_F|RECV_F|SEND_B|RECV_B][microbatch], "
            "e.g. 2F0 or 1SEND_F3");
  EXPECT_EQ(error_of([] { from_csv(""); }), "from_csv: the text has no rows (one row of actions per rank expected)");
  EXPECT_EQ(error_of([] { add_transfers(gpipe(2, 1)); }),
            "add_transfers: 0SEND_F0 is a transfer already (expected forwards and backwards only)");
}

TEST(PipelineSchedule, ActionNotation) {
  for (const char* text : {"0F0", "2B13", "1SEND_F3", "12RECV_F0", "0SEND_B7", "2RECV_B1"})
    EXPECT_EQ(to_string(parse_action(text)), text);
  EXPECT_EQ(parse_action("1SEND_F3"), (Action{1, ActionKind::kSendForward, 3}));
  EXPECT_EQ(parse_action("2RECV_B1"), (Action{2, ActionKind::kRecvBackward, 1}));
  const std::string form = " is not [stage][F|B|SEND_F|RECV_F|SEND_B|RECV_B][microbatch], e.g. 2F0 or 1SEND_F3";
  for (const char* bad : {"", "F0", "2F", "2F0x", "2SEND0", "2 F0", "-1F0", "1SEND_F"})
    EXPECT_EQ(error_of([&] { parse_action(bad); }), "pipeline action '" + std::string(bad) + "'" + form);
  EXPECT_EQ(error_of([] { parse_action("1I0"); }),
            "pipeline action '1I0' uses torch's I, which cohort does not run (it runs F, B, SEND_F, RECV_F, SEND_B, RECV_B)");
  EXPECT_EQ(error_of([] { parse_action("0REDUCE_GRAD"); }),
            "pipeline action '0REDUCE_GRAD' uses torch's REDUCE_GRAD, which cohort does not run (it runs F, B, SEND_F, "
            "RECV_F, SEND_B, RECV_B)");
  EXPECT_EQ(error_of([] { parse_action("1F99999999999"); }),
            "pipeline action '1F99999999999' has a number too large for a stage or microbatch: 99999999999");
}

TEST(PipelineSchedule, MakeScheduleRefusesUnknownNamesAndCountsBelowOne) {
  EXPECT_EQ(error_of([] { make_schedule("foo", 2, 4); }), "pipeline schedule=foo is not one of gpipe, 1f1b, interleaved");
  EXPECT_EQ(error_of([] { make_schedule("1f1b", 0, 4); }), "pipeline schedule: ranks=0 is below 1 (accepted: 1 or more)");
  EXPECT_EQ(error_of([] { make_schedule("gpipe", 2, -3); }),
            "pipeline schedule: microbatches=-3 is below 1 (accepted: 1 or more)");
  EXPECT_EQ(error_of([] { make_schedule("interleaved", 2, 4, 0); }),
            "pipeline schedule: stages_per_rank=0 is below 1 (accepted: 1 or more)");
  EXPECT_EQ(error_of([] { interleaved_1f1b(2, 0, 4); }),
            "pipeline schedule: stages_per_rank=0 is below 1 (accepted: 1 or more)");
}

TEST(PipelineSchedule, GridDrawsOneColumnPerRankAndOneRowPerStep) {
  EXPECT_EQ(format_grid(one_f_one_b(2, 2)),
            "        Rank 0       Rank 1\n"
            "Step 0: 0F0 0SEND_F0\n"
            "Step 1: 0F1 0SEND_F1 1RECV_F0 1F0\n"
            "Step 2:              1B0 1SEND_B0\n"
            "Step 3: 0RECV_B0 0B0 1RECV_F1 1F1\n"
            "Step 4:              1B1 1SEND_B1\n"
            "Step 5: 0RECV_B1 0B1\n");
  // One rank, two looped stages, torch's rounds of one microbatch: depth first.
  EXPECT_EQ(format_grid(interleaved_1f1b(1, 2, 2)),
            "        Rank 0\n"
            "Step 0: 0F0\n"
            "Step 1: 1F0\n"
            "Step 2: 1B0\n"
            "Step 3: 0F1\n"
            "Step 4: 0B0\n"
            "Step 5: 1F1\n"
            "Step 6: 1B1\n"
            "Step 7: 0B1\n");
}

// ---- torch.distributed.pipelining's order ----------------------------------------------------------

std::string reference_script() {
  const char* root = std::getenv("COHORT_SOURCE_DIR");
  std::string here = __FILE__;
  return (root != nullptr && *root != '\0' ? std::string(root) + "/tests" : here.substr(0, here.find_last_of('/'))) +
         "/python/pipeline_schedule_reference.py";
}

std::string run_command(const std::string& command, int* status) {
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  if (pipe == nullptr) return *status = -1, output;
  char buffer[1 << 16];
  for (size_t got; (got = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) output.append(buffer, got);
  *status = pclose(pipe);
  return output;
}

// A Python whose torch has torch.distributed.pipelining (2.4+): the one matching the LibTorch under
// test, else the cached 2.11 venv scripts/install-torch.sh makes; "" when there is none.
std::string python_with_pipelining() {
  const char* home = std::getenv("HOME");
  std::vector<std::string> candidates = {cohort::testing::python_with_torch()};
  if (home != nullptr) candidates.push_back(std::string(home) + "/.cache/cohort/torch-2.11.0/bin/python");
  for (const std::string& python : candidates) {
    int status = 0;
    if (access(python.c_str(), X_OK) != 0) continue;
    run_command(python + " -c 'import torch.distributed.pipelining' >/dev/null 2>&1", &status);
    if (status == 0) return python;
  }
  return "";
}

TEST(PipelineSchedule, ComputeOrderMatchesTorchDistributedPipelining) {
  const std::string python = python_with_pipelining();
  if (python.empty())
    GTEST_SKIP() << "no Python with torch.distributed.pipelining (torch 2.4 or later): neither COHORT_PYTHON nor "
                    "~/.cache/cohort/torch-2.11.0/bin/python (scripts/install-torch.sh) has it";
  int status = 0;
  const std::string output = run_command(python + " " + reference_script() + " 2>&1", &status);
  ASSERT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0) << output.substr(0, 3000);
  std::istringstream lines(output);
  int compared = 0, refused = 0;
  for (std::string line; std::getline(lines, line);) {
    std::istringstream in(line);
    std::string name, rest;
    int ranks = 0, microbatches = 0, stages_per_rank = 0;
    in >> name >> ranks >> microbatches >> stages_per_rank >> rest;
    Schedule ours = make_schedule(name, ranks, microbatches, stages_per_rank);
    if (rest == "refused:") {  // torch refuses: 1F1B with fewer microbatches than ranks, interleaved
      ++refused;               // counts its rounds do not divide; ours runs them (checked above)
      continue;
    }
    std::string expected = line.substr(line.find(": ") + 2), actual;
    for (const auto& list : ours.actions) actual += (actual.empty() ? "" : ";") + compute_row(list);
    EXPECT_EQ(actual, expected) << line.substr(0, line.find(':'));
    ++compared;
  }
  EXPECT_EQ(compared + refused, static_cast<int>(every_count().size())) << output.substr(0, 3000);
  EXPECT_GE(compared, 140);
}

}  // namespace
}  // namespace cohort::pipeline
