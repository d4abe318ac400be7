#include "checkpoint/dcp/distcp_writer.h"

#include <limits>

#include "checkpoint/dcp/pickle_writer.h"
#include "checkpoint/shard_file.h"
#include "cohort/error.h"

namespace cohort::detail::dcp {

namespace {

constexpr const char* kArchivePrefix = "archive/";
// A zip without zip64 counts in 32 bits: records and items stay below 4 GiB (the exporter cuts
// tensors into chunks far smaller).
constexpr int64_t kZip32Limit = std::numeric_limits<uint32_t>::max();

void append_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

// The local file header of a STORED record; its CRC and sizes at +14..+25.
std::string local_header(const std::string& name, uint32_t crc, int64_t size) {
  std::string h;
  append_le(h, 0x04034b50, 4);
  append_le(h, 20, 2);  // version needed: 2.0
  append_le(h, 0, 2);   // flags
  append_le(h, 0, 2);   // method: stored
  append_le(h, 0, 4);   // time, date
  append_le(h, crc, 4);
  append_le(h, static_cast<uint64_t>(size), 4);
  append_le(h, static_cast<uint64_t>(size), 4);
  append_le(h, name.size(), 2);
  append_le(h, 0, 2);  // extra field
  return h + name;
}

std::string central_entry(const std::string& name, uint32_t crc, int64_t size, int64_t local) {
  std::string h;
  append_le(h, 0x02014b50, 4);
  append_le(h, 20, 2);  // made by
  append_le(h, 20, 2);  // needed
  append_le(h, 0, 2);
  append_le(h, 0, 2);
  append_le(h, 0, 4);
  append_le(h, crc, 4);
  append_le(h, static_cast<uint64_t>(size), 4);
  append_le(h, static_cast<uint64_t>(size), 4);
  append_le(h, name.size(), 2);
  append_le(h, 0, 2);  // extra
  append_le(h, 0, 2);  // comment
  append_le(h, 0, 2);  // disk
  append_le(h, 0, 2);  // internal attributes
  append_le(h, 0, 4);  // external attributes
  append_le(h, static_cast<uint64_t>(local), 4);
  return h + name;
}

// data.pkl of torch.save(tensor): torch._utils._rebuild_tensor_v2(storage, 0, size, stride, False,
// OrderedDict()), the storage a persistent id naming record data/0.
std::string tensor_pickle(c10::ScalarType dtype, const std::vector<int64_t>& shape, int64_t numel) {
  std::vector<int64_t> stride(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) stride[i - 1] = stride[i] * std::max<int64_t>(shape[i], 1);
  PickleWriter p;
  p.global("torch._utils", "_rebuild_tensor_v2");
  p.mark();
  p.mark();
  p.text("storage");
  p.global("torch", storage_class(dtype));
  p.text("0");
  p.text("cpu");
  p.integer(numel);
  p.tuple();
  p.persistent_id();
  p.integer(0);
  p.int_tuple(shape);
  p.int_tuple(stride);
  p.boolean(false);
  p.global("collections", "OrderedDict");
  p.empty_tuple();
  p.reduce();
  p.tuple();
  p.reduce();
  return p.finish();
}

}  // namespace

const char* storage_class(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float: return "FloatStorage";
    case c10::ScalarType::Double: return "DoubleStorage";
    case c10::ScalarType::Half: return "HalfStorage";
    case c10::ScalarType::BFloat16: return "BFloat16Storage";
    case c10::ScalarType::Long: return "LongStorage";
    case c10::ScalarType::Int: return "IntStorage";
    case c10::ScalarType::Short: return "ShortStorage";
    case c10::ScalarType::Char: return "CharStorage";
    case c10::ScalarType::Byte: return "ByteStorage";
    case c10::ScalarType::Bool: return "BoolStorage";
    default: break;
  }
  COHORT_CHECK_KIND(kInvalidArgument, false, "a DCP checkpoint cannot hold a tensor of dtype ", c10::toString(dtype));
  return nullptr;
}

DistcpWriter::DistcpWriter(const std::string& path) : file_(path) {}

void DistcpWriter::put(const std::string& bytes) {
  file_.write(bytes);
  position_ += static_cast<int64_t>(bytes.size());
}

void DistcpWriter::begin_item() {
  item_start_ = position_;
  records_.clear();
}

void DistcpWriter::whole_record(const std::string& name, const std::string& bytes) {
  const uint32_t crc = ckpt::crc32_update(0, bytes.data(), static_cast<int64_t>(bytes.size()));
  records_.push_back({kArchivePrefix + name, crc, static_cast<int64_t>(bytes.size()), position_ - item_start_});
  put(local_header(kArchivePrefix + name, crc, static_cast<int64_t>(bytes.size())));
  put(bytes);
}

ItemRange DistcpWriter::end_item() {
  whole_record("byteorder", "little");
  whole_record("version", "3\n");
  const int64_t directory = position_ - item_start_;
  std::string central;
  for (const Record& r : records_) central += central_entry(r.name, r.crc, r.size, r.local_header);
  std::string end;
  append_le(end, 0x06054b50, 4);
  append_le(end, 0, 4);  // disk numbers
  append_le(end, records_.size(), 2);
  append_le(end, records_.size(), 2);
  append_le(end, central.size(), 4);
  append_le(end, static_cast<uint64_t>(directory), 4);
  append_le(end, 0, 2);  // comment
  put(central + end);
  const ItemRange range{item_start_, position_ - item_start_};
  COHORT_CHECK_KIND(kInvalidArgument, range.length < kZip32Limit, "a DCP item of ", range.length,
                    " bytes: items are written below 4 GiB");
  return range;
}

ItemRange DistcpWriter::object_item(const std::string& pickle) {
  begin_item();
  whole_record("data.pkl", pickle);
  return end_item();
}

void DistcpWriter::begin_tensor_item(c10::ScalarType dtype, const std::vector<int64_t>& shape) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const int64_t bytes = numel * static_cast<int64_t>(c10::elementSize(dtype));
  COHORT_CHECK_KIND(kInvalidArgument, bytes < kZip32Limit, "a DCP item of ", bytes,
                    " bytes: items are written below 4 GiB");
  begin_item();
  whole_record("data.pkl", tensor_pickle(dtype, shape, numel));
  records_.push_back({std::string(kArchivePrefix) + "data/0", 0, bytes, position_ - item_start_});
  put(local_header(records_.back().name, 0, bytes));  // its CRC filled in at the end
  expected_ = bytes;
}

void DistcpWriter::tensor_bytes(const char* data, int64_t bytes) {
  Record& r = records_.back();
  COHORT_CHECK_KIND(kInternal, expected_ >= 0 && bytes <= expected_, "DCP item: ", bytes,
                    " bytes more than its tensor holds");
  file_.write(data, static_cast<size_t>(bytes));
  position_ += bytes;
  expected_ -= bytes;
  r.crc = ckpt::crc32_update(r.crc, data, bytes);
}

ItemRange DistcpWriter::end_tensor_item() {
  COHORT_CHECK_KIND(kInternal, expected_ == 0, "DCP item: ", expected_, " bytes of its tensor are missing");
  expected_ = -1;
  const Record& r = records_.back();
  std::string crc;
  append_le(crc, r.crc, 4);
  file_.write_at(crc.data(), crc.size(), item_start_ + r.local_header + 14);
  return end_item();
}

void DistcpWriter::commit() { file_.commit(); }

}  // namespace cohort::detail::dcp
