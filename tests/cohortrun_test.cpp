// cohortrun, the torchrun-compatible launcher: its pure pieces (flags, values, worker environment,
// rendezvous rules, output routing, summary) alone, then real launches of the test workers in
// tests/workers/ checking ranks, environment, restarts, exit codes, signals and that no process
// is left behind. Every launch has a deadline; none of them asserts on timing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "cohortrun/cpu_binding.h"
#include "cohortrun/flag_values.h"
#include "cohortrun/flags.h"
#include "world/log_prefix.h"
#include "cohortrun/membership.h"
#include "cohortrun/output.h"
#include "cohortrun/summary.h"
#include "world/worker_env.h"
#include "cohortrun_command.h"
#include "cohortrun_test_paths.h"
#include "launch_helpers.h"
#include "support/multiproc.h"
#include "support/python.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace cohortrun_test {

using namespace cohort::detail::launch;
using namespace cohort::testing;
using namespace std::chrono_literals;

namespace {

// The variables torchrun sets for every worker (the list).
const std::vector<std::string> kTorchrunVariables = {
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID"};

// A temporary directory for pid files, removed at the end of the test.
struct TempDir {
  std::string path = make_temp_dir("cohortrun_test_");
  ~TempDir() { remove_tree(path); }
};

std::string endpoint() { return "127.0.0.1:" + std::to_string(free_port()); }

}  // namespace

// ---------------------------------------------------------------- pure pieces

TEST(CohortrunFlags, NormalizesTorchrunSpellings) {
  const auto line = split_command_line({"--nproc_per_node=2", "--rdzv-id", "x", "--max_restarts",
                                        "3", "-r", "3", "--nproc", "4", "./train", "--lr", "0.1"});
  EXPECT_EQ(line.flags, (std::vector<std::string>{"--nproc-per-node=2", "--rdzv-id=x",
                                                  "--max-restarts=3", "--redirects=3",
                                                  "--nproc-per-node=4"}));
  EXPECT_EQ(line.program, (std::vector<std::string>{"./train", "--lr", "0.1"}));
  EXPECT_EQ(split_command_line({"--standalone", "--", "--weird-name"}).program,
            (std::vector<std::string>{"--weird-name"}));
  EXPECT_TRUE(split_command_line({"--standalone"}).program.empty());
  EXPECT_THROW(split_command_line({"--bogus", "./train"}), UsageError);
  EXPECT_THROW(split_command_line({"--rdzv", "x", "./train"}), UsageError);  // ambiguous
  EXPECT_THROW(split_command_line({"--nnodes"}), UsageError);
  EXPECT_THROW(split_command_line({"--standalone=1", "./train"}), UsageError);
}

TEST(CohortrunFlags, ParsesGuideCommand) {
  const auto parsed = parse_command_line(
      {"--nnodes=2", "--nproc_per_node=2", "--rdzv_id=12345", "--rdzv_backend=c10d",
       "--rdzv_endpoint=host:3000", COHORT_ENV_WORKER, "a"},
      HostFacts{4, 0});
  const LaunchOptions& o = parsed.options;
  EXPECT_EQ(o.nnodes.min, 2);
  EXPECT_EQ(o.nproc, 2);
  EXPECT_EQ(o.rdzv_id, "12345");
  EXPECT_EQ(o.endpoint.host, "host");
  EXPECT_EQ(o.endpoint.port, 3000);
  EXPECT_EQ(o.args, std::vector<std::string>{"a"});
  const auto standalone = parse_command_line({"--standalone", "--nproc-per-node", "cpu",
                                              COHORT_ENV_WORKER}, HostFacts{6, 0});
  EXPECT_EQ(standalone.options.nproc, 6);
  EXPECT_EQ(standalone.options.rdzv_backend, "c10d");
  EXPECT_NE(standalone.options.rdzv_id, "none");
  EXPECT_THROW(parse_command_line({"--nnodes=2", "--rdzv-backend=c10d", COHORT_ENV_WORKER}, {}),
               UsageError);  // no endpoint
  EXPECT_THROW(parse_command_line({"--nnodes=1:2", COHORT_ENV_WORKER}, {}), UsageError);  // static
  EXPECT_THROW(parse_command_line({"--rdzv-backend=etcd", COHORT_ENV_WORKER}, {}), UsageError);
  EXPECT_THROW(parse_command_line({"-m", COHORT_ENV_WORKER}, {}), UsageError);
  EXPECT_FALSE(parse_command_line({"--help"}, {}).help.empty());
  try {  // CLI11 said "--nproc-per-node: At Most 1 required but received 2"; torchrun takes the last
    parse_command_line({"--nproc-per-node", "2", "--standalone", "--nproc_per_node=3", COHORT_ENV_WORKER}, {});
    ADD_FAILURE() << "a flag given twice must be refused";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "--nproc-per-node was given 2 times (2, 3): give it once");
  }
}

TEST(CohortrunFlagValues, ParsesAndRejects) {
  EXPECT_EQ(parse_nnodes("3").max, 3);
  EXPECT_EQ(parse_nnodes("1:4").min, 1);
  EXPECT_EQ(parse_nnodes("1:4").max, 4);
  for (const char* bad : {"0", "a", "3:2", "1:2:3", "", "-1"}) {
    EXPECT_THROW(parse_nnodes(bad), UsageError) << bad;
  }
  EXPECT_EQ(parse_nproc("3", {8, 2}), 3);
  EXPECT_EQ(parse_nproc("cpu", {8, 2}), 8);
  EXPECT_EQ(parse_nproc("gpu", {8, 2}), 2);
  EXPECT_EQ(parse_nproc("auto", {8, 2}), 2);
  EXPECT_EQ(parse_nproc("auto", {8, 0}), 8);
  try {
    parse_nproc("gpu", {8, 0});
    ADD_FAILURE() << "gpu without GPUs must throw";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
  }
  for (const char* bad : {"0", "-2", "x", "", "2.5"}) EXPECT_THROW(parse_nproc(bad, {}), UsageError);
  EXPECT_EQ(parse_endpoint("node1", 29400).port, 29400);
  EXPECT_EQ(parse_endpoint("node1:3000", 29400).host, "node1");
  EXPECT_EQ(parse_endpoint("[::1]:5", 1).host, "::1");
  EXPECT_EQ(parse_endpoint("[::1]:5", 1).port, 5);
  EXPECT_EQ(parse_endpoint("[::1]:5", 1).str(), "[::1]:5");
  for (const char* bad : {"", ":3000", "host:", "host:0", "host:70000", "host:x", "a:b:c", "[::1"}) {
    EXPECT_THROW(parse_endpoint(bad, 29400), UsageError) << bad;
  }
  EXPECT_EQ(parse_std_spec("-r", "3").for_rank(7), StdSpec::kAll);
  const StdSpec map = parse_std_spec("-r", "0:1,1:2");
  EXPECT_EQ(map.for_rank(0), StdSpec::kOut);
  EXPECT_EQ(map.for_rank(1), StdSpec::kErr);
  EXPECT_EQ(map.for_rank(2), StdSpec::kNone);
  for (const char* bad : {"4", "x", "0:4", "0:", ":1", "0:1,", "0:1,0:2"}) {
    EXPECT_THROW(parse_std_spec("-r", bad), UsageError) << bad;
  }
  try {  // a local rank given twice kept one of its two values silently
    parse_std_spec("--redirects", "0:1,1:3,0:2");
    ADD_FAILURE() << "a local rank given twice must be refused";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "--redirects=0:1,1:3,0:2: local rank 0 is given twice: give each local rank once");
  }
  EXPECT_EQ(parse_key_values("join_timeout=5,a=b").at("join_timeout"), "5");
  EXPECT_THROW(parse_key_values("join_timeout"), UsageError);
  EXPECT_EQ(parse_rank_list("0,2"), (std::set<int>{0, 2}));
  EXPECT_THROW(parse_rank_list("0,x"), UsageError);
}

