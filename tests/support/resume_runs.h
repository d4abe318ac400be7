// The scaffolding of tests that train, stop at a checkpoint and resume in several run_ranks calls.
// A rank process runs the body of the first run_ranks call it reaches, so every call passes one body
// that reads its part (load from, save to, train until, write the parameters to) from the environment.
#pragma once

#include <torch/serialize.h>
#include <torch/types.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "support/multiproc.h"

namespace cohort::testing {

/// One run of a resume test: the checkpoint to load ("" none) and to save ("" none), the step to
/// train until, and where rank 0 writes its parameters.
struct ResumeRun {
  std::string load, save;
  int64_t until = 0;
  std::string out;
};

/// The test process: passes `run` to the rank processes under `<prefix>_LOAD` ... `<prefix>_OUT`.
inline void set_resume_run(RanksOptions& options, const std::string& prefix, const ResumeRun& run) {
  options.env[prefix + "_LOAD"] = run.load;
  options.env[prefix + "_SAVE"] = run.save;
  options.env[prefix + "_UNTIL"] = std::to_string(run.until);
  options.env[prefix + "_OUT"] = run.out;
}

/// A rank process: the run set_resume_run passed.
inline ResumeRun resume_run(const std::string& prefix) {
  const auto get = [&](const char* part) {
    const char* value = std::getenv((prefix + part).c_str());
    return std::string(value ? value : "");
  };
  return {get("_LOAD"), get("_SAVE"), std::atoll(get("_UNTIL").c_str()), get("_OUT")};
}

/// Tensors torch::save wrote (rank 0's parameters).
inline std::vector<torch::Tensor> load_tensors(const std::string& path) {
  std::vector<torch::Tensor> tensors;
  torch::load(tensors, path);
  return tensors;
}

}  // namespace cohort::testing
