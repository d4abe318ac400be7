// hvd::elastic::run (include/cohort/horovod_elastic.h): Horovod's elastic loop on cohortrun's restarts.
// Horovod keeps the surviving processes and re-forms the ring in them; cohort's Comm cannot take a
// rank out of a running world, so a failure ends every process (exit code kRestartExitCode, at once:
// the exit handlers would wait for the dead peer) and cohortrun --max-restarts starts the group again,
// on the nodes its rendezvous admits. The new processes resume from the commit rank 0 persisted.
#include "cohort/number.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/safe_file.h"
#include "horovod/context.h"
#include "horovod/elastic_state.h"

namespace cohort::hvd::elastic {
namespace {

constexpr int64_t kMaxCommitBytes = int64_t(1) << 40;

// Rank 0 loads the newest commit when the directory holds one; true when it did.
bool restore_newest_commit(State::Impl& state) {
  if (hvd::rank() != 0 || !std::filesystem::exists(std::filesystem::symlink_status(state.path))) return false;
  state.load(cohort::detail::read_own_file(state.path, "hvd elastic commit", kMaxCommitBytes), state.path);
  return true;
}

}  // namespace

void run(State& state, const std::function<void(State&)>& fn) {
  detail::Context::get("hvd::elastic::run");
  try {
    const int64_t restart = env_integer({"TORCHELASTIC_RESTART_COUNT", 0, INT32_MAX}, 0);
    if (restore_newest_commit(*state.impl_)) {
      std::fprintf(stderr, "hvd::elastic: restored commit %lld of %s (restart %lld, %d rank(s))\n",
                   (long long)state.impl_->commits, state.impl_->path.c_str(), (long long)restart, hvd::size());
    }
    state.sync();
    if (restart > 0) state.on_reset();
    fn(state);
  } catch (const cohort::Error& error) {
    std::fprintf(stderr,
                 "%s\nhvd::elastic::run: exiting with code %d so that the launcher restarts every rank "
                 "from the last commit (cohortrun --max-restarts)\n",
                 error.what(), kRestartExitCode);
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(kRestartExitCode);
  }
}

}  // namespace cohort::hvd::elastic
