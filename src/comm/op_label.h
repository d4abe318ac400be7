// A name for the collectives a caller issues (Horovod names every tensor it reduces): while an
// OpLabelScope lives, each op this thread issues carries the label in its fingerprint. The label is
// part of the agreement (ranks that name their calls differently are desynchronized) and every
// message about the op shows it: "collective #4 allreduce(sum) float32 [3] 'fc1.weight'".
#pragma once

#include <string>

namespace cohort::detail {

class OpLabelScope {
 public:
  explicit OpLabelScope(std::string label);
  ~OpLabelScope();
  OpLabelScope(const OpLabelScope&) = delete;
  OpLabelScope& operator=(const OpLabelScope&) = delete;

 private:
  std::string previous_;
};

/// The label of the innermost OpLabelScope on this thread, or "".
const std::string& current_op_label();

}  // namespace cohort::detail
