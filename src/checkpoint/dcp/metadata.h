// What a PyTorch torch.distributed.checkpoint (DCP) checkpoint holds, from its `.metadata` (a pickled
// torch.distributed.checkpoint.metadata.Metadata, PyTorch 2.x's torch/distributed/checkpoint/metadata.py):
// every key of the flattened state dict, a tensor's dtype, global size and saved chunks, and where each
// chunk's item lies (a file of the checkpoint's directory, a byte range in it). Read from a file that
// may be hostile: the pickle is bounded (pickle_reader.h), every chunk is checked to lie inside its
// tensor and apart from the others, and an item's file is a plain name inside the directory.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::detail::dcp {

/// One saved chunk of a tensor (its global offsets and sizes), and where its item lies: bytes
/// [offset, offset + length) of `file`, a torch.save archive (torch_save_item.h).
struct DcpChunk {
  std::vector<int64_t> offsets, sizes;
  std::string file;
  int64_t offset = 0, length = 0;
};

/// A key of the checkpoint. A tensor has its dtype, global size and chunks; an object (BYTE_IO: a
/// float, a tuple, the list of param names, ...) has tensor=false and one chunk with empty offsets and
/// sizes.
struct DcpEntry {
  std::string fqn;
  bool tensor = false;
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<int64_t> size;
  std::vector<DcpChunk> chunks;
};

struct DcpMetadata {
  std::vector<DcpEntry> entries;  ///< sorted by fqn
};

/// The checkpoint described by `bytes`, the contents of a `.metadata`. Throws cohort::Error
/// (ErrorKind::kIO) naming `path_for_errors`, the key and the offending value. The bytes of an item are
/// not looked at: that its range lies inside its file is the reader's to check.
DcpMetadata parse_dcp_metadata(const std::string& bytes, const std::string& path_for_errors);

/// parse_dcp_metadata of `dir`/.metadata, a regular file of at most 256 MiB.
DcpMetadata read_dcp_metadata(const std::string& dir);

}  // namespace cohort::detail::dcp
