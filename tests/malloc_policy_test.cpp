// The allocator policy of cohort::init() (src/world/malloc_policy.cpp), each case in a fresh process
// (mallopt settings last for the process): after init, a freed 40 MiB block is reused without page
// faults; with COHORT_MALLOC_TUNING=0, or with the user's own GLIBC_TUNABLES, glibc's defaults stay and
// the block is mapped and faulted in again each time. Fault counts far apart (0 against ~10,000),
// not timings.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdlib>
#include <map>
#include <string>

#include "cohort/world.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace malloc_policy_test {

using ::testing::HasSubstr;
using cohort::testing::report;
using cohort::testing::run_ranks;
using cohort::testing::RanksOptions;

namespace {

constexpr size_t kBlock = size_t(40) << 20;  // above glibc's largest dynamic mmap threshold (32 MiB)

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Faults of one malloc, touch, free of kBlock. Through volatile pointers so the compiler keeps them.
long faults_of_one_round() {
  void* (*volatile allocate)(size_t) = std::malloc;
  void (*volatile release)(void*) = std::free;
  const long before = minor_faults();
  auto* block = static_cast<volatile char*>(allocate(kBlock));
  for (size_t i = 0; i < kBlock; i += 4096) block[i] = char(i);
  release(const_cast<char*>(block));
  return minor_faults() - before;
}

// The second round's faults after cohort::init(), in a fresh process with `env`.
long second_round_faults(const std::map<std::string, std::string>& env) {
  RanksOptions options;
  options.env = env;
  auto results = run_ranks(1, [](int, int) {
    cohort::init();
    faults_of_one_round();
    report(std::to_string(faults_of_one_round()));
  }, options);
  if (results.empty() || results[0].reports.empty()) {
    ADD_FAILURE() << "the rank reported nothing:\n" << cohort::testing::describe(results);
    return -1;
  }
  return std::stol(results[0].reports[0]);
}

}  // namespace

TEST(MallocPolicy, InitKeepsFreedBlocksForReuse) {
  EXPECT_LT(second_round_faults({{"COHORT_MALLOC_TUNING", ""}, {"GLIBC_TUNABLES", ""}}), 100);
}

TEST(MallocPolicy, OptOutKeepsGlibcsDefaults) {
  // Every page of the block is faulted in again: 10,240 pages of 4 KiB (fewer with huge pages).
  EXPECT_GT(second_round_faults({{"COHORT_MALLOC_TUNING", "0"}, {"GLIBC_TUNABLES", ""}}), 1000);
}

TEST(MallocPolicy, UsersOwnTunablesWin) {
  // The user asks for glibc's default mmap threshold: cohort must not override it.
  EXPECT_GT(second_round_faults({{"GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=131072"}}), 1000);
}

TEST(MallocPolicy, SaysWhatItSetInTheInfoLog) {
  RanksOptions options;
  options.env = {{"COHORT_LOG_LEVEL", "info"}, {"COHORT_MALLOC_TUNING", ""}, {"GLIBC_TUNABLES", ""}};
  auto results = run_ranks(1, [](int, int) { cohort::init(); }, options);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_THAT(results[0].output, HasSubstr("malloc: M_MMAP_THRESHOLD=64 MiB, M_TRIM_THRESHOLD=256 MiB"));
  EXPECT_THAT(results[0].output, HasSubstr("COHORT_MALLOC_TUNING=0 turns this off"));
}

TEST(MallocPolicy, RejectsAValueThatIsNotASwitch) {
  RanksOptions options;
  options.env = {{"COHORT_MALLOC_TUNING", "2"}};
  options.expect_all_pass = false;
  auto results = run_ranks(1, [](int, int) {
    try {
      cohort::init();
      report("no error");
    } catch (const std::exception& e) {
      report(e.what());
    }
  }, options);
  ASSERT_FALSE(results.empty());
  ASSERT_FALSE(results[0].reports.empty()) << results[0].output;
  EXPECT_THAT(results[0].reports[0],
              HasSubstr("COHORT_MALLOC_TUNING=2 is not a switch (0: glibc's defaults, 1: keep freed memory, the "
                        "default) from 0 to 1"));
}

}  // namespace malloc_policy_test
