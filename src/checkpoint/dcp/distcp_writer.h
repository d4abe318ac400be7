// A DCP data file (`__0_0.distcp`): items one after another, no header, each a complete torch.save
// archive (a zip, STORED, its offsets relative to the item's start) that PyTorch's reader opens with
// torch.load: `archive/data.pkl` (the pickled object; a tensor's names its storage `data/0`), the
// storage's bytes, `archive/byteorder` and `archive/version`. A tensor's bytes are streamed in, so an
// item never sits whole in memory; its record's CRC32 is filled in once they are written.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/safe_file.h"

namespace cohort::detail::dcp {

/// Where an item lies in its file.
struct ItemRange {
  int64_t offset = 0;
  int64_t length = 0;
};

/// PyTorch's storage class of `dtype` ("FloatStorage", "BFloat16Storage"); throws for one it lacks.
const char* storage_class(c10::ScalarType dtype);

class DistcpWriter {
 public:
  /// Writes `path` safely (core/safe_file.h): nothing is there until commit().
  explicit DistcpWriter(const std::string& path);

  /// An item holding a Python object: `pickle` is its data.pkl (pickle_writer.h).
  ItemRange object_item(const std::string& pickle);
  /// Starts an item holding a contiguous tensor of `dtype` and `shape`; its bytes follow through
  /// tensor_bytes() (little-endian elements, in order), then end_tensor_item().
  void begin_tensor_item(c10::ScalarType dtype, const std::vector<int64_t>& shape);
  void tensor_bytes(const char* data, int64_t bytes);
  /// Throws when the bytes written are not the tensor's size.
  ItemRange end_tensor_item();
  void commit();

 private:
  struct Record {
    std::string name;
    uint32_t crc = 0;
    int64_t size = 0;
    int64_t local_header = 0;  // relative to the item's start
  };
  void begin_item();
  void whole_record(const std::string& name, const std::string& bytes);
  void begin_record(const std::string& name);
  ItemRange end_item();
  void put(const std::string& bytes);

  SafeFile file_;
  int64_t position_ = 0;    // bytes written to the file
  int64_t item_start_ = 0;  // of the item being written
  std::vector<Record> records_;
  int64_t expected_ = -1;  // the open tensor record's byte count; -1: none open
};

}  // namespace cohort::detail::dcp
