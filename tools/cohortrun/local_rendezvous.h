// The rendezvous of a single-node job (rendezvous.h): no store, no other node; each round gets a free
// port on this host for the workers' own rendezvous (or torchrun's MASTER_ADDR:MASTER_PORT under static).
#pragma once

#include <string>

#include "cohortrun/rendezvous.h"
#include "core/job_secret.h"

namespace cohort::detail::launch {

/// The workers' secret (core/job_secret.h): the user's COHORT_JOB_SECRET, else a fresh random one.
std::string workers_secret();

class LocalRendezvous : public Rendezvous {
 public:
  explicit LocalRendezvous(const LaunchOptions& options)
      : options_(options), secret_(workers_secret()), launch_id_(new_launch_id()) {}

  RoundInfo join(int round, int failure_restarts) override;
  RoundCounts counts(int) override { return {}; }
  std::optional<Outcome> outcome(int) override { return std::nullopt; }
  Outcome publish(int, const Outcome& mine) override { return mine; }
  void report_done(int) override {}
  bool all_done(int) override { return true; }
  void leave(int, const std::string&) override {}
  std::string where() const override { return "this node"; }

 private:
  const LaunchOptions& options_;
  std::string secret_;
  std::string launch_id_;
};

}  // namespace cohort::detail::launch
