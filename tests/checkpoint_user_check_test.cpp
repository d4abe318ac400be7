// CheckpointState::check_user_values: a throw marks the checkpoint unusable (the load falls back to an
// older one), except a kInvalidArgument one, which says the values were saved under settings this run
// does not have and refuses the load at once (hostile pass 18 m-2: gpt's "--n-embd 32, but the
// checkpoint's model was saved with --n-embd 64" walked back through every older checkpoint and ended
// in "no usable checkpoint").
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "cohort/checkpoint.h"
#include "cohort/error.h"
#include "support/small_models.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace checkpoint_user_check_test {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// step-10 saved with width "8", step-20 with width `newest`.
struct Saved {
  explicit Saved(const std::string& newest) {
    char name[] = "/tmp/checkpoint_user_check_XXXXXX";
    dir = ::mkdtemp(name);
    for (const auto& [step, width] : {std::pair<int64_t, std::string>{10, "8"}, {20, newest}}) {
      cohort::CheckpointState state;
      state.add("model", *model).set("width", width).set_step(step);
      cohort::save_checkpoint(dir, state);
    }
  }
  ~Saved() { fs::remove_all(dir); }

  // A load whose check throws `kind` for a width other than "8".
  cohort::CheckpointState state_checking(cohort::ErrorKind kind) {
    cohort::CheckpointState state;
    state.add("model", *model).check_user_values([kind](const std::map<std::string, std::string>& user, int) {
      if (user.at("width") != "8") throw cohort::Error("--width 8, but it was saved with " + user.at("width"), kind);
    });
    return state;
  }

  std::string dir;
  cohort::testing::Mlp model;
};

TEST(CheckpointUserCheck, ASettingThisRunDoesNotHaveRefusesTheLoadWithoutFallingBack) {
  Saved saved("16");
  cohort::CheckpointState state = saved.state_checking(cohort::ErrorKind::kInvalidArgument);
  ::testing::internal::CaptureStderr();
  try {
    cohort::load_checkpoint(saved.dir, state);
    ADD_FAILURE() << "expected cohort::Error";
  } catch (const cohort::Error& e) {
    EXPECT_EQ(e.kind(), cohort::ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("checkpoint " + saved.dir + "/step-20: --width 8, but it was saved with 16"));
    EXPECT_THAT(e.what(), Not(HasSubstr("no usable checkpoint")));
  }
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), Not(HasSubstr("falling back")));
  EXPECT_EQ(state.step(), 0);  // nothing loaded
}

TEST(CheckpointUserCheck, AValueTheCheckCannotTakeFallsBackToTheOlderCheckpoint) {
  Saved saved("garbled");
  cohort::CheckpointState state = saved.state_checking(cohort::ErrorKind::kIO);
  ::testing::internal::CaptureStderr();
  const auto info = cohort::load_checkpoint(saved.dir, state);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("falling back to " + saved.dir + "/step-10"));
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->step, 10);
  EXPECT_EQ(state.get("width"), "8");
}

}  // namespace checkpoint_user_check_test
