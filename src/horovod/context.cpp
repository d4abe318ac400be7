// cohort::hvd's state and operation table (see context.h), and hvd::init / shutdown / the ranks.
#include "horovod/context.h"

#include <cstdlib>

#include "comm/comm_impl.h"
#include "comm/op_label.h"
#include "core/log.h"
#include "core/trace_recorder.h"

namespace cohort::hvd {
namespace detail {
namespace {

std::mutex g_mutex;
std::unique_ptr<Context> g_context;

// Horovod's cross communicator: the ranks with this rank's local rank, one per node, by node.
std::pair<int, int> cross_rank_and_size(const World& world) {
  if (world.size() == 1) return {0, 1};
  auto places = world.comm().allgather(torch::tensor({int64_t(world.node_rank()), int64_t(world.local_rank())}));
  int rank = 0, size = 0;
  for (int r = 0; r < world.size(); ++r) {
    if (places[r][1].item<int64_t>() != world.local_rank()) continue;
    ++size;
    if (places[r][0].item<int64_t>() < world.node_rank()) ++rank;
  }
  return {rank, size};
}

}  // namespace

Context& Context::get(const char* caller) {
  std::lock_guard<std::mutex> lock(g_mutex);
  COHORT_CHECK(g_context != nullptr, caller, ": cohort::hvd is not initialized; call cohort::hvd::init() first");
  return *g_context;
}

void Context::create(const InitOptions& options) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_context) return;
  // Horovod's timeline variable: before init, so init starts recording (COHORT_TIMELINE loses to it).
  if (const char* timeline = std::getenv("HOROVOD_TIMELINE")) cohort::detail::trace::configure(timeline);
  g_context = std::make_unique<Context>(cohort::init(options));
  // After cohort::init's own exit handler, so this one runs first: the stall inspector and our copy of
  // the world go before the world is torn down.
  static std::once_flag at_exit;
  std::call_once(at_exit, [] { std::atexit([] { Context::destroy(); }); });
}

void Context::destroy() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_context.reset();
}

bool Context::exists() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_context != nullptr;
}

Context::Context(World world) : world_(std::move(world)), settings_(read_settings()) {
  warn_unsupported_variables();
  std::tie(cross_rank_, cross_size_) = cross_rank_and_size(world_);
  auto& impl = world_.comm().impl();
  if (world_.size() > 1 && settings_.stall_check_seconds > 0 && impl.store() != nullptr) {
    stall_ = std::make_unique<StallInspector>(
        impl.store_ptr(), StallConfig{world_.rank(), world_.size(), settings_.stall_check_seconds, impl.timeout()});
  }
}

Context::~Context() = default;

Handle Context::submit(const char* caller, const std::string& kind, const std::string& name,
                       const std::function<Started(const std::string&)>& start) {
  Handle handle;
  std::string label;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    handle = next_handle_;
    label = name.empty() ? kind + ".noname." + std::to_string(handle) : name;
    const auto clash = names_.find(label);
    COHORT_CHECK(clash == names_.end(), caller, "('", label, "'): a tensor named '", label,
                 "' is still in flight (handle ", clash->second,
                 ", not yet synchronized); a name may be used by one operation at a time: synchronize the "
                 "first one or use another name");
    ++next_handle_;  // only for an operation that starts: handles stay equal on ranks issuing alike
    names_[label] = handle;
  }
  if (stall_) stall_->submitted(handle, label);
  try {
    cohort::detail::OpLabelScope scope(label);
    Started started = start(label);
    std::lock_guard<std::mutex> lock(mutex_);
    in_flight_[handle] = {label, std::move(started)};
  } catch (...) {
    release(handle, label);
    throw;
  }
  return handle;
}

Context::InFlight Context::take(Handle handle, const char* caller) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = in_flight_.find(handle);
  COHORT_CHECK(it != in_flight_.end(), caller, "(", handle, "): not an operation in flight (synchronized already, ",
               "or not a handle an *_async call returned)");
  InFlight op = std::move(it->second);
  in_flight_.erase(it);
  return op;
}

void Context::release(Handle handle, const std::string& name) {
  if (stall_) stall_->finished(handle);
  std::lock_guard<std::mutex> lock(mutex_);
  names_.erase(name);
}

bool Context::poll(Handle handle, const char* caller) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = in_flight_.find(handle);
  COHORT_CHECK(it != in_flight_.end(), caller, "(", handle, "): not an operation in flight (synchronized already, ",
               "or not a handle an *_async call returned)");
  return it->second.started.work.is_completed();
}

std::vector<torch::Tensor> Context::synchronize(Handle handle, const char* caller) {
  InFlight op = take(handle, caller);
  struct Release {
    Context* self;
    Handle handle;
    const std::string& name;
    ~Release() { self->release(handle, name); }
  } release_name{this, handle, op.name};
  op.started.work.wait();
  return op.started.finish ? op.started.finish() : std::vector<torch::Tensor>{};
}

}  // namespace detail

void init(const InitOptions& options) { detail::Context::create(options); }
bool is_initialized() { return detail::Context::exists(); }

void shutdown() {
  detail::Context::destroy();
  cohort::shutdown();
}

int size() { return detail::Context::get("hvd::size").world().size(); }
int rank() { return detail::Context::get("hvd::rank").world().rank(); }
int local_size() { return detail::Context::get("hvd::local_size").world().local_size(); }
int local_rank() { return detail::Context::get("hvd::local_rank").world().local_rank(); }
int cross_size() { return detail::Context::get("hvd::cross_size").cross_size(); }
int cross_rank() { return detail::Context::get("hvd::cross_rank").cross_rank(); }

}  // namespace cohort::hvd
