// redistribute_local / redistribute_autograd (see redistribute.h). Uneven shards (torch.chunk's: the
// last ranks may hold fewer rows, or none) are padded to the chunk size for the collective and cut
// back after it.
#include "tp/redistribute.h"

#include <torch/autograd.h>

#include "core/check.h"

namespace cohort::detail {
namespace {

int64_t chunk_rows(int64_t size, int ranks) { return (size + ranks - 1) / ranks; }

// `rows_first` (the sharded dimension moved to 0) padded with zeros to `rows` rows.
torch::Tensor padded(const torch::Tensor& rows_first, int64_t rows) {
  if (rows_first.size(0) == rows) return rows_first.contiguous();
  auto shape = rows_first.sizes().vec();
  shape[0] = rows - rows_first.size(0);
  return torch::cat({rows_first, torch::zeros(shape, rows_first.options())}).contiguous();
}

torch::Tensor all_gather_dim(const torch::Tensor& local, Comm& comm, int64_t size, int64_t dim) {
  const int64_t chunk = chunk_rows(size, comm.size());
  const torch::Tensor gathered = comm.allgather(padded(local.movedim(dim, 0), chunk));  // [ranks, chunk, ...]
  return gathered.flatten(0, 1).narrow(0, 0, size).movedim(0, dim).contiguous();
}

torch::Tensor reduce_scatter_dim(const torch::Tensor& local, Comm& comm, int64_t size, int64_t dim) {
  const int64_t chunk = chunk_rows(size, comm.size());
  const auto [first, count] = shard_range(size, comm.size(), comm.rank());
  (void)first;
  const torch::Tensor mine = comm.reduce_scatter(padded(local.movedim(dim, 0), chunk * comm.size()));
  return mine.narrow(0, 0, count).movedim(0, dim).contiguous();
}

torch::Tensor cut(const torch::Tensor& full, Comm& comm, int64_t dim) {
  const auto [first, count] = shard_range(full.size(dim), comm.size(), comm.rank());
  return full.narrow(dim, first, count).clone(at::MemoryFormat::Contiguous);
}

// Shard(from) -> Shard(to): one all-to-all when both dimensions split evenly, else gather and cut.
torch::Tensor all_to_all_dims(const torch::Tensor& local, Comm& comm, const std::vector<int64_t>& shape, int64_t from,
                              int64_t to) {
  const int n = comm.size();
  if (shape[from] % n != 0 || shape[to] % n != 0) return cut(all_gather_dim(local, comm, shape[from], from), comm, to);
  const torch::Tensor blocks = torch::stack(local.chunk(n, to)).contiguous();  // block j goes to rank j
  torch::Tensor received = torch::empty_like(blocks);
  comm.alltoall_single(received, blocks);  // block i came from rank i: its rows of `from`
  return torch::cat(received.unbind(0), from).contiguous();
}

struct Args : torch::CustomClassHolder {
  Args(std::shared_ptr<Comm> c, std::vector<int64_t> s, Placement f, Placement t, Placement g)
      : comm(std::move(c)), shape(std::move(s)), from(f), to(t), grad(g) {}
  std::shared_ptr<Comm> comm;
  std::vector<int64_t> shape;
  Placement from, to, grad;
};

struct Redistribute : torch::autograd::Function<Redistribute> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& local,
                               c10::intrusive_ptr<Args> args) {
    torch::Tensor out = redistribute_local(local, *args->comm, args->shape, args->from, args->to);
    ctx->saved_data["args"] = c10::IValue::make_capsule(std::move(args));
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto args = c10::static_intrusive_pointer_cast<Args>(ctx->saved_data["args"].toCapsule());
    const Placement back = args->from.is_partial() ? Placement::replicate() : args->from;
    return {redistribute_local(grads[0], *args->comm, args->shape, args->grad, back), torch::Tensor()};
  }
};

}  // namespace

std::vector<int64_t> local_shape(std::vector<int64_t> shape, const Placement& placement, int ranks, int rank) {
  if (placement.is_shard()) shape[placement.dim()] = shard_range(shape[placement.dim()], ranks, rank).second;
  return shape;
}

torch::Tensor redistribute_local(const torch::Tensor& local, Comm& comm, const std::vector<int64_t>& shape,
                                 const Placement& from, const Placement& to) {
  if (from == to) return local;
  COHORT_CHECK_KIND(kInvalidArgument, !to.is_partial(), "DTensor::redistribute: ", from.str(), " -> ", to.str(),
                    " is not a redistribution: Partial summands come from a computation (a row-parallel matmul)");
  if (from.is_partial())
    return to.is_replicate() ? comm.allreduce(local.clone(at::MemoryFormat::Contiguous))
                             : reduce_scatter_dim(local, comm, shape[to.dim()], to.dim());
  if (from.is_replicate()) return cut(local, comm, to.dim());
  if (to.is_replicate()) return all_gather_dim(local, comm, shape[from.dim()], from.dim());
  return all_to_all_dims(local, comm, shape, from.dim(), to.dim());
}

torch::Tensor redistribute_autograd(const torch::Tensor& local, const std::shared_ptr<Comm>& comm,
                                    const std::vector<int64_t>& shape, const Placement& from, const Placement& to,
                                    const Placement& grad_placement) {
  return Redistribute::apply(local, c10::make_intrusive<Args>(comm, shape, from, to, grad_placement));
}

}  // namespace cohort::detail
