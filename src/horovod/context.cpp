// cohort::hvd's state and operation table (see context.h), and hvd::init / shutdown / the ranks.
#include "horovod/context.h"

#include <algorithm>
#include <cstdlib>

#include "comm/comm_access.h"
#include "comm/op_label.h"
#include "core/check.h"
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

// "0, 1, 2"
std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

}  // namespace

Context& Context::get(const char* caller) {
  std::lock_guard<std::mutex> lock(g_mutex);
  COHORT_CHECK_KIND(kInvalidArgument, g_context != nullptr, caller,
                    ": cohort::hvd is not initialized; call cohort::hvd::init() first");
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
  std::vector<int> everyone(world_.size());
  for (int r = 0; r < world_.size(); ++r) everyone[r] = r;
  // hvd's own copy of the world's Comm: its controller thread is its only caller.
  add_set_state(0, everyone, world_.size() > 1 ? world_.comm().split(0, 0, GroupOptions().name("hvd")) : nullptr);
  auto& impl = cohort::detail::comm_impl(world_.comm());
  if (world_.size() > 1 && settings_.stall_check_seconds > 0 && impl.store() != nullptr) {
    stall_ = std::make_unique<StallInspector>(
        impl.store_ptr(), StallConfig{world_.rank(), world_.size(), settings_.stall_check_seconds, impl.timeout()});
  }
}

Context::~Context() = default;

void Context::add_set_state(int id, std::vector<int> ranks, std::shared_ptr<Comm> comm) {
  ProcessSetState state;
  state.ranks = std::move(ranks);
  state.owned = std::move(comm);
  const bool member = std::count(state.ranks.begin(), state.ranks.end(), world_.rank()) > 0;
  state.comm = state.owned ? state.owned.get() : member ? &world_.comm() : nullptr;
  if (state.owned && state.owned->size() > 1 && !settings_.ordered)
    state.controller = std::make_unique<Controller>(
        state.owned, ControllerConfig{settings_.cycle_time_ms, size_t(settings_.cache_capacity)});
  std::lock_guard<std::mutex> lock(mutex_);
  sets_[id] = std::move(state);
}

int Context::add_process_set(const std::vector<int>& ranks) {
  const char* caller = "hvd::add_process_set";
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  COHORT_CHECK_KIND(kInvalidArgument, !sorted.empty(), caller, ": the set has no ranks");
  COHORT_CHECK_KIND(kInvalidArgument, std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), caller,
                    ": rank ", *std::adjacent_find(sorted.begin(), sorted.end()), " is listed twice");
  COHORT_CHECK_KIND(kInvalidArgument, sorted.front() >= 0 && sorted.back() < world_.size(), caller, ": rank ",
                    sorted.front() < 0 ? sorted.front() : sorted.back(), " is not a rank of this world of ",
                    world_.size());
  int id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    id = int(sets_.size());
  }
  std::shared_ptr<Comm> comm;
  if (world_.size() > 1) comm = world_.comm().new_group(sorted, GroupOptions().name("hvd.set" + std::to_string(id)));
  add_set_state(id, sorted, comm);
  return id;
}

Context::ProcessSetState& Context::set_state(int id, const char* caller) {
  const auto it = sets_.find(id);
  COHORT_CHECK_KIND(kInvalidArgument, it != sets_.end(), caller, ": process set ", id,
                    " does not exist (hvd::add_process_set makes them)");
  return it->second;
}

std::vector<int> Context::process_set_ranks(int id, const char* caller) {
  std::lock_guard<std::mutex> lock(mutex_);
  return set_state(id, caller).ranks;
}

int Context::place_in_set(int id, int rank, const char* caller) {
  const auto ranks = process_set_ranks(id, caller);
  const auto it = std::find(ranks.begin(), ranks.end(), rank);
  return it == ranks.end() ? -1 : int(it - ranks.begin());
}

