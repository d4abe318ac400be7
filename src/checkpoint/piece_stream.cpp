#include "checkpoint/piece_stream.h"

#include "checkpoint/layout.h"
#include "cohort/error.h"
#include "core/check.h"

namespace cohort::detail::ckpt {

ShardReader& PieceFiles::get(const std::string& name) {
  auto it = open_.find(name);
  if (it != open_.end()) return *it->second;
  const auto f = std::find_if(m_.files.begin(), m_.files.end(), [&](const FileRecord& r) { return r.name == name; });
  COHORT_CHECK_KIND(kIO, f != m_.files.end(), dir_, "/manifest.json: file ", name, " is not in 'files'");
  auto reader = std::make_unique<ShardReader>(dir_ + "/" + name, f->rank, m_.world_size, f->payload_bytes);
  return *open_.emplace(name, std::move(reader)).first->second;
}

std::vector<Piece> ordered_pieces(const TensorRecord& r) {
  std::vector<Piece> pieces = r.pieces;
  if (r.kind == StateKind::kSharded) {
    std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.offset < b.offset; });
    std::vector<Slice> slices;
    for (const Piece& p : pieces) slices.push_back({p.offset, p.numel});
    plan_slice_copies(slices, 0, r.flat_numel, "tensor '" + r.name + "'");  // no holes, no overlaps
  }
  return pieces;
}

}  // namespace cohort::detail::ckpt
