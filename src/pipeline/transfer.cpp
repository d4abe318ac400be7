// Activation transfer between pipeline ranks: a header of kHeaderLength int64 (dtype, rank of the
// tensor, sizes) and the data on the same channel, so they pair up in order (transfer.h).
#include "pipeline/transfer.h"

#include <sstream>

#include "cohort/error.h"
#include "core/check.h"

namespace cohort::pipeline::detail {
namespace {

constexpr int kMaxDims = 8;
constexpr int64_t kHeaderLength = 2 + kMaxDims;
// Above any tag a user is likely to pick on the same Comm.
constexpr int kChannelBase = 1 << 24;

}  // namespace

int channel(int stage, int microbatch, int microbatches, Direction direction) {
  return kChannelBase + (stage * 2 + int(direction)) * microbatches + microbatch;
}

std::string describe_tensor(const torch::Tensor& tensor) {
  if (!tensor.defined()) return "undefined";
  std::ostringstream out;
  out << c10::toString(tensor.scalar_type()) << " [";
  for (int64_t d = 0; d < tensor.dim(); ++d) out << (d ? ", " : "") << tensor.size(d);
  out << "]";
  return out.str();
}

torch::Tensor encode_header(const torch::Tensor& tensor) {
  COHORT_CHECK_KIND(kInvalidArgument, tensor.dim() <= kMaxDims, "pipeline: a stage output of ", tensor.dim(),
                    " dimensions (", describe_tensor(tensor), ") is more than the ", kMaxDims, " a transfer carries");
  auto header = torch::zeros({kHeaderLength}, torch::kLong);
  auto* h = header.data_ptr<int64_t>();
  h[0] = int64_t(tensor.scalar_type());
  h[1] = tensor.dim();
  for (int64_t d = 0; d < tensor.dim(); ++d) h[2 + d] = tensor.size(d);
  return header;
}

torch::Tensor empty_from_header(const torch::Tensor& header, const torch::Device& device) {
  const auto* h = header.data_ptr<int64_t>();
  std::vector<int64_t> sizes(h + 2, h + 2 + h[1]);
  return torch::empty(sizes, torch::TensorOptions().dtype(c10::ScalarType(h[0])).device(device));
}

void send_activation(Comm& comm, const torch::Tensor& tensor, int dst, int tag, std::vector<Work>& pending) {
  pending.push_back(comm.isend(encode_header(tensor), dst, tag));
  pending.push_back(comm.isend(tensor.contiguous(), dst, tag));
}

void ActivationReceive::post(Comm& comm, int src, int tag) {
  header_ = torch::empty({kHeaderLength}, torch::kLong);
  src_ = src;
  tag_ = tag;
  header_work_ = comm.irecv(header_, src, tag);
}

torch::Tensor ActivationReceive::take(Comm& comm, const torch::Device& device) {
  header_work_.wait();
  auto data = empty_from_header(header_, device);
  comm.irecv(data, src_, tag_).wait();
  header_ = torch::Tensor();
  return data;
}

}  // namespace cohort::pipeline::detail
