// One answer to "which Comm?" (see resolve_comm.h).
#include "world/resolve_comm.h"

#include <mutex>
#include <string>

#include "cohort/world.h"
#include "comm/comm_impl.h"
#include "core/log.h"
#include "world/launch_env.h"

namespace cohort::detail {
namespace {

// A launcher's word that this process is one of several ranks, or "" when none says so (launcher
// detection is init()'s own; a malformed environment is init()'s to report, not this warning's).
std::string launcher_rank_hint() {
  try {
    const LaunchEnv launch = detect_launch_env(current_env());
    if (launch.size > 1)
      return launch.launcher + " (rank " + std::to_string(launch.rank) + " of " + std::to_string(launch.size) + ")";
  } catch (const std::exception&) {
  }
  return "";
}

}  // namespace

std::shared_ptr<Comm> resolve_comm(std::shared_ptr<Comm> given, const char* who) {
  if (given) return given;
  if (is_initialized()) return current_world().comm_ptr();
  const std::string hint = launcher_rank_hint();
  if (!hint.empty()) {
    static std::once_flag warned;
    std::call_once(warned, [&] {
      COHORT_WARN(who, ": cohort::init() has not been called, but ", hint,
                  " says this process is one rank of many; it runs as a world of one (call cohort::init() "
                  "first to train across the launcher's ranks)");
    });
  }
  return std::make_shared<Comm>(std::make_unique<CommImpl>(CommConfig{}));
}

}  // namespace cohort::detail