TEST(CohortrunWorkerEnv, SetsTorchrunVariables) {
  GroupLayout layout;
  layout.group_rank = 1;
  layout.group_world_size = 2;
  layout.local_world_size = 3;
  layout.rank_base = 3;
  layout.world_size = 6;
  layout.master_addr = "node0";
  layout.master_port = 1234;
  layout.restart_count = 2;
  layout.max_restarts = 5;
  layout.run_id = "job";
  const EnvVars env = build_worker_env({{"PATH", "/bin"}}, layout, 2, "/tmp/e.json");
  EXPECT_EQ(env.at("RANK"), "5");
  EXPECT_EQ(env.at("LOCAL_RANK"), "2");
  EXPECT_EQ(env.at("ROLE_RANK"), "5");
  EXPECT_EQ(env.at("WORLD_SIZE"), "6");
  EXPECT_EQ(env.at("ROLE_WORLD_SIZE"), "6");
  EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "3");
  EXPECT_EQ(env.at("GROUP_RANK"), "1");
  EXPECT_EQ(env.at("GROUP_WORLD_SIZE"), "2");
  EXPECT_EQ(env.at("ROLE_NAME"), "default");
  EXPECT_EQ(env.at("MASTER_ADDR"), "node0");
  EXPECT_EQ(env.at("MASTER_PORT"), "1234");
  EXPECT_EQ(env.at("TORCHELASTIC_RESTART_COUNT"), "2");
  EXPECT_EQ(env.at("TORCHELASTIC_MAX_RESTARTS"), "5");
  EXPECT_EQ(env.at("TORCHELASTIC_RUN_ID"), "job");
  EXPECT_EQ(env.at("TORCHELASTIC_ERROR_FILE"), "/tmp/e.json");
  EXPECT_EQ(env.at("OMP_NUM_THREADS"), "1");
  EXPECT_EQ(env.at("PATH"), "/bin");
  for (const auto& name : launcher_variable_names()) EXPECT_TRUE(env.count(name)) << name;
  EXPECT_EQ(build_worker_env({{"OMP_NUM_THREADS", "4"}}, layout, 0, "").at("OMP_NUM_THREADS"), "4");
  layout.local_world_size = 1;
  EXPECT_FALSE(build_worker_env({}, layout, 0, "").count("OMP_NUM_THREADS"));
  EXPECT_EQ(assign_worker_ranks({2, 2}, 1).base, 2);
  EXPECT_EQ(assign_worker_ranks({2, 3, 1}, 2).base, 5);
  EXPECT_EQ(assign_worker_ranks({2, 3, 1}, 2).world_size, 6);
}

TEST(CohortrunMembership, ClosesRoundsAndEncodesOutcomes) {
  EXPECT_EQ(close_count(1, {2, 2}, true), 0);
  EXPECT_EQ(close_count(2, {2, 2}, false), 2);
  EXPECT_EQ(close_count(2, {2, 4}, false), 0);
  EXPECT_EQ(close_count(3, {2, 4}, true), 3);
  EXPECT_EQ(close_count(5, {2, 4}, false), 4);
  EXPECT_TRUE(is_member(1, 2));
  EXPECT_FALSE(is_member(2, 2));
  const Outcome outcome = decode_outcome(encode_outcome({Outcome::Kind::kRestart, 3, "rank 7 | x"}));
  EXPECT_EQ(outcome.kind, Outcome::Kind::kRestart);
  EXPECT_EQ(outcome.node, 3);
  EXPECT_EQ(outcome.description, "rank 7 | x");
  EXPECT_THROW(decode_outcome("nonsense"), std::invalid_argument);
}

TEST(CohortrunOutput, SplitsPrefixesAndRoutes) {
  LineSplitter splitter(8);
  EXPECT_EQ(splitter.feed("ab\ncd", 5), std::vector<std::string>{"ab"});
  EXPECT_EQ(splitter.feed("e\n", 2), std::vector<std::string>{"cde"});
  EXPECT_EQ(splitter.feed("0123456789", 10), std::vector<std::string>{"01234567"});
  EXPECT_EQ(splitter.flush(), "89");
  EXPECT_EQ(expand_prefix("", 3, 1, "default"), "[rank3]: ");
  EXPECT_EQ(expand_prefix("[$role_name${local_rank}]:$$ $x", 3, 1, "w"), "[w1]:$ $x");
  TailBuffer tail(2);
  for (const char* line : {"a", "b", "c"}) tail.push(line);
  EXPECT_EQ(tail.lines(), (std::vector<std::string>{"b", "c"}));
  LaunchOptions options;
  options.nproc = 2;
  EXPECT_TRUE(route_stream(options, 0, StdSpec::kOut).console);
  EXPECT_FALSE(needs_log_files(options));
  options.redirects = parse_std_spec("-r", "0:3");
  options.tee = parse_std_spec("-t", "0:2");
  EXPECT_FALSE(route_stream(options, 0, StdSpec::kOut).console);
  EXPECT_TRUE(route_stream(options, 0, StdSpec::kOut).file);
  EXPECT_TRUE(route_stream(options, 0, StdSpec::kErr).console);  // tee wins
  EXPECT_FALSE(route_stream(options, 1, StdSpec::kErr).file);
  options.local_ranks_filter = {1};
  EXPECT_FALSE(route_stream(options, 0, StdSpec::kErr).console);
  EXPECT_TRUE(needs_log_files(options));
}

