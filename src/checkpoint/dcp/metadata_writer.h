// A DCP checkpoint's `.metadata`: the pickled torch.distributed.checkpoint.metadata.Metadata that
// PyTorch's dcp.load reads (plain pickle.load), built from the entries an exporter wrote. Each tensor
// is TensorStorageMetadata (dtype, global size, its chunks), each object BytesStorageMetadata;
// storage_data maps every chunk (MetadataIndex: fqn, offsets) to its item (_StorageInfo: file,
// offset, length); planner_data gives each key's nesting, as dcp_to_torch_save needs it.
#pragma once

#include <string>
#include <vector>

#include "checkpoint/dcp/metadata.h"

namespace cohort::detail::dcp {

/// An entry and its place in the nested state dict (e.g. {"optimizer", "param_groups", "0", "lr"};
/// a part of digits alone is a list index, written as an int).
struct PlannedEntry {
  DcpEntry entry;
  std::vector<std::string> path;
};

/// The bytes of `.metadata`.
std::string metadata_pickle(const std::vector<PlannedEntry>& entries);

}  // namespace cohort::detail::dcp
