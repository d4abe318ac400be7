// Public face of DDP (DataParallelCore, no_sync, its Joinable side) and reduce_metrics; the work is in
// reducer.cpp and reducer_join.cpp.
#include "cohort/ddp.h"

#include "ddp/reducer.h"
#include "world/resolve_comm.h"

namespace cohort {

DataParallelCore::DataParallelCore(std::shared_ptr<torch::nn::Module> module, DDPOptions options)
    : reducer_(std::make_unique<detail::Reducer>(std::move(module), std::move(options))) {}
DataParallelCore::~DataParallelCore() = default;
DataParallelCore::DataParallelCore(DataParallelCore&&) noexcept = default;
DataParallelCore& DataParallelCore::operator=(DataParallelCore&&) noexcept = default;

DataParallelCore::NoSyncGuard::NoSyncGuard(detail::Reducer* reducer) : reducer_(reducer) { reducer_->enter_no_sync(); }
DataParallelCore::NoSyncGuard::~NoSyncGuard() {
  if (reducer_) reducer_->exit_no_sync();
}
DataParallelCore::NoSyncGuard DataParallelCore::no_sync() { return NoSyncGuard(reducer_.get()); }

void DataParallelCore::register_comm_hook(std::shared_ptr<CommHook> hook) {
  reducer_->register_comm_hook(std::move(hook));
}

std::vector<std::vector<std::string>> DataParallelCore::bucket_layout() const { return reducer_->bucket_layout(); }
double DataParallelCore::last_wait_seconds() const { return reducer_->last_wait_seconds(); }

void DataParallelCore::join_shadow_step(const JoinStep& step) { reducer_->shadow_step(step); }
void DataParallelCore::join_finish(int source) { reducer_->sync_from(source); }
Comm* DataParallelCore::join_comm() { return &reducer_->comm(); }
torch::Device DataParallelCore::join_device() const { return reducer_->device(); }
void DataParallelCore::attach_join(Join* join) {
  reducer_->attach_join(join,
                        join != nullptr && join->leads(*this) ? detail::JoinRole::kLeads : detail::JoinRole::kFollows);
}

std::vector<torch::Tensor> reduce_metrics(std::vector<torch::Tensor> values, Comm* comm) {
  // A borrowed Comm wrapped without ownership, so the one rule of resolve_comm applies here too.
  const auto c = detail::resolve_comm(std::shared_ptr<Comm>(comm, [](Comm*) {}), "reduce_metrics");
  for (auto& v : values) c->allreduce(v, ReduceOp::kSum);
  return values;
}

}  // namespace cohort
