// The geometry of a DCP tensor's saved chunks (metadata.h), checked before anything is read by it: a
// hostile `.metadata` could otherwise make a reader index outside a tensor, or read one element from
// two chunks that disagree.
#pragma once

#include <string>

#include "checkpoint/dcp/metadata.h"

namespace cohort::detail::dcp {

/// Throws cohort::Error (ErrorKind::kIO, naming `path` and the tensor) unless `tensor`'s size is
/// non-negative with at most INT64_MAX elements, each chunk has the tensor's rank and lies inside it
/// (offsets and sizes non-negative, no overflow), and no two chunks with elements overlap. Chunks of
/// no elements may repeat (PyTorch records each rank's empty shard); the chunks need not cover the
/// tensor.
void check_chunks(const DcpEntry& tensor, const std::string& path);

}  // namespace cohort::detail::dcp