TEST(CohortrunSummary, NamesRankCodeAndStderr) {
  WorkerFailure failure;
  failure.rank = 5;
  failure.local_rank = 1;
  failure.pid = 42;
  failure.status.exited = true;
  failure.status.code = 3;
  failure.stderr_tail = {"boom"};
  WorkerFailure killed = failure;
  killed.status = ExitStatus{false, 0, SIGSEGV};
  const std::string text = format_failure_summary({"./train", "host", 1, 2, 2, {failure, killed}});
  EXPECT_NE(text.find("./train FAILED after 2 of 2 restarts"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 5 (local rank 1) exited with code 3"), std::string::npos) << text;
  EXPECT_NE(text.find("    boom"), std::string::npos) << text;
  EXPECT_NE(text.find("killed by signal 11 (SIGSEGV)"), std::string::npos) << text;
}

// ---------------------------------------------------------------- real launches

TEST(CohortrunLaunch, EveryWorkerGetsTorchrunEnvironment) {
  const auto result = run_process(
      cohortrun({"--standalone", "--nnodes=1", "--nproc_per_node=3", COHORT_ENV_WORKER, "x${local_rank}"}),
      clean_env());
  ASSERT_EQ(result.code, 0) << result.describe();
  const auto envs = envs_from_output(result.out);
  ASSERT_EQ(envs.size(), 3u) << result.describe();
  std::set<std::string> ports, run_ids, launches;
  for (const auto& [rank, env] : envs) {
    for (const auto& name : kTorchrunVariables) ASSERT_TRUE(env.count(name)) << name << " rank " << rank;
    EXPECT_EQ(env.at("RANK"), std::to_string(rank));
    EXPECT_EQ(env.at("LOCAL_RANK"), std::to_string(rank));
    EXPECT_EQ(env.at("ROLE_RANK"), std::to_string(rank));
    EXPECT_EQ(env.at("WORLD_SIZE"), "3");
    EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "3");
    EXPECT_EQ(env.at("ROLE_WORLD_SIZE"), "3");
    EXPECT_EQ(env.at("GROUP_RANK"), "0");
    EXPECT_EQ(env.at("GROUP_WORLD_SIZE"), "1");
    EXPECT_EQ(env.at("ROLE_NAME"), "default");
    EXPECT_EQ(env.at("TORCHELASTIC_RESTART_COUNT"), "0");
    EXPECT_EQ(env.at("TORCHELASTIC_MAX_RESTARTS"), "0");
    EXPECT_EQ(env.at("OMP_NUM_THREADS"), "1");
    EXPECT_EQ(env.at("MASTER_ADDR"), "127.0.0.1");
    ports.insert(env.at("MASTER_PORT"));
    run_ids.insert(env.at("TORCHELASTIC_RUN_ID"));
    ASSERT_TRUE(env.count("COHORT_LAUNCH_ID")) << rank;
    launches.insert(env.at("COHORT_LAUNCH_ID"));
    EXPECT_NE(result.out.find("[rank" + std::to_string(rank) + "]: ARGS x" + std::to_string(rank)),
              std::string::npos);
  }
  EXPECT_EQ(ports.size(), 1u);
  EXPECT_EQ(run_ids.size(), 1u);
  // One launch identity for the job, 32 hex digits, and another for the next launch (hostile pass 16, S-1).
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_THAT(*launches.begin(), ::testing::MatchesRegex("[0-9a-f]{32}"));
  const auto again = run_process(cohortrun({"--standalone", "--nproc_per_node=1", COHORT_ENV_WORKER}), clean_env());
  ASSERT_EQ(again.code, 0) << again.describe();
  for (const auto& [rank, env] : envs_from_output(again.out)) EXPECT_NE(env.at("COHORT_LAUNCH_ID"), *launches.begin());
  // A user's OMP_NUM_THREADS is kept.
  const auto mine = run_process(cohortrun({"--nproc-per-node=2", COHORT_ENV_WORKER}),
                                clean_env({{"OMP_NUM_THREADS", "4"}}));
  ASSERT_EQ(mine.code, 0) << mine.describe();
  for (const auto& [rank, env] : envs_from_output(mine.out)) EXPECT_EQ(env.at("OMP_NUM_THREADS"), "4");
}

TEST(CohortrunLaunch, SameVariablesAsPythonTorchrun) {
  const std::string python = cohort::testing::python_with_torch();
  ASSERT_EQ(::access(python.c_str(), X_OK), 0) << "Python torchrun (python3-torch) is needed: " << python;
  TempDir theirs, ours, scratch;
  const Env base = clean_env({{"TMPDIR", scratch.path}});  // torchrun leaves its log dir there
  // Python 3.11 breaks torchrun 1.13's redirect parsing unless --redirects 2 --tee 2 are given.
  const auto torchrun = run_process({python, "-m", "torch.distributed.run", "--redirects", "2", "--tee", "2",
                                     "--standalone", "--nnodes=1", "--nproc_per_node=2",
                                     "--no_python", COHORT_ENV_WORKER, "--env-dir", theirs.path},
                                    base, 60s);
  ASSERT_EQ(torchrun.code, 0) << torchrun.describe();
  const auto launched = run_process(cohortrun({"--standalone", "--nnodes=1", "--nproc_per_node=2",
                                               COHORT_ENV_WORKER, "--env-dir", ours.path}),
                                    base);
  ASSERT_EQ(launched.code, 0) << launched.describe();
  const auto added = [&](const Env& env) {
    std::set<std::string> names;
    for (const auto& [key, value] : env) {
      if (!base.count(key) && key != "_") names.insert(key);
    }
    return names;
  };
  const auto torch_envs = envs_from_dir(theirs.path), our_envs = envs_from_dir(ours.path);
  ASSERT_EQ(torch_envs.size(), 2u);
  ASSERT_EQ(our_envs.size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    // torchrun 2.x adds TORCHELASTIC_SIGNALS_TO_HANDLE; cohortrun always does (as 2.x), 1.13 lacks it.
    auto theirs_added = added(torch_envs.at(rank));
    theirs_added.insert("TORCHELASTIC_SIGNALS_TO_HANDLE");
    theirs_added.insert("COHORT_JOB_SECRET");  // cohortrun's own: the job's secret (docs/security.md)
    theirs_added.insert("COHORT_LAUNCH_ID");   // and the launch a restart's checkpoints are known by
    EXPECT_EQ(added(our_envs.at(rank)), theirs_added) << "rank " << rank;
    for (const char* same : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                             "ROLE_NAME", "ROLE_RANK", "ROLE_WORLD_SIZE", "GROUP_WORLD_SIZE",
                             "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
                             "OMP_NUM_THREADS"}) {
      EXPECT_EQ(our_envs.at(rank).at(same), torch_envs.at(rank).at(same)) << same;
    }
    const auto& signals = torch_envs.at(rank);
    if (signals.count("TORCHELASTIC_SIGNALS_TO_HANDLE")) {
      EXPECT_EQ(our_envs.at(rank).at("TORCHELASTIC_SIGNALS_TO_HANDLE"),
                signals.at("TORCHELASTIC_SIGNALS_TO_HANDLE"));
    }
    // Workers host the store (rank 0 serves MASTER_PORT); torchrun 2.x's agent hosts it and says True.
    EXPECT_EQ(our_envs.at(rank).at("TORCHELASTIC_USE_AGENT_STORE"), "False");
  }
}

TEST(CohortrunLaunch, GuideCommandsWork) {
  // --nproc_per_node=gpu on a machine without CUDA: a clear error, like torchrun's.
  const auto gpu = run_process(cohortrun({"--nnodes=1", "--nproc_per_node=gpu", "--rdzv_id=12345",
                                          "--rdzv_backend=c10d", "--rdzv_endpoint=localhost:3000",
                                          COHORT_ENV_WORKER}),
                               clean_env());
  EXPECT_EQ(gpu.code, 2) << gpu.describe();
  EXPECT_NE(gpu.err.find("no CUDA device"), std::string::npos) << gpu.describe();
  const auto eight = run_process(
      cohortrun({"--standalone", "--nnodes=1", "--nproc_per_node=8", COHORT_ENV_WORKER}), clean_env());
  ASSERT_EQ(eight.code, 0) << eight.describe();
  const auto envs = envs_from_output(eight.out);
  ASSERT_EQ(envs.size(), 8u);
  for (const auto& [rank, env] : envs) EXPECT_EQ(env.at("WORLD_SIZE"), "8");
}

