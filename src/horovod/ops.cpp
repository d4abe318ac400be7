// cohort::hvd's collectives: each becomes one Context::submit whose start() issues cohort::Comm's
// asynchronous collective under the tensor's name and whose finish() applies what Horovod applies
// after the data moved (the postscale factor, unpacking).
#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "comm/fingerprint.h"
#include "comm/ragged.h"
#include "core/check.h"
#include "horovod/context.h"

namespace cohort::hvd {
namespace {

using detail::Context;
using detail::Started;

std::vector<torch::Tensor> one(const torch::Tensor& t) { return {t}; }

// Horovod's checks that need no other rank: a defined tensor, scale factors a float can take.
void check_allreduce(const torch::Tensor& t, const AllreduceOptions& o, const char* caller, const std::string& name) {
  COHORT_CHECK_KIND(kInvalidArgument, t.defined(), caller, "('", name, "'): the tensor is undefined");
  const bool floating = at::isFloatingType(t.scalar_type());
  COHORT_CHECK_KIND(kInvalidArgument, floating || o.op() != Average, caller, "('", name,
                    "'): Average of an integer tensor (", cohort::detail::dtype_name(t.scalar_type()),
                    ") is not defined; use op Sum and divide");
  COHORT_CHECK_KIND(kInvalidArgument, floating || (o.prescale_factor() == 1.0 && o.postscale_factor() == 1.0), caller,
                    "('", name, "'): prescale_factor and postscale_factor need a floating-point tensor, got ",
                    cohort::detail::dtype_name(t.scalar_type()));
}

// The root's place in the set: for the global set the rank itself (Comm checks its range).
int root_in_set(Context& context, int root_rank, const ProcessSet& set, const std::string& name) {
  if (set.id() == 0) return root_rank;
  const int place = context.place_in_set(set.id(), root_rank, "hvd::broadcast");
  COHORT_CHECK_KIND(kInvalidArgument, place >= 0, "hvd::broadcast('", name, "'): root_rank ", root_rank,
                    " is not in process set ", set.id());
  return place;
}

Handle start_allreduce(torch::Tensor target, const AllreduceOptions& options, const char* caller) {
  auto& context = Context::get(caller);
  check_allreduce(target, options, caller, options.name());
  const detail::Request request{caller, "allreduce", options.name(), options.process_set().id(),
                                detail::allreduce_shadow({target}, options.op(), false)};
  return context.submit(request, [target, options](Comm& comm) mutable {
    torch::NoGradGuard no_grad;
    if (options.prescale_factor() != 1.0) target.mul_(options.prescale_factor());
    Work work = comm.allreduce_async(target, options.op());
    return Started{work, [target, post = options.postscale_factor()]() mutable {
                     if (post != 1.0) target.mul_(post);
                     return one(target);
                   }};
  });
}

}  // namespace

Handle allreduce_async_(torch::Tensor tensor, const AllreduceOptions& options) {
  return start_allreduce(tensor.defined() ? tensor.detach() : tensor, options, "hvd::allreduce_async_");
}

Handle allreduce_async(const torch::Tensor& tensor, const AllreduceOptions& options) {
  return start_allreduce(tensor.defined() ? tensor.detach().clone() : tensor, options, "hvd::allreduce_async");
}

Handle allreduce_async(const torch::Tensor& tensor, const std::string& name, ReduceOp op) {
  return allreduce_async(tensor, AllreduceOptions().name(name).op(op));
}

torch::Tensor allreduce_(torch::Tensor tensor, const AllreduceOptions& options) {
  synchronize(start_allreduce(tensor.defined() ? tensor.detach() : tensor, options, "hvd::allreduce_"));
  return tensor;
}

torch::Tensor allreduce(const torch::Tensor& tensor, const AllreduceOptions& options) {
  return synchronize(start_allreduce(tensor.defined() ? tensor.detach().clone() : tensor, options, "hvd::allreduce"));
}

torch::Tensor allreduce(const torch::Tensor& tensor, const std::string& name, ReduceOp op) {
  return allreduce(tensor, AllreduceOptions().name(name).op(op));
}

Handle grouped_allreduce_async(const std::vector<torch::Tensor>& tensors, const AllreduceOptions& options) {
  const char* caller = "hvd::grouped_allreduce";
  auto& context = Context::get(caller);
  for (const auto& t : tensors) check_allreduce(t, options, caller, options.name());
  std::vector<torch::Tensor> targets;  // copied now: the caller may change its tensors once this returns
  for (const auto& t : tensors) targets.push_back(t.detach().clone());
  const detail::Request request{caller, "grouped_allreduce", options.name(), options.process_set().id(),
                                detail::allreduce_shadow(targets, options.op(), true)};
  return context.submit(request, [targets, options](Comm& comm) {
    torch::NoGradGuard no_grad;
    if (options.prescale_factor() != 1.0)
      for (auto& t : targets) t.mul_(options.prescale_factor());
    Work work = comm.allreduce_fused_async(targets, options.op());
    return Started{work, [targets, post = options.postscale_factor()]() mutable {
                     if (post != 1.0)
                       for (auto& t : targets) t.mul_(post);
                     return targets;
                   }};
  });
}

std::vector<torch::Tensor> grouped_allreduce(const std::vector<torch::Tensor>& tensors,
                                             const AllreduceOptions& options) {
  return synchronize_group(grouped_allreduce_async(tensors, options));
}

Handle allgather_async(const torch::Tensor& tensor, const std::string& name, const ProcessSet& process_set) {
  const char* caller = "hvd::allgather";
  auto& context = Context::get(caller);
  const detail::Request request{caller, "allgather", name, process_set.id(), std::nullopt};
  return context.submit(request, [tensor = tensor.detach()](Comm& comm) {
    auto gather = cohort::detail::allgather_ragged_async(comm, tensor);
    return Started{gather.work, [parts = gather.parts] { return one(torch::cat(parts())); }};
  });
}

torch::Tensor allgather(const torch::Tensor& tensor, const std::string& name, const ProcessSet& process_set) {
  return synchronize(allgather_async(tensor, name, process_set));
}

Handle broadcast_async_(torch::Tensor tensor, int root_rank, const std::string& name, const ProcessSet& process_set) {
  const char* caller = "hvd::broadcast";
  auto& context = Context::get(caller);
  const int root = root_in_set(context, root_rank, process_set, name);
  const detail::Request request{caller, "broadcast", name, process_set.id(), std::nullopt};
  return context.submit(request, [target = tensor.detach(), root](Comm& comm) {
    return Started{comm.broadcast_async(target, root), [target] { return one(target); }};
  });
}

Handle broadcast_async(const torch::Tensor& tensor, int root_rank, const std::string& name,
                       const ProcessSet& process_set) {
  return broadcast_async_(tensor.detach().clone(), root_rank, name, process_set);
}

torch::Tensor broadcast_(torch::Tensor tensor, int root_rank, const std::string& name, const ProcessSet& process_set) {
  synchronize(broadcast_async_(tensor, root_rank, name, process_set));
  return tensor;
}

torch::Tensor broadcast(const torch::Tensor& tensor, int root_rank, const std::string& name,
                        const ProcessSet& process_set) {
  return synchronize(broadcast_async(tensor, root_rank, name, process_set));
}

torch::Tensor alltoall(const torch::Tensor& tensor, const std::vector<int64_t>& splits, const std::string& name,
                       const ProcessSet& process_set) {
  const char* caller = "hvd::alltoall";
  auto& context = Context::get(caller);
  // Comm::alltoall exchanges the receive counts first, so the data has moved when it returns.
  auto exchange = [tensor = tensor.detach(), splits](Comm& comm) {
    torch::Tensor received = comm.alltoall(tensor, splits);
    return Started{Work(), [received] { return one(received); }};
  };
  return synchronize(context.submit({caller, "alltoall", name, process_set.id(), std::nullopt}, exchange));
}

bool poll(Handle handle) { return Context::get("hvd::poll").poll(handle, "hvd::poll"); }

torch::Tensor synchronize(Handle handle) {
  auto results = Context::get("hvd::synchronize").synchronize(handle, "hvd::synchronize");
  COHORT_CHECK_KIND(kInvalidArgument, results.size() == 1, "hvd::synchronize(", handle, "): a grouped operation of ",
                    results.size(), " tensors; use hvd::synchronize_group");
  return results[0];
}

std::vector<torch::Tensor> synchronize_group(Handle handle) {
  return Context::get("hvd::synchronize_group").synchronize(handle, "hvd::synchronize_group");
}

int join() { return Context::get("hvd::join").join(); }

// The world's Comm, not hvd's: a barrier needs no place among the negotiated operations.
void barrier() { Context::get("hvd::barrier").world().comm().barrier(); }

}  // namespace cohort::hvd
