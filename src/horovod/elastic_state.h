// What is behind hvd::elastic::State (elastic_state.cpp) and what run() (elastic_run.cpp) needs of it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cohort/horovod.h"

namespace cohort::hvd::elastic {

struct State::Impl {
  std::shared_ptr<torch::nn::Module> model;
  std::shared_ptr<torch::optim::Optimizer> optimizer;
  std::vector<std::pair<std::string, c10::IValue>> values;
  std::vector<std::function<void()>> callbacks;
  std::string path;       // <directory>/hvd-elastic-state.pt
  std::string committed;  // the last commit or sync, serialized; empty before the first
  int64_t commits = 0;
  bool swept = false;  // rank 0 removed a killed commit's temporary before its first write

  /// Model, optimizer, values and the commit count as bytes, and back (`what` names the bytes in errors).
  std::string serialize() const;
  void load(const std::string& bytes, const std::string& what);
};

}  // namespace cohort::hvd::elastic
