// Cross-rank parameter check (see param_check.h). Each rank encodes its parameters as int64s
// [count, (dtype, ndim, dims...)...]; the encodings are all-gathered (variable-size allgather) and
// compared with rank 0's, so every rank reaches the same verdict and raises the same message.
#include "ddp/param_check.h"

#include <sstream>

#include "comm/fingerprint.h"
#include "comm/ragged.h"

namespace cohort::detail {
namespace {

struct Decoded {
  std::vector<std::vector<int64_t>> shapes;
  std::vector<int64_t> dtypes;
};

Decoded decode(const int64_t* data) {
  Decoded d;
  const int64_t count = data[0];
  int64_t pos = 1;
  for (int64_t i = 0; i < count; ++i) {
    d.dtypes.push_back(data[pos++]);
    const int64_t ndim = data[pos++];
    d.shapes.emplace_back(data + pos, data + pos + ndim);
    pos += ndim;
  }
  return d;
}

std::string shape_text(const std::vector<int64_t>& shape, int64_t dtype) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "] " << dtype_name(c10::ScalarType(dtype));
  return out.str();
}

}  // namespace

void check_same_parameters(Comm& comm, const std::vector<std::string>& names,
                           const std::vector<torch::Tensor>& params) {
  if (comm.size() == 1) return;
  std::vector<int64_t> code{int64_t(params.size())};
  for (const auto& p : params) {
    code.push_back(int64_t(p.scalar_type()));
    code.push_back(p.dim());
    for (auto d : p.sizes()) code.push_back(d);
  }
  std::vector<Decoded> ranks;
  for (const torch::Tensor& part : allgather_ragged(comm, torch::tensor(code, torch::kLong)))
    ranks.push_back(decode(part.contiguous().data_ptr<int64_t>()));
  for (size_t i = 0;; ++i) {
    bool any_has = false, all_have = true, same = true;
    for (const auto& d : ranks) {
      const bool has = i < d.shapes.size();
      any_has |= has;
      all_have &= has;
      if (has && i < ranks[0].shapes.size())
        same &= d.shapes[i] == ranks[0].shapes[i] && d.dtypes[i] == ranks[0].dtypes[i];
    }
    if (!any_has) return;
    if (all_have && same) continue;
    std::ostringstream out;
    const std::string name = i < names.size() ? "'" + names[i] + "'" : "#" + std::to_string(i);
    out << "DistributedDataParallel: ranks hold different parameters; the first that differs is " << name
        << " (parameter #" << i << "):";
    for (int r = 0; r < comm.size(); ++r) {
      out << " rank " << r << ": ";
      if (i < ranks[r].shapes.size()) out << shape_text(ranks[r].shapes[i], ranks[r].dtypes[i]);
      else out << "(none: " << ranks[r].shapes.size() << " parameters)";
      out << (r + 1 < comm.size() ? ";" : ".");
    }
    out << " Every rank must build the same model before wrapping it in DDP.";
    const Decoded& mine = ranks[comm.rank()];
    const bool i_have = i < mine.shapes.size();
    std::vector<int> differ;  // the ranks whose parameter #i differs from this rank's
    for (int r = 0; r < comm.size(); ++r) {
      const bool has = i < ranks[r].shapes.size();
      if (has != i_have || (has && (ranks[r].shapes[i] != mine.shapes[i] || ranks[r].dtypes[i] != mine.dtypes[i])))
        differ.push_back(comm.world_rank(r));
    }
    throw Error(out.str(), ErrorKind::kDesync, differ);
  }
}

}  // namespace cohort::detail
