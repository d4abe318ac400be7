// The state of cohort::hvd between init() and shutdown(): the world, Horovod's settings, the Comm its
// operations run on (a copy of the world's, so they never interleave with other callers of the world),
// the table of operations in flight with their names, the controller that matches them across ranks
// by name (controller.h) and the stall inspector. Every hvd operation goes through Context::submit,
// which numbers it (the handle), checks that its name is not in flight and hands it to the controller.
#pragma once

#include <torch/types.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cohort/horovod.h"
#include "horovod/controller.h"
#include "horovod/settings.h"
#include "horovod/stall_inspector.h"

namespace cohort::hvd::detail {

/// What submit() needs to know of an operation besides how to start it.
struct Request {
  const char* caller = "";  // names the call in errors ("hvd::allreduce")
  std::string kind;         // "allreduce", ...: the unnamed operation's name is "<kind>.noname.<n>"
  std::string name;         // empty: unnamed, matched by its order among the set's unnamed operations
  int process_set = 0;
  std::optional<Shadow> shadow;  // set for allreduces: how a joined rank repeats it (shadow.h)
};

class Context {
 public:
  /// The context made by init(); throws cohort::Error naming `caller` when init() was not called.
  static Context& get(const char* caller);
  static void create(const InitOptions& options);
  static void destroy();
  static bool exists();

  explicit Context(World world);
  ~Context();

  const World& world() const { return world_; }
  int cross_rank() const { return cross_rank_; }
  int cross_size() const { return cross_size_; }
  const Settings& settings() const { return settings_; }

  /// Queues a new operation and returns its handle; start(comm) issues its collective on the process
  /// set's Comm once every rank of the set submitted it (note "negotiation"), or at once with
  /// COHORT_HVD_ORDERED=1 or on a set of one. It may run on another thread: it captures by value.
  Handle submit(const Request& request, std::function<Started(Comm& comm)> start);
  bool poll(Handle handle, const char* caller);
  /// Waits, finishes and forgets the operation; its name is free again afterwards (also on error).
  std::vector<torch::Tensor> synchronize(Handle handle, const char* caller);

  /// hvd::join() (controller.h, note "join"): the last rank to join.
  int join();

  /// hvd::add_process_set: a new set of world `ranks` (collective over the world); returns its id.
  int add_process_set(const std::vector<int>& ranks);
  /// Set `id`'s world ranks, ascending; throws naming `caller` for an id no add_process_set returned.
  std::vector<int> process_set_ranks(int id, const char* caller);
  /// The place of world rank `rank` in set `id`, or -1.
  int place_in_set(int id, int rank, const char* caller);

 private:
  struct ProcessSetState {
    std::vector<int> ranks;                  // world ranks, ascending
    std::shared_ptr<Comm> owned;             // the set's own Comm (none for the world of one)
    Comm* comm = nullptr;                    // null where this rank is not in the set
    std::unique_ptr<Controller> controller;  // null: operations start as they are submitted
    int64_t next_unnamed = 0;
  };
  using NameKey = std::pair<int, std::string>;  // (process set, name)

  void add_set_state(int id, std::vector<int> ranks, std::shared_ptr<Comm> comm);
  ProcessSetState& set_state(int id, const char* caller);  // under mutex_
  std::shared_ptr<Op> take(Handle handle, const char* caller);
  void release(const Op& op);

  World world_;
  int cross_rank_ = 0, cross_size_ = 1;
  Settings settings_;
  std::mutex mutex_;
  Handle next_handle_ = 0;
  std::map<Handle, std::shared_ptr<Op>> in_flight_;
  std::map<NameKey, Handle> names_;        // names of operations not yet synchronized
  std::unique_ptr<StallInspector> stall_;  // the global set's operations
  std::map<int, ProcessSetState> sets_;    // last: their controllers stop before the rest goes
};

}  // namespace cohort::hvd::detail
