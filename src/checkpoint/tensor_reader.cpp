// TensorReader (see tensor_reader.h).
#include "checkpoint/tensor_reader.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "checkpoint/layout.h"
#include "cohort/error.h"
#include "core/check.h"

namespace cohort::detail::ckpt {

TensorReader::TensorReader(std::string dir, const Manifest& manifest, int rank)
    : dir_(std::move(dir)), m_(manifest), rank_(rank) {}

ShardReader& TensorReader::file(const std::string& name) {
  auto it = open_.find(name);
  if (it != open_.end()) return *it->second;
  const auto record = std::find_if(m_.files.begin(), m_.files.end(),
                                   [&](const FileRecord& f) { return f.name == name; });
  COHORT_CHECK_KIND(kIO, record != m_.files.end(), dir_, "/manifest.json names file ", name,
                    " but does not list it in 'files'");
  auto reader = std::make_unique<ShardReader>(dir_ + "/" + name, record->rank, m_.world_size, record->payload_bytes);
  return *open_.emplace(name, std::move(reader)).first->second;
}

// The whole piece, checksum checked.
torch::Tensor TensorReader::piece(const Piece& p, c10::ScalarType dtype, const std::string& name) {
  const int64_t element = c10::elementSize(dtype);
  COHORT_CHECK_KIND(kIO, p.nbytes == p.numel * element, dir_, "/manifest.json: tensor '", name, "' has ", p.numel,
                    " elements in ", p.nbytes, " bytes");
  torch::Tensor out = torch::empty({p.numel}, torch::TensorOptions().dtype(dtype));
  file(p.file).read_piece(p, out.data_ptr(), "tensor '" + name + "'");
  return out;
}

torch::Tensor TensorReader::read(const std::string& name, const StateTensor& want, const TensorRecord& r) {
  const c10::IntArrayRef sizes = want.tensor.sizes();
  if (r.kind == StateKind::kSharded) {
    std::vector<Slice> slices;
    for (const Piece& p : r.pieces) slices.push_back({p.offset, p.numel});
    const int64_t numel = want.tensor.numel(), begin = want.offset, end = begin + numel;
    torch::Tensor out = torch::empty({numel}, torch::TensorOptions().dtype(r.dtype));
    const int64_t element = c10::elementSize(r.dtype);
    for (const SliceCopy& c : plan_slice_copies(slices, begin, end, dir_ + ": tensor '" + name + "'")) {
      const torch::Tensor piece = this->piece(r.pieces[c.slice], r.dtype, name);
      std::memcpy(static_cast<char*>(out.data_ptr()) + c.to * element,
                  static_cast<const char*>(piece.data_ptr()) + c.from * element, c.count * element);
    }
    return out.view(sizes);
  }
  const Piece* piece = &r.pieces.at(0);
  if (r.kind == StateKind::kPerRank) {
    for (const Piece& p : r.pieces) {
      if (p.rank == rank_) piece = &p;  // a rank that did not exist when saving takes rank 0's
    }
  }
  return this->piece(*piece, r.dtype, name).view(sizes);
}

}  // namespace cohort::detail::ckpt
