// The command line a cohortrun test starts: cohortrun's path, then the arguments.
#pragma once

#include <string>
#include <vector>

#include "cohortrun_test_paths.h"

namespace cohort::testing {

inline std::vector<std::string> cohortrun(std::vector<std::string> args) {
  args.insert(args.begin(), COHORTRUN_PATH);
  return args;
}

}  // namespace cohort::testing
