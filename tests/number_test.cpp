// The one parser for numbers (include/cohort/number.h): whole text only, no overflow, no inf/nan,
// inside the setting's range, and one exact line naming the flag or variable when not. The
// COHORT_* variables read by cohort::init() go through it (issue 17, item 4).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>

#include "cohort/number.h"
#include "cohort/world.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace number_test {

namespace {

const cohort::IntegerRange kBatch{"--batch-size", 1, 1 << 20};
const cohort::RealRange kLr{"--lr", 1e-12, 1000};
const cohort::RealRange kTimeout{"COHORT_TIMEOUT", 0.001, 86400, "a number of seconds"};

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const cohort::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Number, IntegersInRange) {
  EXPECT_EQ(cohort::parse_integer("64", kBatch), 64);
  EXPECT_EQ(cohort::parse_integer("+64", kBatch), 64);
  EXPECT_EQ(cohort::parse_integer("1048576", kBatch), 1048576);
  EXPECT_EQ(cohort::parse_integer("-5", {"--x", -10, 10}), -5);
  EXPECT_EQ(cohort::parse_integer("9223372036854775807", {"--x"}), INT64_MAX);
}

TEST(Number, BadIntegersSayTheFlagTheRangeAndTheText) {
  EXPECT_EQ(error_of([] { cohort::parse_integer("99999999999999999999", kBatch); }),
            "--batch-size is out of range: expected an integer from 1 to 1048576, got 99999999999999999999");
  EXPECT_EQ(error_of([] { cohort::parse_integer("1048577", kBatch); }),
            "--batch-size is out of range: expected an integer from 1 to 1048576, got 1048577");
  EXPECT_EQ(error_of([] { cohort::parse_integer("0", kBatch); }),
            "--batch-size is out of range: expected an integer from 1 to 1048576, got 0");
  EXPECT_EQ(error_of([] { cohort::parse_integer("-99999999999999999999", kBatch); }),
            "--batch-size is out of range: expected an integer from 1 to 1048576, got -99999999999999999999");
  EXPECT_EQ(error_of([] { cohort::parse_integer("64x", kBatch); }),
            "--batch-size expects an integer from 1 to 1048576, got 64x");
  for (const char* junk : {" 64", "64 ", "6.4", "1e3", "0x40", "--1", "+", "-"}) {
    EXPECT_THAT(error_of([&] { cohort::parse_integer(junk, kBatch); }),
                ::testing::StartsWith("--batch-size expects an integer"))
        << junk;
  }
  EXPECT_EQ(error_of([] { cohort::parse_integer("", kBatch); }),
            "--batch-size expects an integer from 1 to 1048576, got \"\"");
}

TEST(Number, RealsInRange) {
  EXPECT_DOUBLE_EQ(cohort::parse_real("0.001", kLr), 0.001);
  EXPECT_DOUBLE_EQ(cohort::parse_real("1e-3", kLr), 0.001);
  EXPECT_DOUBLE_EQ(cohort::parse_real("1000", kLr), 1000);
  EXPECT_DOUBLE_EQ(cohort::parse_real(".5", kLr), 0.5);
  EXPECT_EQ(cohort::parse_real("inf", {"--x", 0, HUGE_VAL, "a number", true}), HUGE_VAL);
  // Hostile pass 8: an underflow is its nearest double (a denormal, or 0), as Python reads it; the
  // range judges it (it was "out of range ... from 0 to 0.999").
  const cohort::RealRange momentum{"--momentum", 0, 0.999, "a number"};
  EXPECT_EQ(cohort::parse_real("1e-320", momentum), 1e-320);
  EXPECT_EQ(cohort::parse_real("1e-400", momentum), 0.0);
  EXPECT_EQ(error_of([] { cohort::parse_real("1e-400", kLr); }),
            "--lr is out of range: expected a number from 1e-12 to 1000, got 1e-400");
}

TEST(Number, BadRealsSayTheFlagTheRangeAndTheText) {
  EXPECT_EQ(error_of([] { cohort::parse_real("inf", kLr); }),
            "--lr expects a number from 1e-12 to 1000, got inf");
  EXPECT_EQ(error_of([] { cohort::parse_real("nan", kLr); }),
            "--lr expects a number from 1e-12 to 1000, got nan");
  EXPECT_EQ(error_of([] { cohort::parse_real("1e400", kLr); }),
            "--lr is out of range: expected a number from 1e-12 to 1000, got 1e400");
  EXPECT_EQ(error_of([] { cohort::parse_real("0", kLr); }),
            "--lr is out of range: expected a number from 1e-12 to 1000, got 0");
  EXPECT_EQ(error_of([] { cohort::parse_real("1001", kLr); }),
            "--lr is out of range: expected a number from 1e-12 to 1000, got 1001");
  for (const char* junk : {"", " 1", "1 ", "0x1p3", "1e", "1,5", "infinity", "."}) {
    EXPECT_THAT(error_of([&] { cohort::parse_real(junk, kLr); }), ::testing::StartsWith("--lr expects a number"))
        << junk;
  }
}

TEST(Number, EnvironmentVariables) {
  unsetenv("COHORT_NUMBER_TEST");
  EXPECT_EQ(cohort::env_integer({"COHORT_NUMBER_TEST", 1, 8}, 4), 4);  // unset: the default
  setenv("COHORT_NUMBER_TEST", "", 1);
  EXPECT_EQ(cohort::env_integer({"COHORT_NUMBER_TEST", 1, 8}, 4), 4);  // empty: the default
  setenv("COHORT_NUMBER_TEST", "7", 1);
  EXPECT_EQ(cohort::env_integer({"COHORT_NUMBER_TEST", 1, 8}, 4), 7);
  setenv("COHORT_NUMBER_TEST", "9", 1);
  EXPECT_EQ(error_of([] { cohort::env_integer({"COHORT_NUMBER_TEST", 1, 8}, 4); }),
            "COHORT_NUMBER_TEST=9 is not an integer from 1 to 8");
  setenv("COHORT_TIMEOUT", "0.001", 1);
  EXPECT_DOUBLE_EQ(cohort::env_real(kTimeout, 300), 0.001);
  for (const char* bad : {"inf", "1e20", "0.0001", "-1", "soon", "nan", "0"}) {
    setenv("COHORT_TIMEOUT", bad, 1);
    EXPECT_EQ(error_of([] { cohort::env_real(kTimeout, 300); }),
              std::string("COHORT_TIMEOUT=") + bad + " is not a number of seconds from 0.001 to 86400");
  }
  unsetenv("COHORT_TIMEOUT");
  unsetenv("COHORT_NUMBER_TEST");
}

// cohort::init() reads COHORT_TIMEOUT through env_real: inf and 1e20 used to become a negative
// timeout ("timed out after -9223372036854775808 ms").
TEST(Number, InitRefusesAnOverflowingTimeout) {
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  for (const char* bad : {"inf", "1e20"}) {
    setenv("COHORT_TIMEOUT", bad, 1);
    EXPECT_EQ(error_of([] { cohort::init(); }),
              std::string("COHORT_TIMEOUT=") + bad + " is not a number of seconds from 0.001 to 86400");
  }
  unsetenv("COHORT_TIMEOUT");
  setenv("COHORT_SHM_BYTES", "99999999999999999999", 1);
  EXPECT_EQ(error_of([] { cohort::init(); }),
            "COHORT_SHM_BYTES=99999999999999999999 is not a number of bytes from 1 to 1073741824");
  unsetenv("COHORT_SHM_BYTES");
}

}  // namespace

}  // namespace number_test
