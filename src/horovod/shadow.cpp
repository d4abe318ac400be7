// A joined rank's stand-ins for the allreduces of the others (see shadow.h), and how a waiting
// operation travels in a join round: "<N|U> <kind>|<shadow>|<name>", the shadow as integers
// "<fused> <op> <count> (<dtype> <cuda> <dims> <size>...)..." or empty when the kind has none.
#include "horovod/shadow.h"

#include <sstream>

#include "cohort/error.h"
#include "core/check.h"

namespace cohort::hvd::detail {

Shadow allreduce_shadow(const std::vector<torch::Tensor>& tensors, ReduceOp op, bool fused) {
  Shadow shadow;
  shadow.fused = fused;
  shadow.op = op;
  for (const auto& t : tensors) shadow.tensors.push_back({t.scalar_type(), t.sizes().vec(), t.is_cuda()});
  return shadow;
}

bool can_shadow(const std::optional<Shadow>& shadow) {
  return shadow && (shadow->op == ReduceOp::kSum || shadow->op == ReduceOp::kAvg);
}

Work start_shadow(Comm& comm, const Shadow& shadow, const torch::Device& device) {
  std::vector<torch::Tensor> zeros;
  for (const auto& spec : shadow.tensors) {
    const auto options = torch::TensorOptions(spec.dtype).device(spec.cuda ? device : torch::Device(torch::kCPU));
    zeros.push_back(torch::zeros(spec.sizes, options));
  }
  if (shadow.fused) return comm.allreduce_fused_async(zeros, shadow.op);
  COHORT_CHECK_KIND(kInternal, zeros.size() == 1, "hvd::join: an unfused allreduce of ", zeros.size(), " tensors");
  return comm.allreduce_async(zeros[0], shadow.op);
}

std::string encode_entry(const WaitingEntry& entry) {
  std::ostringstream out;
  out << (entry.named ? 'N' : 'U') << ' ' << entry.kind << '|';
  if (entry.shadow) {
    const Shadow& s = *entry.shadow;
    out << int(s.fused) << ' ' << int(s.op) << ' ' << s.tensors.size();
    for (const auto& t : s.tensors) {
      out << ' ' << int(t.dtype) << ' ' << int(t.cuda) << ' ' << t.sizes.size();
      for (int64_t d : t.sizes) out << ' ' << d;
    }
  }
  out << '|' << entry.name;
  return out.str();
}

WaitingEntry decode_entry(const std::string& text) {
  const auto first = text.find('|');
  const auto second = first == std::string::npos ? first : text.find('|', first + 1);
  COHORT_CHECK_KIND(kInternal,
                    second != std::string::npos && first >= 3 && (text[0] == 'N' || text[0] == 'U') && text[1] == ' ',
                    "hvd join round: a malformed operation entry '", text, "'");
  WaitingEntry entry;
  entry.named = text[0] == 'N';
  entry.kind = text.substr(2, first - 2);
  entry.name = text.substr(second + 1);
  const std::string spec = text.substr(first + 1, second - first - 1);
  if (spec.empty()) return entry;
  std::istringstream in(spec);
  Shadow s;
  int fused = 0, op = 0;
  size_t count = 0;
  in >> fused >> op >> count;
  for (size_t i = 0; in && i < count; ++i) {
    int dtype = 0, cuda = 0;
    size_t dims = 0;
    in >> dtype >> cuda >> dims;
    TensorSpec t{c10::ScalarType(dtype), std::vector<int64_t>(dims), cuda != 0};
    for (auto& d : t.sizes) in >> d;
    s.tensors.push_back(std::move(t));
  }
  COHORT_CHECK_KIND(kInternal, bool(in) && s.tensors.size() == count,
                    "hvd join round: a malformed allreduce description '", spec, "' of '", entry.name, "'");
  s.fused = fused != 0;
  s.op = ReduceOp(op);
  entry.shadow = std::move(s);
  return entry;
}

}  // namespace cohort::hvd::detail