TEST(CohortrunLaunch, StandaloneJobsRunSideBySide) {
  Proc first = start_process(cohortrun({"--standalone", "--nproc-per-node=2", COHORT_ENV_WORKER,
                                        "--meet-at-master", "--sleep", "0.5"}), clean_env());
  Proc second = start_process(cohortrun({"--standalone", "--nproc-per-node=2", COHORT_ENV_WORKER,
                                         "--meet-at-master", "--sleep", "0.5"}), clean_env());
  const auto a = finish_process(first, 20s), b = finish_process(second, 20s);
  ASSERT_EQ(a.code, 0) << a.describe();
  ASSERT_EQ(b.code, 0) << b.describe();
  EXPECT_EQ(count_of(a.out, "]: MET"), 2u) << a.describe();
  EXPECT_NE(envs_from_output(a.out).at(0).at("MASTER_PORT"), envs_from_output(b.out).at(0).at("MASTER_PORT"));
  EXPECT_NE(envs_from_output(a.out).at(0).at("TORCHELASTIC_RUN_ID"),
            envs_from_output(b.out).at(0).at("TORCHELASTIC_RUN_ID"));
}

TEST(CohortrunLaunch, TwoNodesOnOneMachineFormOneWorld) {
  const std::string rdzv = endpoint();
  const auto node = [&] {
    return start_process(cohortrun({"--nnodes=2", "--nproc_per_node=2", "--rdzv_id=12345",
                                    "--rdzv_backend=c10d", "--rdzv_endpoint=" + rdzv,
                                    COHORT_ENV_WORKER, "--meet-at-master"}), clean_env());
  };
  Proc a = node(), b = node();
  const auto ra = finish_process(a, 20s), rb = finish_process(b, 20s);
  ASSERT_EQ(ra.code, 0) << ra.describe();
  ASSERT_EQ(rb.code, 0) << rb.describe();
  std::map<int, Env> all = envs_from_output(ra.out);
  for (const auto& [rank, env] : envs_from_output(rb.out)) {
    EXPECT_FALSE(all.count(rank)) << "rank " << rank << " on both nodes";
    all[rank] = env;
  }
  ASSERT_EQ(all.size(), 4u);
  std::set<std::string> group_ranks;
  for (const auto& [rank, env] : all) {
    EXPECT_EQ(env.at("WORLD_SIZE"), "4");
    EXPECT_EQ(env.at("GROUP_WORLD_SIZE"), "2");
    EXPECT_EQ(env.at("TORCHELASTIC_RUN_ID"), "12345");
    EXPECT_EQ(env.at("RANK"), std::to_string(std::stoi(env.at("GROUP_RANK")) * 2 +
                                             std::stoi(env.at("LOCAL_RANK"))));
    EXPECT_EQ(env.at("MASTER_PORT"), all.at(0).at("MASTER_PORT"));
    group_ranks.insert(env.at("GROUP_RANK"));
  }
  EXPECT_EQ(group_ranks, (std::set<std::string>{"0", "1"}));
  EXPECT_EQ(count_of(ra.out + rb.out, "]: MET"), 4u);
}

TEST(CohortrunLaunch, StaticBackendWithNodeRanks) {
  const std::string port = std::to_string(free_port());
  const auto node = [&](const char* rank) {
    return start_process(cohortrun({"--nnodes", "2", "--nproc-per-node", "2", "--node-rank", rank,
                                    "--master-addr", "127.0.0.1", "--master-port", port,
                                    COHORT_ENV_WORKER, "--meet-at-master"}), clean_env());
  };
  Proc one = node("1"), zero = node("0");
  const auto r1 = finish_process(one, 20s), r0 = finish_process(zero, 20s);
  ASSERT_EQ(r0.code, 0) << r0.describe();
  ASSERT_EQ(r1.code, 0) << r1.describe();
  const auto envs1 = envs_from_output(r1.out);
  EXPECT_TRUE(envs1.count(2) && envs1.count(3)) << r1.describe();
  EXPECT_EQ(envs1.at(2).at("GROUP_RANK"), "1");
  // No --rdzv-id: the job's id is node 0's fresh one, and the line said "rendezvous 'none'".
  EXPECT_NE(r0.err.find("[cohortrun] rendezvous (no --rdzv-id) at 127.0.0.1:" + port + " round 0: node 0 of 2"),
            std::string::npos)
      << r0.describe();
}

TEST(CohortrunFailure, FailingWorkerStopsGroupAndIsNamed) {
  TempDir pids;
  const auto result = run_process(
      cohortrun({"--nproc-per-node=3", "--stop-timeout=5", COHORT_FAIL_WORKER, "--fail-rank", "1",
                 "--exit-code", "3", "--stderr-lines", "4", "--spawn-child"}),
      clean_env({{"COHORT_TEST_PID_DIR", pids.path}}));
  EXPECT_EQ(result.code, 1) << result.describe();
  EXPECT_NE(result.err.find("Root Cause (first observed failure): rank 1 (local rank 1) exited with code 3"),
            std::string::npos) << result.describe();
  EXPECT_NE(result.err.find("exitcode   : 3"), std::string::npos) << result.describe();
  for (int line = 0; line < 4; ++line) {
    EXPECT_NE(result.err.find("    rank 1 stderr line " + std::to_string(line)), std::string::npos);
  }
  EXPECT_NE(result.err.find("[rank1]: rank 1 stderr line 0"), std::string::npos);
  EXPECT_EQ(recorded_pids(pids.path).size(), 6u);  // 3 workers + 3 children they left behind
  EXPECT_TRUE(alive_after(recorded_pids(pids.path), 2s).empty());
}

TEST(CohortrunFailure, KilledWorkerIsReportedWithItsSignal) {
  const auto result = run_process(
      cohortrun({"--nproc-per-node=2", COHORT_FAIL_WORKER, "--fail-rank", "0", "--signal", "9"}),
      clean_env());
  EXPECT_EQ(result.code, 1) << result.describe();
  EXPECT_NE(result.err.find("rank 0 (local rank 0) killed by signal 9 (SIGKILL)"), std::string::npos)
      << result.describe();
}

TEST(CohortrunFailure, WorkerIgnoringSigtermIsKilledAfterGrace) {
  TempDir pids;
  const auto result = run_process(
      cohortrun({"--nproc-per-node=2", "--stop-timeout=0.5", COHORT_FAIL_WORKER, "--fail-rank", "1",
                 "--ignore-sigterm"}),
      clean_env({{"COHORT_TEST_PID_DIR", pids.path}}));
  EXPECT_EQ(result.code, 1) << result.describe();
  EXPECT_TRUE(alive_after(recorded_pids(pids.path), 2s).empty());
}

TEST(CohortrunRestart, RestartCountIncrementsUntilSuccess) {
  const auto result = run_process(
      cohortrun({"--nproc-per-node=2", "--max-restarts=3", "--stop-timeout=2", COHORT_FAIL_WORKER,
                 "--fail-rank", "1", "--fail-until-restart", "2", "--sleep", "0.5"}),
      clean_env());
  EXPECT_EQ(result.code, 0) << result.describe();
  for (int restart = 0; restart <= 2; ++restart) {
    EXPECT_NE(result.out.find("[rank0]: rank 0 restart " + std::to_string(restart) + " started"),
              std::string::npos) << result.describe();
  }
  EXPECT_EQ(result.out.find("restart 3"), std::string::npos);
  EXPECT_NE(result.out.find("[rank1]: rank 1 restart 2 done"), std::string::npos);
  EXPECT_NE(result.err.find("restarting it (restart 2 of 3)"), std::string::npos) << result.describe();
}