Handle Context::submit(const Request& request, std::function<Started(Comm&)> start) {
  auto op = std::make_shared<Op>();
  Comm* comm;
  Controller* controller;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& set = set_state(request.process_set, request.caller);
    op->handle = next_handle_;
    op->process_set = request.process_set;
    op->named = !request.name.empty();
    op->kind = request.kind;
    op->caller = request.caller;
    op->shadow = request.shadow;
    op->name = op->named ? request.name : request.kind + ".noname." + std::to_string(set.next_unnamed);
    COHORT_CHECK_KIND(kInvalidArgument, set.comm != nullptr, request.caller, "('", op->name, "'): this rank (",
                      world_.rank(), ") is not in process set ", request.process_set, " (ranks ", rank_list(set.ranks),
                      "); only its ranks may call its operations");
    const auto clash = names_.find({op->process_set, op->name});
    COHORT_CHECK_KIND(kInvalidArgument, clash == names_.end(), request.caller, "('", op->name, "'): a tensor named '",
                      op->name, "' is still in flight (handle ", clash->second,
                      ", not yet synchronized); a name may be used by one operation at a time: synchronize the "
                      "first one or use another name");
    ++next_handle_;  // only for an operation that starts: handles stay equal on ranks issuing alike
    if (!op->named) ++set.next_unnamed;
    names_[{op->process_set, op->name}] = op->handle;
    in_flight_[op->handle] = op;
    comm = set.comm;
    controller = set.controller.get();
  }
  op->start = std::move(start);
  if (stall_ && op->process_set == 0) stall_->submitted(op->handle, op->name);
  if (controller) {
    controller->enqueue(op);
    return op->handle;
  }
  try {
    cohort::detail::OpLabelScope scope(op->name);
    op->started = op->start(*comm);
    op->launched = true;
  } catch (...) {
    take(op->handle, request.caller);
    release(*op);
    throw;
  }
  return op->handle;
}

int Context::join() {
  const char* caller = "hvd::join";
  if (world_.size() == 1) return 0;
  Controller* controller;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    controller = set_state(0, caller).controller.get();
  }
  COHORT_CHECK_KIND(kInvalidArgument, controller != nullptr, caller,
                    ": COHORT_HVD_ORDERED=1 starts each operation as it is submitted, "
                    "so a joined rank cannot take part in the others' operations; unset it to use hvd::join()");
  const auto result = controller->join(world_.device());
  std::lock_guard<std::mutex> lock(mutex_);
  sets_.at(0).next_unnamed += result.shadowed_unnamed;  // the unnamed operations' names stay equal on every rank
  return result.last_rank;
}

std::shared_ptr<Op> Context::take(Handle handle, const char* caller) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = in_flight_.find(handle);
  COHORT_CHECK_KIND(kInvalidArgument, it != in_flight_.end(), caller, "(", handle,
                    "): not an operation in flight (synchronized already, ",
                    "or not a handle an *_async call returned)");
  auto op = std::move(it->second);
  in_flight_.erase(it);
  return op;
}

void Context::release(const Op& op) {
  if (stall_ && op.process_set == 0) stall_->finished(op.handle);
  std::lock_guard<std::mutex> lock(mutex_);
  names_.erase({op.process_set, op.name});
}

bool Context::poll(Handle handle, const char* caller) {
  std::shared_ptr<Op> op;
  Controller* controller;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = in_flight_.find(handle);
    COHORT_CHECK_KIND(kInvalidArgument, it != in_flight_.end(), caller, "(", handle,
                      "): not an operation in flight (synchronized already, ",
                      "or not a handle an *_async call returned)");
    op = it->second;
    controller = sets_.at(op->process_set).controller.get();
  }
  if (controller && !controller->launched(*op)) return false;
  return op->error != nullptr || op->started.work.is_completed();
}

std::vector<torch::Tensor> Context::synchronize(Handle handle, const char* caller) {
  auto op = take(handle, caller);
  struct Release {
    Context* self;
    const Op& op;
    ~Release() { self->release(op); }
  } release_name{this, *op};
  Controller* controller;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    controller = sets_.at(op->process_set).controller.get();
  }
  if (controller) controller->wait_launched(*op);
  if (op->error) std::rethrow_exception(op->error);
  op->started.work.wait();
  return op->started.finish ? op->started.finish() : std::vector<torch::Tensor>{};
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
