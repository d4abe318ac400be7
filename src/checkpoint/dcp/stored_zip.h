// The records of a zip archive held whole in memory, as torch.save writes one (every record STORED, a
// zip64 end record, data descriptors, padding in the local headers' extra fields): read from bytes that
// may be hostile. Sizes come from the central directory; each record's range is checked to lie inside
// the archive and its CRC32 is verified (PyTorch's reader does not; cohort does, so a damaged item is
// an error, not silently altered values).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace cohort::detail::dcp {

/// One record: its name and where its bytes lie (inside the archive given to read_stored_zip).
struct ZipRecord {
  std::string name;
  const char* data = nullptr;
  size_t size = 0;
};

/// The records of the zip archive in [data, data + size), in the central directory's order. Throws
/// cohort::Error (ErrorKind::kIO), every message starting with `what`: not a zip, a multi-disk or
/// encrypted archive, a compressed record (only STORED is read), a record or directory outside the
/// archive, a name given twice, a CRC32 that does not match.
std::vector<ZipRecord> read_stored_zip(const char* data, size_t size, const std::string& what);

}  // namespace cohort::detail::dcp