TEST(CohortrunRestart, GivesUpAfterMaxRestarts) {
  const auto result = run_process(
      cohortrun({"--nproc-per-node=2", "--max-restarts=2", "--stop-timeout=2", COHORT_FAIL_WORKER,
                 "--fail-rank", "0", "--exit-code", "7"}),
      clean_env());
  EXPECT_EQ(result.code, 1) << result.describe();
  EXPECT_EQ(count_of(result.out, "[rank0]: rank 0 restart "), 3u) << result.describe();
  EXPECT_NE(result.err.find("FAILED after 2 of 2 restarts"), std::string::npos) << result.describe();
  EXPECT_NE(result.err.find("exitcode   : 7"), std::string::npos);
}

TEST(CohortrunSignals, SigtermAndSigintReachEveryWorker) {
  for (int sig : {SIGTERM, SIGINT}) {
    TempDir pids;
    Proc proc = start_process(cohortrun({"--nproc-per-node=3", COHORT_FAIL_WORKER, "--report-signals"}),
                              clean_env({{"COHORT_TEST_PID_DIR", pids.path}}));
    ASSERT_TRUE(wait_for_pid_files(pids.path, 3, 10s));
    ::kill(proc.pid, sig);
    const auto result = finish_process(proc, 20s);
    EXPECT_EQ(result.code, 128 + sig) << result.describe();
    for (int rank = 0; rank < 3; ++rank) {
      EXPECT_NE(result.out.find("[rank" + std::to_string(rank) + "]: rank " + std::to_string(rank) +
                                " got signal " + std::to_string(sig)),
                std::string::npos) << result.describe();
    }
    EXPECT_TRUE(alive_after(recorded_pids(pids.path), 2s).empty());
  }
}

TEST(CohortrunSignals, NoWorkerOutlivesAKilledLauncher) {
  TempDir pids;  // also its TMPDIR: a SIGKILLed cohortrun cannot remove its temporary directory
  Proc proc = start_process(
      cohortrun({"--nproc-per-node=3", COHORT_FAIL_WORKER, "--ignore-sigterm"}),
      clean_env({{"COHORT_TEST_PID_DIR", pids.path}, {"TMPDIR", pids.path}}));
  ASSERT_TRUE(wait_for_pid_files(pids.path, 3, 10s));
  ::kill(proc.pid, SIGKILL);
  const auto result = finish_process(proc, 10s);
  EXPECT_EQ(result.signal, SIGKILL);
  EXPECT_TRUE(alive_after(recorded_pids(pids.path), 5s).empty());
}

TEST(CohortrunSignals, SignalOnOneNodeStopsTheOthers) {
  TempDir pids;
  const std::string rdzv = endpoint();
  const auto node = [&] {
    return start_process(cohortrun({"--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d",
                                    "--rdzv-endpoint=" + rdzv, "--monitor-interval=0.1",
                                    COHORT_FAIL_WORKER, "--report-signals"}),
                         clean_env({{"COHORT_TEST_PID_DIR", pids.path}}));
  };
  Proc a = node(), b = node();
  ASSERT_TRUE(wait_for_pid_files(pids.path, 4, 15s));
  ::kill(b.pid, SIGTERM);
  const auto rb = finish_process(b, 20s), ra = finish_process(a, 20s);
  EXPECT_EQ(rb.code, 128 + SIGTERM) << rb.describe();
  EXPECT_EQ(ra.code, 1) << ra.describe();
  EXPECT_NE(ra.err.find("got SIGTERM"), std::string::npos) << ra.describe();
  EXPECT_EQ(count_of(ra.out + rb.out, " got signal 15"), 4u) << ra.describe() << rb.describe();
  EXPECT_TRUE(alive_after(recorded_pids(pids.path), 2s).empty());
}

// The node hosting the rendezvous dies with its workers (SIGKILL, as a machine that goes away): the
// other node loses the store while its workers run, stops them and exits 1 naming what it lost. It
// used to abort (std::terminate, exit 134) on its own "lost" record (tests/cluster found it).
TEST(CohortrunSignals, LostRendezvousHostEndsTheOtherNodeInOneLine) {
  TempDir pids;
  const std::string rdzv = endpoint();
  const auto node = [&] {
    return start_process(cohortrun({"--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d",
                                    "--rdzv-endpoint=" + rdzv, "--monitor-interval=0.1",
                                    COHORT_FAIL_WORKER, "--sleep", "120"}),
                         clean_env({{"COHORT_TEST_PID_DIR", pids.path}}));
  };
  Proc a = node(), b = node();
  ASSERT_TRUE(wait_for_pid_files(pids.path, 4, 15s));
  // Node 0 (the host) runs ranks 0 and 1 and is rank 0's parent; kill it and them at once.
  const auto pid_of = [&](int rank) {
    pid_t pid = -1;
    std::ifstream(pids.path + "/" + std::to_string(rank) + ".0.pid") >> pid;
    return pid;
  };
  std::ifstream stat("/proc/" + std::to_string(pid_of(0)) + "/stat");
  std::string field;
  pid_t host = -1;
  stat >> field >> field >> field >> host;  // pid (comm) state ppid
  ASSERT_TRUE(host == a.pid || host == b.pid) << "rank 0's parent " << host << " is neither cohortrun";
  Proc& dead = host == a.pid ? a : b;
  Proc& left = host == a.pid ? b : a;
  ::kill(dead.pid, SIGKILL);
  ::kill(pid_of(0), SIGKILL);
  ::kill(pid_of(1), SIGKILL);
  finish_process(dead, 10s);
  const auto result = finish_process(left, 30s);
  EXPECT_EQ(result.code, 1) << result.describe();
  EXPECT_NE(result.err.find("[cohortrun] error: lost contact with rendezvous"), std::string::npos)
      << result.describe();
  EXPECT_EQ(result.err.find("terminate called"), std::string::npos) << result.describe();
  EXPECT_TRUE(alive_after(recorded_pids(pids.path), 5s).empty());
}

TEST(CohortrunBadInput, ExitsTwoWithOneLineAndStartsNothing) {
  TempDir pids;
  const std::string not_executable = pids.path + "/not_executable";
  std::ofstream(not_executable) << "#!/bin/sh\n";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--nproc-per-node=2", "--frobnicate", COHORT_ENV_WORKER}, "unknown flag --frobnicate"},
      {{"--nproc-per-node=2"}, "no program"},
      {{"--nproc-per-node=2", not_executable}, "is not executable"},
      {{"--nproc-per-node=2", pids.path + "/missing"}, "does not exist"},
      {{"--nproc-per-node=0", COHORT_ENV_WORKER},
       "--nproc-per-node is out of range: expected an integer from 1 to 65536, got 0"},
      {{"--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=host:", COHORT_ENV_WORKER}, "empty port"},
      {{"--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=:29400", COHORT_ENV_WORKER}, "no host"},
      {{"--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=a:b:c", COHORT_ENV_WORKER}, "HOST[:PORT]"},
      {{"--nnodes=2:1", COHORT_ENV_WORKER}, "MIN is larger than MAX"},
      {{"--tee=7", COHORT_ENV_WORKER}, "--tee=7"},
      {{"--nproc-per-node=5000", COHORT_ENV_WORKER}, "--nproc-per-node=5000 would start 5000 processes on the "},
  };
  for (const auto& [args, message] : cases) {
    const auto result = run_process(cohortrun(args), clean_env({{"COHORT_TEST_PID_DIR", pids.path}}));
    EXPECT_EQ(result.code, 2) << result.describe();
    EXPECT_NE(result.err.find("cohortrun: error: "), std::string::npos) << result.describe();
    EXPECT_NE(result.err.find(message), std::string::npos) << message << "\n" << result.describe();
    EXPECT_NE(result.err.find("usage: cohortrun"), std::string::npos) << result.describe();
    EXPECT_EQ(count_of(result.err, "\n"), 2u) << result.describe();
    EXPECT_TRUE(result.out.empty()) << result.describe();
  }
  // A value from a PET_* variable is named by that variable: the user never typed the flag.
  const auto pet = run_process(cohortrun({COHORT_ENV_WORKER}),
                               clean_env({{"COHORT_TEST_PID_DIR", pids.path}, {"PET_NPROC_PER_NODE", "x"}}));
  EXPECT_EQ(pet.code, 2) << pet.describe();
  EXPECT_NE(pet.err.find("cohortrun: error: PET_NPROC_PER_NODE=x is not a number, cpu, gpu or auto"),
            std::string::npos)
      << pet.describe();
  EXPECT_TRUE(recorded_pids(pids.path).empty());
}

