// Fingerprint hashing and description (see fingerprint.h).
#include "comm/fingerprint.h"

#include <sstream>

namespace cohort::detail {
namespace {

struct Fnv {
  uint64_t state = 1469598103934665603ull;
  void add(uint64_t value) {
    for (int i = 0; i < 8; ++i) {
      state ^= (value >> (8 * i)) & 0xff;
      state *= 1099511628211ull;
    }
  }
};

}  // namespace

std::string dtype_name(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float: return "float32";
    case c10::ScalarType::Double: return "float64";
    case c10::ScalarType::Half: return "float16";
    case c10::ScalarType::BFloat16: return "bfloat16";
    case c10::ScalarType::Int: return "int32";
    case c10::ScalarType::Long: return "int64";
    case c10::ScalarType::Short: return "int16";
    case c10::ScalarType::Char: return "int8";
    case c10::ScalarType::Byte: return "uint8";
    case c10::ScalarType::Bool: return "bool";
    default: return c10::toString(dtype);
  }
}

const char* op_kind_name(OpKind op) {
  switch (op) {
    case OpKind::kAllreduce: return "allreduce";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kAllgather: return "allgather";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kBarrier: return "barrier";
    case OpKind::kSend: return "send";
    case OpKind::kRecv: return "recv";
    case OpKind::kAlltoall: return "alltoall";
  }
  return "?";
}

uint64_t Fingerprint::hash(uint64_t seq) const {
  Fnv h;
  h.add(seq);
  // A send and the matching recv must hash alike: both count as one point-to-point transfer.
  const bool p2p = op == OpKind::kSend || op == OpKind::kRecv;
  h.add(p2p ? 100 : uint64_t(op));
  h.add(uint64_t(reduce));
  h.add(uint64_t(dtype));
  h.add(shape.size());
  for (int64_t d : shape) h.add(uint64_t(d));
  h.add(p2p ? 0 : uint64_t(int64_t(root)));
  h.add(uint64_t(count));
  if (!p2p) {  // a send's label is its sender thread's; the receiver need not share it
    h.add(label.size());
    for (char c : label) h.add(uint64_t(uint8_t(c)));
  }
  return h.state;
}

std::string Fingerprint::describe() const {
  std::ostringstream out;
  out << op_kind_name(op);
  if (op == OpKind::kAllreduce || op == OpKind::kReduceScatter) out << "(" << reduce_op_name(reduce) << ")";
  if (op == OpKind::kBroadcast) out << "(root " << root << ")";
  if (op == OpKind::kSend) out << " to " << root;
  if (op == OpKind::kRecv) out << " from " << root;
  if (op != OpKind::kBarrier) {
    out << " " << tensor_text();
    if (count > 1) out << " (" << count << " tensors fused)";
  }
  if (!label.empty()) out << " '" << label << "'";
  return out.str();
}

std::string Fingerprint::tensor_text() const {
  std::ostringstream out;
  out << dtype_name(dtype) << " [";
  for (size_t i = 0; i < shape.size(); ++i) {
    out << (i ? ", " : "");
    if (shape[i] < 0) out << "*";
    else out << shape[i];
  }
  out << "]";
  return out.str();
}

}  // namespace cohort::detail
