// read_stored_zip (stored_zip.h): the end of central directory record (and the zip64 one its locator
// points to), then each central directory entry, then its local header for where the bytes start. Every
// offset read from the archive is checked against the archive's size before it is used, and records
// may not overlap, so checking the CRCs reads each byte at most once.
#include "checkpoint/dcp/stored_zip.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <set>

#include "checkpoint/shard_file.h"
#include "core/check.h"
#include "core/text.h"

namespace cohort::detail::dcp {

namespace {
// A name of its own: the checkpoint layer compiles in unity batches, which share anonymous namespaces.
namespace zip_reading {

constexpr uint32_t kEndSignature = 0x06054b50, kEnd64Signature = 0x06064b50, kLocatorSignature = 0x07064b50;
constexpr uint32_t kCentralSignature = 0x02014b50, kLocalSignature = 0x04034b50;
constexpr uint64_t kEndBytes = 22, kLocatorBytes = 20, kEnd64Bytes = 56, kCentralBytes = 46, kLocalBytes = 30;

// The central directory: where it lies and how many entries it holds.
struct Directory {
  uint64_t entries = 0, offset = 0, size = 0;
};

// A record as the central directory gives it, before its local header is read.
struct Entry {
  std::string name;
  uint32_t crc = 0;
  uint64_t size = 0, local_header = 0;
};

class ZipReader {
 public:
  ZipReader(const char* data, size_t size, const std::string& what)
      : data_(reinterpret_cast<const unsigned char*>(data)), size_(size), what_(what) {}
  std::vector<ZipRecord> records();

 private:
  [[noreturn]] void fail(const std::string& message) const { throw Error(what_ + ": " + message, ErrorKind::kIO); }
  // `length` bytes at `offset`, which lie inside [0, limit) (the whole archive by default).
  const unsigned char* bytes(uint64_t offset, uint64_t length, const char* part, uint64_t limit = UINT64_MAX) const;
  static uint64_t le(const unsigned char* p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t(p[i]) << (8 * i);
    return v;
  }
  uint64_t find_end() const;
  Directory directory(uint64_t end) const;
  Entry entry(uint64_t& pos, uint64_t directory_end) const;
  void zip64_fields(const unsigned char* extra, uint64_t length, Entry& e, uint64_t compressed) const;
  ZipRecord locate(const Entry& e) const;

