// Which job a process belongs to, proved at the rendezvous. Two jobs that meet at one
// MASTER_ADDR:MASTER_PORT (two launches on the default port 29500) must refuse each other, never form
// one world of strangers. The run id is the launcher's (LaunchEnv::run_id: TORCHELASTIC_RUN_ID, which
// cohortrun always sets, or the Slurm/MPI job id). The store's host publishes it before any rank
// announces itself (and names it in every greeting, store_client.h), every other rank compares before
// it does, and the control plane checks it again on each connection (comm/control_plane.h), so a
// stranger never takes part in a collective.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <optional>
#include <string>

#include "cohort/error.h"

namespace cohort::detail {

/// What check_same_job needs to know about this rank and its rendezvous.
struct JobCheck {
  std::string run_id;  // this rank's job (may be empty: no launcher named it)
  /// kPublish: the rank hosting the store (rank 0) says whose it is. kCompare: the other ranks read
  /// that and compare. kFirstPublishes: the launcher hosts the store (torchrun's agent store), so the
  /// first rank to arrive publishes and every later one compares.
  enum class Role { kPublish, kCompare, kFirstPublishes } role = Role::kCompare;
  std::string host;  // the store's address and port
  int port = 0;
  std::chrono::milliseconds timeout{300000};

  std::string where() const { return host + ":" + std::to_string(port); }
};

/// kCompare, before this rank proves itself to the store: reads whose store listens at
/// check.host:check.port and throws cohort::Error naming both jobs when it is another job's.
void check_listening_job(const JobCheck& check);

/// Publishes or compares this rank's run id in `store` (before anything else is written there).
/// Throws cohort::Error naming both jobs when the store belongs to another job, and on timeout.
void check_same_job(c10d::Store& store, const JobCheck& check);

/// Thrown by check_same_job when the store gave no answer (it went away, or said nothing in time), as
/// opposed to naming another job: a store that vanished may have been another job's, so the caller
/// connects again while its deadline allows.
class JobUnanswered : public Error {
 public:
  explicit JobUnanswered(const std::string& message) : Error(message, ErrorKind::kTimeout) {}
};

/// The run id published in the store that listens at host:port, read within `timeout` (a port in use:
/// whose is it?). nullopt when nothing answers as a cohort store in time. Never throws.
std::optional<std::string> job_listening_at(const std::string& host, int port, std::chrono::milliseconds timeout);

}  // namespace cohort::detail