TEST(CohortrunRendezvous, NodeThatNeverComesFailsTheOthers) {
  TempDir pids;
  const auto result = run_process(
      cohortrun({"--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d", "--rdzv-endpoint=" + endpoint(),
                 "--rdzv-conf=join_timeout=1.5", COHORT_ENV_WORKER}),
      clean_env({{"COHORT_TEST_PID_DIR", pids.path}}));
  EXPECT_EQ(result.code, 1) << result.describe();
  EXPECT_NE(result.err.find("1 of 2 nodes arrived"), std::string::npos) << result.describe();
  EXPECT_TRUE(recorded_pids(pids.path).empty());
}

// A node that comes later joins at a restart: cohortrun_elastic_test.cpp.
TEST(CohortrunRendezvous, NodeRangeClosesAfterLastCall) {
  TempDir pids;
  const std::vector<std::string> args = {
      "--nnodes=1:2", "--nproc-per-node=2", "--rdzv-backend=c10d", "--rdzv-endpoint=" + endpoint(),
      "--rdzv-conf=last_call_timeout=0.3,join_timeout=5", COHORT_ENV_WORKER, "--sleep", "1"};
  Proc first = start_process(cohortrun(args), clean_env({{"COHORT_TEST_PID_DIR", pids.path}}));
  ASSERT_TRUE(wait_for_pid_files(pids.path, 2, 15s));
  const auto result = finish_process(first, 20s);
  ASSERT_EQ(result.code, 0) << result.describe();
  const auto envs = envs_from_output(result.out);
  ASSERT_EQ(envs.size(), 2u);
  EXPECT_EQ(envs.at(1).at("GROUP_WORLD_SIZE"), "1");
  EXPECT_EQ(envs.at(1).at("WORLD_SIZE"), "2");
}

TEST(CohortrunRendezvous, NodesRestartTogether) {
  const std::string rdzv = endpoint();
  const auto node = [&] {
    return start_process(cohortrun({"--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d",
                                    "--rdzv-endpoint=" + rdzv, "--rdzv-id=together",
                                    "--max-restarts=1", "--monitor-interval=0.1", "--stop-timeout=2",
                                    COHORT_FAIL_WORKER, "--fail-rank", "3", "--fail-until-restart",
                                    "1", "--sleep", "0.5"}), clean_env());
  };
  Proc a = node(), b = node();
  const auto ra = finish_process(a, 20s), rb = finish_process(b, 20s);
  EXPECT_EQ(ra.code, 0) << ra.describe();
  EXPECT_EQ(rb.code, 0) << rb.describe();
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE((ra.out + rb.out).find("rank " + std::to_string(rank) + " restart 1 done"), std::string::npos)
        << ra.describe() << rb.describe();
  }
}

TEST(CohortrunRendezvous, FailureOnOneNodeStopsTheOther) {
  TempDir pids;
  const std::string rdzv = endpoint();
  const auto node = [&] {
    return start_process(cohortrun({"--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d",
                                    "--rdzv-endpoint=" + rdzv, "--monitor-interval=0.1",
                                    "--stop-timeout=2", COHORT_FAIL_WORKER, "--fail-rank", "2",
                                    "--exit-code", "5"}),
                         clean_env({{"COHORT_TEST_PID_DIR", pids.path}}));
  };
  Proc a = node(), b = node();
  const auto ra = finish_process(a, 20s), rb = finish_process(b, 20s);
  EXPECT_EQ(ra.code, 1) << ra.describe();
  EXPECT_EQ(rb.code, 1) << rb.describe();
  const std::string err = ra.err + rb.err;
  EXPECT_NE(err.find("Root Cause (first observed failure): rank 2 (local rank 0) exited with code 5"),
            std::string::npos) << err;
  EXPECT_NE(err.find("stopping: worker group failed: rank 2 (local rank 0) exited with code 5 on node 1"),
            std::string::npos) << err;
  EXPECT_TRUE(alive_after(recorded_pids(pids.path), 2s).empty());
}

TEST(CohortrunLogs, LogDirTeeAndFilter) {
  TempDir logs;
  const auto result = run_process(
      cohortrun({"--nproc-per-node=2", "--rdzv-id=logged", "--log-dir", logs.path, "--tee", "3",
                 "--local-ranks-filter", "1", COHORT_FAIL_WORKER, "--sleep", "0"}),
      clean_env());
  ASSERT_EQ(result.code, 0) << result.describe();
  EXPECT_EQ(result.out.find("[rank0]:"), std::string::npos) << result.describe();
  EXPECT_NE(result.out.find("[rank1]: rank 1 restart 0 done"), std::string::npos) << result.describe();
  std::vector<std::filesystem::path> runs;
  for (const auto& entry : std::filesystem::directory_iterator(logs.path)) runs.push_back(entry.path());
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].filename().string().rfind("logged_", 0), 0u) << runs[0];
  for (int local_rank = 0; local_rank < 2; ++local_rank) {
    std::ifstream in(runs[0] / "attempt_0" / std::to_string(local_rank) / "stdout.log");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text, "rank " + std::to_string(local_rank) + " restart 0 started\nrank " +
                        std::to_string(local_rank) + " restart 0 done\n");
  }
  const auto redirected = run_process(
      cohortrun({"--nproc-per-node=2", "--log-dir", logs.path, "--redirects", "1", COHORT_FAIL_WORKER,
                 "--sleep", "0"}),
      clean_env());
  ASSERT_EQ(redirected.code, 0) << redirected.describe();
  EXPECT_EQ(redirected.out.find("[rank"), std::string::npos) << redirected.describe();
}

