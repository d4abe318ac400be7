// The state of cohort::hvd between init() and shutdown(): the world, Horovod's settings, the table
// of operations in flight (handle -> the Work and how to finish it) with their names, and the stall
// inspector. Every hvd operation goes through Context::submit, which numbers it (the handle), checks
// that its name is not in flight, labels its collectives with the name (comm/op_label.h) and tells
// the stall inspector.
#pragma once

#include <torch/types.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cohort/horovod.h"
#include "horovod/settings.h"
#include "horovod/stall_inspector.h"

namespace cohort::hvd::detail {

/// A started operation: its collective (an empty Work when there is none left to wait for) and what
/// turns the moved data into the results (scaling, unpacking), run by synchronize().
struct Started {
  Work work;
  std::function<std::vector<torch::Tensor>()> finish;
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
  Comm& comm() const { return world_.comm(); }
  int cross_rank() const { return cross_rank_; }
  int cross_size() const { return cross_size_; }
  const Settings& settings() const { return settings_; }

  /// Runs start(name) for a new operation of `kind` ("allreduce", ...) named `name` (empty:
  /// "<kind>.noname.<handle>") and returns its handle. `caller` names the call in errors.
  Handle submit(const char* caller, const std::string& kind, const std::string& name,
                const std::function<Started(const std::string& name)>& start);
  bool poll(Handle handle, const char* caller);
  /// Waits, finishes and forgets the operation; its name is free again afterwards (also on error).
  std::vector<torch::Tensor> synchronize(Handle handle, const char* caller);

 private:
  struct InFlight {
    std::string name;
    Started started;
  };
  InFlight take(Handle handle, const char* caller);
  void release(Handle handle, const std::string& name);

  World world_;
  int cross_rank_ = 0, cross_size_ = 1;
  Settings settings_;
  std::mutex mutex_;
  Handle next_handle_ = 0;
  std::map<Handle, InFlight> in_flight_;
  std::map<std::string, Handle> names_;  // names of operations not yet synchronized
  std::unique_ptr<StallInspector> stall_;
};

}  // namespace cohort::hvd::detail