  const unsigned char* data_;
  uint64_t size_;
  const std::string& what_;
};

const unsigned char* ZipReader::bytes(uint64_t offset, uint64_t length, const char* part, uint64_t limit) const {
  limit = std::min(limit, size_);
  if (length > limit || offset > limit - length)
    fail(str("zip ", part, " (", length, " bytes at byte ", offset, ") runs past ",
             limit == size_ ? "the end" : "its end", " of the archive's ", limit, " bytes"));
  return data_ + offset;
}

// The end of central directory record: the last 22 bytes but for a comment of up to 65,535 bytes, whose
// length the record gives (so a signature inside the comment is not taken for it).
uint64_t ZipReader::find_end() const {
  if (size_ >= kEndBytes) {
    const uint64_t lowest = size_ - kEndBytes > 0xffff ? size_ - kEndBytes - 0xffff : 0;
    for (uint64_t pos = size_ - kEndBytes + 1; pos-- > lowest;) {
      if (le(data_ + pos, 4) == kEndSignature && le(data_ + pos + 20, 2) == size_ - pos - kEndBytes) return pos;
    }
  }
  fail(str("not a zip archive: no end of central directory record in its ", size_, " bytes"));
}

// The directory as the end record gives it, or the zip64 end record when its locator precedes the end.
Directory ZipReader::directory(uint64_t end) const {
  const unsigned char* e = data_ + end;
  uint64_t disk = le(e + 4, 2), directory_disk = le(e + 6, 2), disk_entries = le(e + 8, 2);
  Directory d{le(e + 10, 2), le(e + 16, 4), le(e + 12, 4)};
  uint64_t limit = end;  // the directory lies before the end records
  if (end >= kLocatorBytes && le(data_ + end - kLocatorBytes, 4) == kLocatorSignature) {
    const uint64_t at = le(data_ + end - kLocatorBytes + 8, 8);
    const unsigned char* z = bytes(at, kEnd64Bytes, "zip64 end record", end - kLocatorBytes);
    if (le(z, 4) != kEnd64Signature) fail(str("zip64 end record at byte ", at, " has no zip64 end signature"));
    disk = le(z + 16, 4), directory_disk = le(z + 20, 4), disk_entries = le(z + 24, 8);
    d = Directory{le(z + 32, 8), le(z + 48, 8), le(z + 40, 8)};
    limit = at;
  } else if (d.entries == 0xffff || d.offset == 0xffffffff || d.size == 0xffffffff) {
    fail("zip end record defers to a zip64 end record, which is missing");
  }
  if (disk != 0 || directory_disk != 0 || disk_entries != d.entries) fail("zip archive spans several disks");
  bytes(d.offset, d.size, "central directory", limit);
  if (d.entries > d.size / kCentralBytes)
    fail(str("zip central directory of ", d.size, " bytes cannot hold the ", d.entries, " entries it claims"));
  return d;
}

// The zip64 extended information extra field: the 8-byte sizes and offset whose 4-byte fields are 0xffffffff.
void ZipReader::zip64_fields(const unsigned char* extra, uint64_t length, Entry& e, uint64_t compressed) const {
  for (uint64_t pos = 0; pos + 4 <= length;) {
    const uint64_t id = le(extra + pos, 2), field_bytes = le(extra + pos + 2, 2);
    if (field_bytes > length - pos - 4) fail(str("zip record '", excerpt(e.name), "' has an extra field past its end"));
    if (id == 1) {
      uint64_t at = pos + 4;
      for (uint64_t* value : {&e.size, &compressed, &e.local_header}) {
        if (*value != 0xffffffff) continue;
        if (at + 8 > pos + 4 + field_bytes) fail(str("zip record '", excerpt(e.name), "' has a short zip64 field"));
        *value = le(extra + at, 8);
        at += 8;
      }
    }
    pos += 4 + field_bytes;
  }
  if (compressed != e.size)
    fail(str("zip record '", excerpt(e.name), "' is stored in ", compressed, " bytes but holds ", e.size));
}

// The central directory entry at `pos`, which moves past it.
Entry ZipReader::entry(uint64_t& pos, uint64_t directory_end) const {
  const unsigned char* c = bytes(pos, kCentralBytes, "central directory entry", directory_end);
  if (le(c, 4) != kCentralSignature) fail(str("zip central directory entry at byte ", pos, " has no signature"));
  const uint64_t flags = le(c + 8, 2), method = le(c + 10, 2), name_bytes = le(c + 28, 2);
  const uint64_t extra_bytes = le(c + 30, 2), comment_bytes = le(c + 32, 2);
  const unsigned char* name = bytes(pos + kCentralBytes, name_bytes + extra_bytes + comment_bytes,
                                    "central directory entry's name", directory_end);
  Entry e{std::string(reinterpret_cast<const char*>(name), name_bytes), uint32_t(le(c + 16, 4)), le(c + 24, 4),
          le(c + 42, 4)};
  if (flags & 1) fail(str("zip record '", excerpt(e.name), "' is encrypted"));
  if (method != 0)
    fail(str("zip record '", excerpt(e.name), "' is compressed (method ", method,
             "): cohort reads STORED records only"));
  zip64_fields(name + name_bytes, extra_bytes, e, le(c + 20, 4));
  pos += kCentralBytes + name_bytes + extra_bytes + comment_bytes;
  return e;
}

// The record's bytes: after its local header, whose name must be the directory's.
ZipRecord ZipReader::locate(const Entry& e) const {
  const unsigned char* h = bytes(e.local_header, kLocalBytes, "local header");
  const uint64_t name_bytes = le(h + 26, 2), extra_bytes = le(h + 28, 2);
  const unsigned char* name = bytes(e.local_header + kLocalBytes, name_bytes, "local header's name");
  if (le(h, 4) != kLocalSignature || std::string(reinterpret_cast<const char*>(name), name_bytes) != e.name)
    fail(str("zip record '", excerpt(e.name), "' has no local header of that name at byte ", e.local_header));
  const uint64_t start = e.local_header + kLocalBytes + name_bytes + extra_bytes;
  if (e.size > size_ || start > size_ - e.size)
    fail(str("zip record '", excerpt(e.name), "' (", e.size, " bytes at byte ", start,
             ") runs past the end of the archive's ", size_, " bytes"));
  return ZipRecord{e.name, reinterpret_cast<const char*>(data_ + start), size_t(e.size)};
}

// Records may not share bytes (torch.save's never do), so checking the CRCs reads each byte once however
// many entries a hostile directory holds.
std::vector<ZipRecord> ZipReader::records() {
  const Directory d = directory(find_end());
  std::vector<Entry> entries;
  for (uint64_t i = 0, pos = d.offset; i < d.entries; ++i) entries.push_back(entry(pos, d.offset + d.size));
  std::set<std::string> names;
  std::vector<std::pair<uint64_t, uint64_t>> spans;  // each record's local header and end, for overlaps
  std::vector<ZipRecord> records;
  for (const Entry& e : entries) {
    if (!names.insert(e.name).second) fail(str("zip record '", excerpt(e.name), "' is given twice"));
    records.push_back(locate(e));
    spans.emplace_back(e.local_header,
                       uint64_t(records.back().data + records.back().size - reinterpret_cast<const char*>(data_)));
  }
  std::vector<size_t> order(records.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return spans[a] < spans[b]; });
  for (size_t i = 1; i < order.size(); ++i) {
    if (spans[order[i]].first < spans[order[i - 1]].second)
      fail(str("zip records '", excerpt(records[order[i - 1]].name), "' and '", excerpt(records[order[i]].name),
               "' overlap"));
  }
  for (size_t i = 0; i < records.size(); ++i) {
    const uint32_t crc = ckpt::crc32_update(0, records[i].data, int64_t(records[i].size));
    if (crc != entries[i].crc) {
      char text[64];
      std::snprintf(text, sizeof text, "(stored 0x%08x, computed 0x%08x)", entries[i].crc, crc);
      fail(str("zip record '", excerpt(records[i].name), "' fails its CRC32 check ", text, ": the item is damaged"));
    }
  }
  return records;
}

}  // namespace zip_reading
}  // namespace

std::vector<ZipRecord> read_stored_zip(const char* data, size_t size, const std::string& what) {
  return zip_reading::ZipReader(data, size, what).records();
}

}  // namespace cohort::detail::dcp