TEST(CohortrunRendezvous, TwoNetworkNamespacesFormOneWorld) {
  ASSERT_EQ(::geteuid(), 0u) << "the network-namespace test must run as root (ip netns add)";
  TwoNamespaces namespaces;
  ASSERT_EQ(namespaces.error(), "");
  const auto node = [&](const std::string& ns) {
    return start_process(TwoNamespaces::node_argv(ns, COHORTRUN_PATH, 15, {COHORT_ENV_WORKER, "--meet-at-master"}),
                         clean_env());
  };
  Proc b = node(namespaces.b());  // the client first: it waits for the host to appear
  Proc a = node(namespaces.a());
  const auto ra = finish_process(a, 20s), rb = finish_process(b, 20s);
  ASSERT_EQ(ra.code, 0) << ra.describe();
  ASSERT_EQ(rb.code, 0) << rb.describe();
  const auto envs_a = envs_from_output(ra.out), envs_b = envs_from_output(rb.out);
  ASSERT_EQ(envs_a.size(), 2u);
  ASSERT_EQ(envs_b.size(), 2u);
  EXPECT_TRUE(envs_a.count(0) && envs_a.count(1)) << ra.describe();  // the host is node 0
  EXPECT_TRUE(envs_b.count(2) && envs_b.count(3)) << rb.describe();
  for (const auto* envs : {&envs_a, &envs_b}) {
    for (const auto& [rank, env] : *envs) {
      EXPECT_EQ(env.at("MASTER_ADDR"), "192.168.77.1");
      EXPECT_EQ(env.at("WORLD_SIZE"), "4");
    }
  }
  EXPECT_EQ(count_of(ra.out + rb.out, "]: MET"), 4u);
}

// ---------------------------------------------------------------- --bind-cores

namespace {

// The CPUs this test process may run on, as the kernel lists them (independent of cohortrun's code).
std::string my_cpu_list() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Cpus_allowed_list:", 0) == 0) return line.substr(line.find_first_not_of(" \t", 18));
  }
  return "";
}

// Local rank -> the CPU list its worker printed ("[rankN]: CPUS 0-1", env worker --print-cpus).
std::map<int, std::string> cpus_from_output(const std::string& out) {
  std::map<int, std::string> cpus;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    int rank = -1;
    char list[256] = {0};
    if (std::sscanf(line.c_str(), "[rank%d]: CPUS %255s", &rank, list) == 2) cpus[rank] = list;
  }
  return cpus;
}

std::vector<HostCpu> plain_cpus(const std::vector<int>& numbers) {
  std::vector<HostCpu> cpus;
  for (int cpu : numbers) cpus.push_back({cpu, 0, cpu});
  return cpus;
}

}  // namespace

TEST(CohortrunBindCores, CpuListsParseAndFormat) {
  EXPECT_EQ(parse_cpu_list("--core-list", "0-3,8,10-11"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list("--core-list", "5,1,1-2"), (std::vector<int>{1, 2, 5}));
  for (const std::string bad : {"", "3-1", "a", "1,,2", "0-", "-1", "1,", "0-99999999"}) {
    try {
      parse_cpu_list("--core-list", bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()), "--core-list=" + bad +
                                           " is not a CPU list like 0-3,8 (CPU numbers, ranges A-B with A <= B)");
    }
  }
  EXPECT_EQ(format_cpu_list({11, 0, 1, 2, 3, 8, 10}), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list({4}), "4");
  EXPECT_EQ(format_cpu_list({}), "");
}

// Hostile pass 6, M2: --nproc-per-node 5000 on 2 cores started workers until memory ran out. More
// than 4 per usable core, or more than the node's memory at a LibTorch program's least, is refused.
TEST(CohortrunFlagValues, MoreWorkersThanTheNodeHoldsAreRefused) {
  const auto refusal = [](int nproc, const HostFacts& host) -> std::string {
    try {
      check_local_workers(nproc, "--nproc-per-node", std::to_string(nproc), host);
      return "";
    } catch (const UsageError& e) {
      return e.what();
    }
  };
  EXPECT_EQ(refusal(5000, HostFacts{2, 0}),
            "--nproc-per-node=5000 would start 5000 processes on the 2 core(s) this process may use (at most 4 per "
            "core): use --nproc-per-node 8 or fewer, or more nodes (--nnodes)");
  EXPECT_EQ(refusal(8, HostFacts{2, 0}), "");
  EXPECT_NE(refusal(9, HostFacts{64, 0, plain_cpus({0, 1})}), "") << "the CPUs cohortrun may use, not the machine's";
  HostFacts small{64, 0};
  small.available_memory = 3'000'000'000;
  EXPECT_EQ(refusal(32, small),
            "--nproc-per-node=32 would start 32 processes of at least 150 MB each (what a LibTorch program takes "
            "when it starts), 4800 MB in all, more than the 3000 MB available on this node: use --nproc-per-node 20 "
            "or fewer, or more nodes (--nnodes)");
  EXPECT_EQ(refusal(20, small), "");
}

