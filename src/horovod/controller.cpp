// The negotiation thread of one process set (see controller.h, note "negotiation").
#include "horovod/controller.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>

#include "comm/op_label.h"
#include "comm/ragged.h"
#include "core/log.h"

namespace cohort::hvd::detail {

Controller::Controller(std::shared_ptr<Comm> comm, ControllerConfig config)
    : comm_(std::move(comm)), config_(config), cache_(config.cache_capacity), thread_([this] { run(); }) {}

Controller::~Controller() {
  bool busy;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    busy = in_round_;
  }
  wake_.notify_all();
  // A round waits for ranks that never submit what this one waits for; nobody will synchronize it.
  if (busy) comm_->abort("hvd::shutdown() while operations waited for other ranks to submit them");
  thread_.join();
}

void Controller::enqueue(const std::shared_ptr<Op>& op) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failure_) {
      op->launched = true;
      op->error = failure_;
    } else if (op->named) {
      named_.push_back(op);
    } else {
      unnamed_.push_back(op);
    }
  }
  wake_.notify_all();
  launched_.notify_all();
}

void Controller::wait_launched(const Op& op) {
  std::unique_lock<std::mutex> lock(mutex_);
  launched_.wait(lock, [&] { return op.launched; });
}

bool Controller::launched(const Op& op) {
  std::lock_guard<std::mutex> lock(mutex_);
  return op.launched;
}

void Controller::run() {
  const auto cycle = std::chrono::duration<double, std::milli>(config_.cycle_time_ms);
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stop_ || joining_ || !unnamed_.empty() || !named_.empty(); });
    if (stop_) return;
    in_round_ = true;
    lock.unlock();
    bool started = false;
    try {
      started = round();
    } catch (...) {
      fail_waiting(std::current_exception());
    }
    lock.lock();
    in_round_ = false;
    if (!started && !stop_) wake_.wait_for(lock, cycle);  // nothing agreed: the others are not there yet
  }
}

bool Controller::round() {
  std::vector<std::shared_ptr<Op>> unnamed, named;
  bool joining;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    unnamed.assign(unnamed_.begin(), unnamed_.end());
    named = named_;
    joining = joining_;
  }
  // Step (1): the counts, the joined flags and the bits, reduced by minimum. A joined rank has
  // "everything" waiting, so it limits no one (note "join").
  const int n = comm_->size();
  auto bits = torch::zeros({int64_t(cache_.size()) + 2 + n}, torch::kInt);
  int32_t* b = bits.data_ptr<int32_t>();
  b[0] = joining ? std::numeric_limits<int32_t>::max() : int32_t(unnamed.size());
  b[1] = 1;
  for (int r = 0; r < n; ++r) b[2 + r] = joining && r == comm_->rank() ? 0 : 1;
  int32_t* cached = b + 2 + n;
  std::vector<std::string> names;
  std::map<std::string, std::shared_ptr<Op>> by_name;
  for (const auto& op : named) {
    names.push_back(op->name);
    by_name[op->name] = op;
    const auto bit = cache_.bit(op->name);
    if (bit) cached[*bit] = 1;
    if (!bit) b[1] = 0;
  }
  if (joining) std::fill(cached, cached + cache_.size(), 1);
  cohort::detail::OpLabelScope label("hvd.negotiation");  // how the rounds show in errors and the timeline
  comm_->allreduce(bits, ReduceOp::kMin);
  const int32_t ready_unnamed = b[0];  // the fewest unnamed operations any rank has waiting
  std::vector<bool> joined(n);
  for (int r = 0; r < n; ++r) joined[r] = b[2 + r] == 0;
  if (std::count(joined.begin(), joined.end(), true) > 0) return join_round(joined, ready_unnamed, unnamed, named);
  std::vector<std::string> agreed;
  if (b[1] == 0) {  // step (2): someone has a name the cache does not know
    agreed = exchange_names(names);
    for (const auto& name : agreed) cache_.add(name);
  } else {
    for (size_t bit = 0; bit < cache_.size(); ++bit)
      if (cached[bit] == 1) agreed.push_back(cache_.name(bit));
  }
  std::vector<std::shared_ptr<Op>> start(unnamed.begin(), unnamed.begin() + ready_unnamed);
  for (const auto& name : agreed) start.push_back(by_name.at(name));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    unnamed_.erase(unnamed_.begin(), unnamed_.begin() + ready_unnamed);
    const auto starting = [&](const std::shared_ptr<Op>& op) { return std::count(start.begin(), start.end(), op) > 0; };
    named_.erase(std::remove_if(named_.begin(), named_.end(), starting), named_.end());
  }
  for (const auto& op : start) launch(op);
  return !start.empty();
}

std::vector<std::vector<std::string>> Controller::gather_lists(const std::vector<std::string>& mine) {
  const auto bytes = encode_names(mine);
  auto tensor = torch::empty({int64_t(bytes.size())}, torch::kUInt8);
  std::copy(bytes.begin(), bytes.end(), tensor.data_ptr<uint8_t>());
  std::vector<std::vector<std::string>> lists;
  for (const auto& part : cohort::detail::allgather_ragged(*comm_, tensor))
    lists.push_back(decode_names(part.data_ptr<uint8_t>(), size_t(part.numel())));
  return lists;
}

std::vector<std::string> Controller::exchange_names(const std::vector<std::string>& mine) {
  return agreed_names(gather_lists(mine));
}

void Controller::launch(const std::shared_ptr<Op>& op) {
  Started started;
  std::exception_ptr error;
  try {
    cohort::detail::OpLabelScope scope(op->name);
    started = op->start(*comm_);
  } catch (...) {
    error = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    op->started = std::move(started);
    op->error = error;
    op->start = nullptr;
    op->launched = true;
  }
  launched_.notify_all();
}

void Controller::fail_waiting(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failure_ = error;
    named_.insert(named_.end(), unnamed_.begin(), unnamed_.end());
    for (auto& op : named_) {
      op->launched = true;
      op->error = error;
      op->start = nullptr;
    }
    unnamed_.clear();
    named_.clear();
  }
  launched_.notify_all();
}

}  // namespace cohort::hvd::detail
