// Horovod's controller for cohort::hvd: operations are matched across ranks by name, so ranks may
// submit them in any order. A background thread per process set runs negotiation rounds and is the
// only caller of that set's Comm, so the collectives it starts pair up on every rank.
//
// Note "negotiation": a rank with operations waiting to start runs a round; a round is collective on
// the set's ranks. (1) An allreduce (min) of a small int32 vector: [0] how many unnamed operations
// wait here (unnamed ones are matched by their order, so the minimum of the counts may start),
// [1] 1 unless some name waiting here is not in the response cache, [2 + b] 1 when the cached name of
// bit b waits here. (2) Only when some rank has an uncached name: every rank's waiting names are
// gathered and those every rank has are agreed, in rank 0's order, and cached under new bits in that
// order (equal on every rank). Then every rank starts the unnamed ones, then the agreed names in bit
// (or agreed) order. A steady loop's names are all cached after its first step, so it pays step (1)
// only. A round that starts nothing waits HOROVOD_CYCLE_TIME (or a new submission) before the next.
//
// Note "join": the vector of (1) also holds one flag per rank, 0 where that rank called hvd::join().
// A joined rank runs rounds until every rank has joined, reporting all unnamed and cached operations
// as waiting (so it limits nothing). While some rank has joined, every round exchanges every rank's
// waiting operations with their descriptions (shadow.h) instead of using the cache: the operations
// every rank that has not joined has are agreed (in the order of the lowest such rank), and a joined
// rank without one of them issues its shadow (the same allreduce with zeros). An agreed operation that
// cannot be shadowed (not a Sum or Average allreduce) fails on every rank that has it, as Horovod's.
// The round in which the last ranks join starts nothing and ends the join on every rank: hvd::join()
// returns the highest of the ranks that joined in that round (the last to join).
#pragma once

#include <torch/types.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cohort/horovod.h"
#include "horovod/response_cache.h"
#include "horovod/shadow.h"

namespace cohort::hvd::detail {

/// A started operation: its collective (an empty Work when there is none left to wait for) and what
/// turns the moved data into the results (scaling, unpacking), run by synchronize().
struct Started {
  Work work;
  std::function<std::vector<torch::Tensor>()> finish;
};

/// One hvd operation from submit to synchronize.
struct Op {
  Handle handle = -1;
  int process_set = 0;
  std::string name;                          // the user's name, or "<kind>.noname.<n>"
  std::string kind;                          // "allreduce", "allgather", ...
  std::string caller;                        // names the call in errors ("hvd::allgather")
  std::optional<Shadow> shadow;              // how a joined rank repeats it (allreduces only)
  bool named = true;                         // matched by name; unnamed ones by their order among unnamed ones
  std::function<Started(Comm& comm)> start;  // issues the collective on the set's Comm
  // Set once by the controller (under its mutex) when the operation started or failed to.
  bool launched = false;
  Started started;
  std::exception_ptr error;
};

struct ControllerConfig {
  double cycle_time_ms = 1.0;    // HOROVOD_CYCLE_TIME: the wait after a round that started nothing
  size_t cache_capacity = 1024;  // HOROVOD_CACHE_CAPACITY
};

class Controller {
 public:
  Controller(std::shared_ptr<Comm> comm, ControllerConfig config);
  /// Stops the thread; a round still waiting for other ranks is ended by aborting the set's Comm.
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  /// Queues `op` for the next round.
  void enqueue(const std::shared_ptr<Op>& op);
  /// Blocks until `op` started (or failed to start).
  void wait_launched(const Op& op);
  bool launched(const Op& op);

  /// What hvd::join() returns, and the unnamed operations this rank shadowed meanwhile (its count of
  /// unnamed operations moves on by as many, so their names stay equal across ranks).
  struct JoinResult {
    int last_rank = -1;
    int64_t shadowed_unnamed = 0;
  };
  /// hvd::join(): blocks until every rank of the set joined (note "join"); shadows of CUDA allreduces
  /// go on `device`.
  JoinResult join(const torch::Device& device);

 private:
  void run();
  /// One round (note "negotiation"); false when it started nothing.
  bool round();
  /// Step (2): the names waiting on every rank, in rank 0's order.
  std::vector<std::string> exchange_names(const std::vector<std::string>& mine);
  /// Every rank's list of strings (one allgather of the encoded lists), in rank order.
  std::vector<std::vector<std::string>> gather_lists(const std::vector<std::string>& mine);
  /// A round while `joined` ranks (not all) have joined (note "join", join_round.cpp).
  bool join_round(const std::vector<bool>& joined, int32_t ready_unnamed,
                  const std::vector<std::shared_ptr<Op>>& unnamed, const std::vector<std::shared_ptr<Op>>& named);
  /// The round in which every rank has joined: join() returns on this rank.
  void finish_join(const std::vector<bool>& joined);
  void fail(const std::shared_ptr<Op>& op, const std::string& message);
  void launch(const std::shared_ptr<Op>& op);
  void fail_waiting(std::exception_ptr error);

  std::shared_ptr<Comm> comm_;
  ControllerConfig config_;
  ResponseCache cache_;  // used by the thread only
  std::mutex mutex_;
  std::condition_variable wake_;      // new work or stop, for the thread
  std::condition_variable launched_;  // an operation started, for synchronize()
  std::deque<std::shared_ptr<Op>> unnamed_;
  std::vector<std::shared_ptr<Op>> named_;  // in submission order
  std::exception_ptr failure_;              // the round that failed; every later operation fails with it
  bool stop_ = false;
  bool in_round_ = false;
  // hvd::join() on this rank (under mutex_): waiting, its answer once every rank joined.
  bool joining_ = false;
  std::optional<JoinResult> join_result_;
  torch::Device shadow_device_ = torch::kCPU;
  // The thread's own: who had joined at the last round, the last to join so far, unnamed shadows.
  std::vector<bool> joined_before_;
  int last_joined_ = -1;
  int64_t shadowed_unnamed_ = 0;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace cohort::hvd::detail
