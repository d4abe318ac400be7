// One item of a DCP data file (`__0_0.distcp`): a complete torch.save archive (a zip whose records lie
// under one top-level folder: `<prefix>/data.pkl`, the pickled object, and `<prefix>/data/<key>`, the
// bytes of each storage it names), given as bytes in memory (a range of an mmap'd file). Read from bytes
// that may be hostile: the zip is bounded and CRC-checked (stored_zip.h), the pickle bounded
// (pickle_reader.h), and a tensor's size, stride and offset checked to address only its storage.
#pragma once

#include <torch/types.h>

#include <cstddef>
#include <string>

#include "checkpoint/dcp/pickle_value.h"

namespace cohort::detail::dcp {

/// The tensor a tensor item holds (torch.save of one tensor: `_rebuild_tensor_v2` over a storage
/// record), as a new contiguous CPU tensor that owns its memory, whatever strides it was saved with.
/// The storage's dtype is its class (torch.FloatStorage, BFloat16Storage, ...); its bytes are read as
/// little-endian, so this assumes a little-endian host (and refuses an archive whose `byteorder` record
/// says "big"). Throws cohort::Error (ErrorKind::kIO), every message starting with `what` (e.g.
/// "__0_0.distcp item model.0.weight").
torch::Tensor read_tensor_item(const char* data, size_t size, const std::string& what);

/// The Python object a BYTE_IO item holds (torch.save of a float, bool, None, tuple, list of str, ...),
/// as the value tree its data.pkl builds. Throws as read_tensor_item does.
PickleValue read_object_item(const char* data, size_t size, const std::string& what);

}  // namespace cohort::detail::dcp
