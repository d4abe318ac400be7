// ReplicaWorkers (see replica_workers.h).
#include "trainer/replica_workers.h"

#include <ATen/Parallel.h>

namespace cohort::detail {

ReplicaWorkers::ReplicaWorkers(int count, int intra_op_threads) : errors_(static_cast<size_t>(count)) {
  threads_.reserve(static_cast<size_t>(count));
  for (int index = 0; index < count; ++index) threads_.emplace_back([this, index] { loop(index); });
  if (intra_op_threads <= 0) return;
  // at::set_num_threads sets the calling thread's OpenMP count and a process-wide default; each worker
  // sets its own, then this thread puts the process-wide default back as it was.
  const int previous = at::get_num_threads();
  // A thread's first parallel op sets it to the process-wide default (lazy initialisation, once per
  // thread): make that happen first. Its flag is LibTorch's (1.13 exports it; 2.x keeps its own copy,
  // which at::get_num_threads sets), so both are called.
  run(count, [intra_op_threads](int) {
    at::internal::lazy_init_num_threads();
    (void)at::get_num_threads();
    at::set_num_threads(intra_op_threads);
  });
  at::set_num_threads(previous);
}

ReplicaWorkers::~ReplicaWorkers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  start_.notify_all();
  for (auto& thread : threads_) thread.join();
}

void ReplicaWorkers::run(int used, const std::function<void(int)>& task) {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    task_ = &task;
    used_ = used;
    running_ = used;
    for (auto& error : errors_) error = nullptr;
    ++generation_;
    start_.notify_all();
    done_.wait(lock, [&] { return running_ == 0; });
    task_ = nullptr;
  }
  for (int index = 0; index < used; ++index)
    if (errors_[static_cast<size_t>(index)]) std::rethrow_exception(errors_[static_cast<size_t>(index)]);
}

void ReplicaWorkers::loop(int index) {
  int64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    start_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (index >= used_) continue;
    const std::function<void(int)>* task = task_;
    lock.unlock();
    std::exception_ptr error;
    try {
      (*task)(index);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    errors_[static_cast<size_t>(index)] = error;
    if (--running_ == 0) done_.notify_one();
  }
}

}  // namespace cohort::detail
