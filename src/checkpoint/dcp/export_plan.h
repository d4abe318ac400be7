// The plan of cohort-ckpt export --format dcp (export.h): which DCP key each saved tensor becomes
// (model.<fqn>, optimizer.state.<fqn>.<field>), the step counts and Adam's param_groups made from the
// engine's values, and what cannot map, refused by name before anything is written.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "checkpoint/dcp/export.h"
#include "checkpoint/manifest.h"

namespace cohort::detail::dcp {

/// One key of the DCP state dict: a saved tensor, a step count, or a Python object (param_groups).
struct Source {
  std::string key;
  std::vector<std::string> path;  ///< its nesting: {"model", fqn}, {"optimizer", "state", fqn, field}
  const ckpt::TensorRecord* record = nullptr;
  std::optional<float> step;  ///< a 0-d float32 step count
  std::string pickle;         ///< an object's data.pkl
};

struct ExportPlan {
  std::vector<Source> sources;
  std::vector<std::string> skipped;     ///< what a DCP state dict has no place for, each "name: why"
  std::vector<std::string> parameters;  ///< the optimizer's, in the checkpoint's order
};

/// The keys of `m`'s tensors and values; throws cohort::Error (kInvalidArgument) naming what cannot map.
ExportPlan plan_export(const ckpt::Manifest& m, const ExportOptions& options);

}  // namespace cohort::detail::dcp
