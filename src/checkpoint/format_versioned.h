// An adapter whose saved numbers changed with the manifest's format version: told the version of the
// checkpoint being loaded before its check_state_values() runs. The optimizer adapters count their
// parameters from format version 4 on, so there an entry without its counts is damage, not an older
// writer's (hostile pass 13, S-1: an optimizer entry emptied to {} resumed with the optimizer restarted).
#pragma once

#include "cohort/stateful.h"

namespace cohort::detail::ckpt {

class FormatVersioned {
 public:
  virtual ~FormatVersioned() = default;
  /// The loading checkpoint's manifest format_version.
  virtual void set_format_version(int version) = 0;
};

/// Tells `stateful` the version when it is a FormatVersioned.
inline void tell_format_version(Stateful& stateful, int version) {
  if (auto* versioned = dynamic_cast<FormatVersioned*>(&stateful)) versioned->set_format_version(version);
}

}  // namespace cohort::detail::ckpt