TEST(CohortrunBindCores, SplitsEvenlyAndKeepsHardwareThreadsTogether) {
  using Split = std::vector<std::vector<int>>;
  EXPECT_EQ(split_cpus(plain_cpus({0, 1}), 2), (Split{{0}, {1}}));
  EXPECT_EQ(split_cpus(plain_cpus({0, 1, 2, 3, 4}), 2), (Split{{0, 1, 2}, {3, 4}}));  // remainder first
  EXPECT_EQ(split_cpus(plain_cpus({0, 1, 2, 3, 4, 5, 6}), 3), (Split{{0, 1, 2}, {3, 4}, {5, 6}}));
  EXPECT_EQ(split_cpus(plain_cpus({2, 5, 7}), 1), (Split{{2, 5, 7}}));
  // Intel's numbering: CPU i and i+4 are the two hardware threads of core i % 4. Contiguous numbers
  // would put rank 1 on the siblings of rank 0's cores.
  std::vector<HostCpu> smt;
  for (int cpu = 0; cpu < 8; ++cpu) smt.push_back({cpu, 0, cpu % 4});
  EXPECT_EQ(split_cpus(smt, 2), (Split{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  // Two packages with the same core ids; unknown cores (-1) count as cores of their own.
  EXPECT_EQ(split_cpus({{0, 0, 0}, {1, 1, 0}, {2, 0, 1}, {3, 1, 1}}, 2), (Split{{0, 2}, {1, 3}}));
  EXPECT_EQ(split_cpus({{3, 0, -1}, {1, 0, -1}}, 2), (Split{{1}, {3}}));
}

TEST(CohortrunBindCores, FlagsResolveAgainstTheAllowedCpus) {
  HostFacts host{2, 0, plain_cpus({0, 1})};
  const auto bound = parse_command_line({"--bind-cores", "--nproc-per-node=2", COHORT_ENV_WORKER}, host);
  EXPECT_TRUE(bound.options.bind_cores);
  EXPECT_EQ(bound.options.local_rank_cpus, (std::vector<std::vector<int>>{{0}, {1}}));
  const auto plain = parse_command_line({"--nproc-per-node=2", COHORT_ENV_WORKER}, host);
  EXPECT_FALSE(plain.options.bind_cores);
  EXPECT_TRUE(plain.options.local_rank_cpus.empty());
  const auto listed = parse_command_line({"--core-list", "1", COHORT_ENV_WORKER}, host);  // implies it
  EXPECT_EQ(listed.options.local_rank_cpus, (std::vector<std::vector<int>>{{1}}));
  const auto refusal = [&](const std::vector<std::string>& args) {
    try {
      parse_command_line(args, host);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refusal({"--bind-cores", "--nproc-per-node=3", COHORT_ENV_WORKER}),
            "--bind-cores needs a core per local rank: --nproc-per-node=3 starts 3 but this process may use "
            "2 (CPUs 0-1)");
  EXPECT_EQ(refusal({"--core-list=1", "--nproc-per-node=2", COHORT_ENV_WORKER}),
            "--bind-cores needs a core per local rank: --nproc-per-node=2 starts 2 but --core-list=1 has 1");
  EXPECT_EQ(refusal({"--core-list=0-2", COHORT_ENV_WORKER}),
            "--core-list=0-2: CPU 2 is not one this process may use (CPUs 0-1)");
  // An empty value (a variable that was not set) is refused, not read as "no flag".
  EXPECT_EQ(refusal({"--core-list=", COHORT_ENV_WORKER}),
            "--core-list was given an empty value: give a value (0-3,8,...) or leave the flag out");
  EXPECT_EQ(refusal({"--master-addr", "", COHORT_ENV_WORKER}),
            "--master-addr was given an empty value: give a value (HOST) or leave the flag out");
}

TEST(CohortrunBindCores, ThreadCountsFollowTheCpusUnlessSet) {
  EnvVars env{{"OMP_NUM_THREADS", "1"}};
  set_thread_counts(env, {}, 3);
  EXPECT_EQ(env, (EnvVars{{"OMP_NUM_THREADS", "3"}, {"OPENBLAS_NUM_THREADS", "3"}, {"MKL_NUM_THREADS", "3"}}));
  EnvVars mine{{"OMP_NUM_THREADS", "8"}};
  set_thread_counts(mine, {{"OMP_NUM_THREADS", "8"}}, 2);
  EXPECT_EQ(mine, (EnvVars{{"OMP_NUM_THREADS", "8"}, {"OPENBLAS_NUM_THREADS", "2"}, {"MKL_NUM_THREADS", "2"}}));
  EXPECT_EQ(describe_binding(1, {2, 3}, {}), "--bind-cores: local rank 1 -> CPUs 2-3 (OMP_NUM_THREADS=2)");
  EXPECT_EQ(describe_binding(0, {0}, {{"OMP_NUM_THREADS", "8"}}),
            "--bind-cores: local rank 0 -> CPUs 0 (OMP_NUM_THREADS=8)");
}

TEST(CohortrunBindCores, EachRankRunsOnItsOwnCpus) {
  const std::vector<int> allowed = parse_cpu_list("test", my_cpu_list());
  if (allowed.size() < 2) GTEST_SKIP() << "needs 2 allowed CPUs, this process has " << my_cpu_list();
  const auto result = run_process(cohortrun({"--bind-cores", "--nproc-per-node=2", COHORT_ENV_WORKER, "--print-cpus"}),
                                  clean_env());
  ASSERT_EQ(result.code, 0) << result.describe();
  const auto cpus = cpus_from_output(result.out);
  const auto envs = envs_from_output(result.out);
  ASSERT_EQ(cpus.size(), 2u) << result.describe();
  std::vector<int> seen;
  for (const auto& [rank, list] : cpus) {
    const auto mine = parse_cpu_list("worker", list);
    const size_t expected = allowed.size() / 2 + (rank < int(allowed.size() % 2) ? 1 : 0);
    EXPECT_EQ(mine.size(), expected) << "rank " << rank << ": " << list;  // 2 cores: one each
    for (const char* name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"}) {
      EXPECT_EQ(envs.at(rank).at(name), std::to_string(mine.size())) << name;
    }
    EXPECT_EQ(count_of(result.err, "--bind-cores: local rank " + std::to_string(rank) + " -> CPUs " + list +
                                       " (OMP_NUM_THREADS=" + std::to_string(mine.size()) + ")\n"), 1u)
        << result.describe();
    seen.insert(seen.end(), mine.begin(), mine.end());
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, allowed);  // disjoint, and together every allowed CPU
  // A user's OMP_NUM_THREADS is kept; the BLAS counts still follow the CPUs.
  const auto kept = run_process(cohortrun({"--bind-cores", "--nproc-per-node=2", COHORT_ENV_WORKER}),
                                clean_env({{"OMP_NUM_THREADS", "7"}}));
  ASSERT_EQ(kept.code, 0) << kept.describe();
  for (const auto& [rank, env] : envs_from_output(kept.out)) {
    EXPECT_EQ(env.at("OMP_NUM_THREADS"), "7");
    EXPECT_EQ(env.at("OPENBLAS_NUM_THREADS"), std::to_string(parse_cpu_list("worker", cpus.at(rank)).size()));
  }
}

TEST(CohortrunBindCores, WithoutTheFlagAffinityIsUnchanged) {
  const auto result = run_process(cohortrun({"--nproc-per-node=2", COHORT_ENV_WORKER, "--print-cpus"}), clean_env());
  ASSERT_EQ(result.code, 0) << result.describe();
  const auto cpus = cpus_from_output(result.out);
  ASSERT_EQ(cpus.size(), 2u) << result.describe();
  for (const auto& [rank, list] : cpus) EXPECT_EQ(list, my_cpu_list()) << "rank " << rank;
  for (const auto& [rank, env] : envs_from_output(result.out)) {
    EXPECT_EQ(env.at("OMP_NUM_THREADS"), "1");  // the usual one thread per worker
    EXPECT_FALSE(env.count("OPENBLAS_NUM_THREADS") || env.count("MKL_NUM_THREADS")) << rank;
  }
  EXPECT_EQ(result.err.find("--bind-cores"), std::string::npos) << result.describe();
}

TEST(CohortrunBindCores, MoreRanksThanCpusIsRefused) {
  const std::string list = my_cpu_list();
  const size_t count = parse_cpu_list("test", list).size();
  const std::string nproc = std::to_string(count + 1);
  const auto result =
      run_process(cohortrun({"--bind-cores", "--nproc-per-node=" + nproc, COHORT_ENV_WORKER}), clean_env());
  EXPECT_EQ(result.code, 2) << result.describe();
  EXPECT_EQ(result.err, "cohortrun: error: --bind-cores needs a core per local rank: --nproc-per-node=" + nproc +
                            " starts " + nproc + " but this process may use " + std::to_string(count) + " (CPUs " +
                            list + ")\n" + usage_hint() + "\n");
  EXPECT_TRUE(result.out.empty()) << result.describe();
}

TEST(CohortrunBindCores, RespectsTheLaunchersOwnCpuSet) {
  const std::vector<int> allowed = parse_cpu_list("test", my_cpu_list());
  if (allowed.size() < 2) GTEST_SKIP() << "needs 2 allowed CPUs, this process has " << my_cpu_list();
  const std::string last = std::to_string(allowed.back());  // as Slurm's cpuset or taskset would
  const auto one = run_process({"/usr/bin/taskset", "-c", last, COHORTRUN_PATH, "--bind-cores", COHORT_ENV_WORKER,
                                "--print-cpus"},
                               clean_env());
  ASSERT_EQ(one.code, 0) << one.describe();
  EXPECT_EQ(cpus_from_output(one.out), (std::map<int, std::string>{{0, last}})) << one.describe();
  const auto two = run_process({"/usr/bin/taskset", "-c", last, COHORTRUN_PATH, "--bind-cores", "--nproc-per-node=2",
                                COHORT_ENV_WORKER},
                               clean_env());
  EXPECT_EQ(two.code, 2) << two.describe();
  EXPECT_NE(two.err.find("--nproc-per-node=2 starts 2 but this process may use 1 (CPUs " + last + ")"),
            std::string::npos)
      << two.describe();
}

}  // namespace cohortrun_test
