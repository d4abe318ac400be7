// A mistake in the command line found only once the job's world is known (the mesh flags against the
// world size): parse_and_run (cli_main.h) says it once, on rank 0, with exit status 2 as for any other
// command-line mistake, since every rank finds the same.
#pragma once

#include <string>

#include "cohort/error.h"

namespace examples {

class CommandLineError : public cohort::Error {
 public:
  explicit CommandLineError(const std::string& what) : cohort::Error(what, cohort::ErrorKind::kInvalidArgument) {}
};

}  // namespace examples
