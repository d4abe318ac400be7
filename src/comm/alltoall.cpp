// All-to-all (even and uneven splits, torch.distributed.all_to_all_single) and the variable-size
// allgather (Horovod's allgather: first dimensions differ per rank). Both run on Gloo's alltoall_base /
// Comm::allgather. The shared-memory transport is not used for alltoall: its slots hold one equal
// chunk per rank, and uneven blocks would need a second layout and its own chunking; allgather_v pads
// to the longest rank and so takes the shared-memory path of allgather when that is available.
#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>
#include <sstream>

#include "cohort/comm.h"
#include "comm/op_util.h"
#include "comm/ragged.h"
#include "core/check.h"

namespace cohort {

using detail::OpKind;

torch::Tensor Comm::allgather_v(const torch::Tensor& tensor) {
  if (size() == 1) {
    COHORT_CHECK_KIND(kInvalidArgument, tensor.defined() && tensor.dim() >= 1,
                      "allgather_v: the tensor needs at least one dimension, got ",
                      tensor.defined() ? tensor.dim() : 0);
    return tensor.clone();
  }
  return torch::cat(detail::allgather_ragged(*this, tensor));
}

namespace detail {

std::vector<torch::Tensor> allgather_ragged(Comm& comm, const torch::Tensor& tensor) {
  RaggedGather gather = allgather_ragged_async(comm, tensor);
  gather.work.wait();
  return gather.parts();
}

RaggedGather allgather_ragged_async(Comm& comm, const torch::Tensor& tensor) {
  COHORT_CHECK_KIND(kInvalidArgument, tensor.defined() && tensor.dim() >= 1,
                    "allgather_v: the tensor needs at least one dimension, got ", tensor.defined() ? tensor.dim() : 0);
  if (comm.size() == 1) return {Work(), [tensor] { return std::vector<torch::Tensor>{tensor}; }};
  torch::Tensor rows = comm.allgather(torch::tensor({tensor.size(0)}, torch::kLong)).view(-1);
  // At least one row, so the agreed allgather never moves an empty tensor.
  const int64_t longest = std::max<int64_t>(rows.max().item<int64_t>(), 1);
  std::vector<int64_t> shape = tensor.sizes().vec();
  shape[0] = longest - tensor.size(0);
  // Pad to the longest rank so one agreed allgather (trailing dims and dtype checked) moves it all.
  torch::Tensor padded = shape[0] == 0 ? tensor : torch::cat({tensor, torch::zeros(shape, tensor.options())});
  shape[0] = longest;
  shape.insert(shape.begin(), comm.size());
  torch::Tensor gathered = torch::empty(shape, tensor.options());
  Work work = comm.allgather_async(gathered, padded);
  return {work, [gathered, rows] {
            std::vector<torch::Tensor> parts;
            for (int64_t r = 0; r < gathered.size(0); ++r)
              parts.push_back(gathered[r].narrow(0, 0, rows[r].item<int64_t>()));
            return parts;
          }};
}

}  // namespace detail

namespace {

int64_t sum_of(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t(0)); }

// Shapes, dtypes and split lists a rank can check alone.
void check_alltoall(const torch::Tensor& output, const torch::Tensor& input, const AlltoallSplits& splits, int n) {
  COHORT_CHECK_KIND(kInvalidArgument, input.defined() && output.defined() && input.dim() >= 1 && output.dim() >= 1,
                    "alltoall: input and output need at least one dimension");
  COHORT_CHECK_KIND(kInvalidArgument, input.scalar_type() == output.scalar_type() && input.device() == output.device(),
                    "alltoall: output is ", detail::dtype_name(output.scalar_type()), " on ", output.device(),
                    " but input is ", detail::dtype_name(input.scalar_type()), " on ", input.device());
  COHORT_CHECK_KIND(kInvalidArgument, input.sizes().slice(1) == output.sizes().slice(1), "alltoall: rows of the input ",
                    input.sizes(), " and of the output ", output.sizes(), " differ (all but dim 0 must match)");
  const bool even = splits.input().empty() && splits.output().empty();
  if (even) {
    COHORT_CHECK_KIND(kInvalidArgument, input.size(0) % n == 0 && output.size(0) == input.size(0),
                      "alltoall: even splits need dim 0 of ", "the input (", input.size(0), ") divisible by the size ",
                      n, " and equal to the output's (", output.size(0), "); pass AlltoallSplits for uneven blocks");
    return;
  }
  COHORT_CHECK_KIND(kInvalidArgument, int(splits.input().size()) == n && int(splits.output().size()) == n,
                    "alltoall: AlltoallSplits needs ", n, " input and ", n, " output sizes, got ",
                    splits.input().size(), " and ", splits.output().size());
  COHORT_CHECK_KIND(kInvalidArgument,
                    sum_of(splits.input()) == input.size(0) && sum_of(splits.output()) == output.size(0),
                    "alltoall: the input splits sum to ", sum_of(splits.input()), " rows (input has ", input.size(0),
                    "), the output splits to ", sum_of(splits.output()), " (output has ", output.size(0), ")");
  for (int j = 0; j < n; ++j)
    COHORT_CHECK_KIND(kInvalidArgument, splits.input()[j] >= 0 && splits.output()[j] >= 0, "alltoall: split size ", j,
                      " is negative");
}

}  // namespace

