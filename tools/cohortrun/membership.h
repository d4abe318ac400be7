// The rules of a rendezvous round as pure functions: when the host closes a round and with how many
// nodes, which arrivals belong to it, and the outcome record every node reads when a group ends.
// The protocol itself (store keys, who waits where) is described in rendezvous.h.
#pragma once

#include <string>

#include "cohortrun/options.h"

namespace cohort::detail::launch {

/// The number of nodes the host closes the round with, or 0 to keep waiting. `arrived` counts the
/// host; `last_call_over` is true once MIN nodes have been there for last_call_timeout seconds.
int close_count(int arrived, const NodeRange& range, bool last_call_over);

/// Whether the node that got arrival number `arrival` (host 0, others 1, 2, ... in order of
/// arrival) is a member of a round closed with `count` nodes.
inline bool is_member(int arrival, int count) { return arrival >= 0 && arrival < count; }

/// How a round ended, as published by the first node that saw it end. kRestart: a worker failed and
/// --max-restarts allows another round; kRescale: nodes wait to join (torchelastic's scale-up), a
/// restart that --max-restarts does not count.
struct Outcome {
  enum class Kind { kRestart, kFail, kStop, kRescale };
  Kind kind = Kind::kFail;
  int node = 0;             // the node that published it
  std::string description;  // e.g. "rank 3 exited with code 1"
};

std::string encode_outcome(const Outcome& outcome);
/// Throws std::invalid_argument on a record it cannot read.
Outcome decode_outcome(const std::string& text);

/// "restart", "fail", "stop" or "rescale".
const char* outcome_kind_name(Outcome::Kind kind);

/// After a worker failure: restart while fewer than `max_restarts` failures have restarted the
/// group (restarts for joining nodes do not count, as in torchelastic), else fail.
Outcome::Kind decision_after_failure(int failure_restarts, int max_restarts);

/// Whether a running round of `node_count` nodes restarts to take in the `waiting` nodes that
/// arrived for the next round (torchelastic's agent polls num_nodes_waiting): only while the job can
/// grow and no node's workers have finished (`done`), whose work a restart would repeat.
bool should_rescale(int waiting, int node_count, const NodeRange& range, int done);

}  // namespace cohort::detail::launch