Work Comm::alltoall_single_async(torch::Tensor output, torch::Tensor input, const AlltoallSplits& splits) {
  const int n = size();
  check_alltoall(output, input, splits, n);
  const bool even = splits.input().empty();
  auto pending = detail::make_op(OpKind::kAlltoall, input);
  if (!even) pending->fingerprint.shape[0] = -1;  // rows per rank may differ; the row shape may not
  if (n == 1) {
    output.copy_(input);
    return Work();
  }
  torch::Tensor in = input.contiguous();
  torch::Tensor out = output.is_contiguous() ? output : torch::empty_like(output, at::MemoryFormat::Contiguous);
  auto* impl = impl_.get();
  // Even splits have one shape on every rank, so all skip an empty transfer alike; uneven ones always
  // launch, since a rank with nothing to send may still receive.
  if (!even || in.numel() > 0) {
    pending->data.buffer = in;
    pending->data.output = out;
    pending->data.input_splits = splits.input();
    pending->data.output_splits = splits.output();
    pending->transport = impl->transport_for(pending->data);
  }
  pending->finish = [output, out]() mutable {
    if (!out.is_same(output)) output.copy_(out);
  };
  return Work(impl_->submit(pending, true));
}

void Comm::alltoall_single(torch::Tensor output, const torch::Tensor& input, const AlltoallSplits& splits) {
  const int n = size();
  check_alltoall(output, input, splits, n);
  if (!splits.input().empty() && n > 1) {
    // What each peer sends here must be what this rank expects: exchange the counts and agree on the
    // verdict, so every rank fails together (and none waits alone in the data transfer).
    torch::Tensor sent_here = alltoall(torch::tensor(splits.input(), torch::kLong));
    std::ostringstream wrong;
    for (int j = 0; j < n; ++j) {
      const int64_t got = sent_here[j].item<int64_t>();
      if (got != splits.output()[j])
        wrong << " " << impl_->rank_label(j) << " sends " << got << " rows here but output split " << j << " is "
              << splits.output()[j] << ";";
    }
    torch::Tensor bad = allreduce(torch::tensor({int64_t(!wrong.str().empty())}, torch::kLong), ReduceOp::kMax);
    COHORT_CHECK_KIND(kDesync, bad.item<int64_t>() == 0, "alltoall: split sizes disagree between ranks:",
                      wrong.str().empty() ? " not here, on another rank (its error names them);" : wrong.str(),
                      " input split j of rank i must equal output split i of rank j");
  }
  alltoall_single_async(output, input, splits).wait();
}

torch::Tensor Comm::alltoall(const torch::Tensor& input, const std::vector<int64_t>& input_splits) {
  const int n = size();
  COHORT_CHECK_KIND(kInvalidArgument, input.defined() && input.dim() >= 1,
                    "alltoall: the input needs at least one dimension");
  if (input_splits.empty()) {
    torch::Tensor output = torch::empty_like(input, at::MemoryFormat::Contiguous);
    alltoall_single(output, input);
    return output;
  }
  COHORT_CHECK_KIND(kInvalidArgument, int(input_splits.size()) == n && sum_of(input_splits) == input.size(0),
                    "alltoall: ", input_splits.size(), " input splits summing to ", sum_of(input_splits),
                    " rows, expected ", n, " summing to dim 0 of the input (", input.size(0), ")");
  // Each rank learns how many rows every peer sends it: an even alltoall of the counts.
  std::vector<int64_t> output_splits(n);
  if (n > 1) {
    torch::Tensor counts = alltoall(torch::tensor(input_splits, torch::kLong));
    for (int j = 0; j < n; ++j) output_splits[j] = counts[j].item<int64_t>();
  } else {
    output_splits = input_splits;
  }
  std::vector<int64_t> shape = input.sizes().vec();
  shape[0] = sum_of(output_splits);
  torch::Tensor output = torch::empty(shape, input.options());
  alltoall_single_async(output, input, AlltoallSplits().input(input_splits).output(output_splits)).wait();
  return output;
}

}  // namespace cohort
