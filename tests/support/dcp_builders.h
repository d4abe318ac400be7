// Shared builders of the DCP reader tests (dcp_reader_test.cpp, dcp_hostile_test.cpp): the tiny fixture's
// path, entries and items, and hand-written pickles, `.metadata` files, zips and torch.save items for
// what PyTorch would not write.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/dcp/metadata.h"
#include "checkpoint/dcp/pickle_reader.h"
#include "checkpoint/dcp/torch_save_item.h"
#include "cohort/error.h"
#include "support/errors.h"

namespace cohort::testing::dcp {

using namespace cohort::detail::dcp;

// The fixture's directory: $COHORT_SOURCE_DIR/tests/data/dcp/tiny, else found from this header's path.
inline std::string tiny_dir() {
  const char* root = std::getenv("COHORT_SOURCE_DIR");
  const std::string here = __FILE__;
  const std::string source = root != nullptr && *root != '\0' ? std::string(root)
                                                              : here.substr(0, here.find_last_of('/')) + "/../..";
  return source + "/tests/data/dcp/tiny";
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

inline const DcpEntry& entry(const DcpMetadata& md, const std::string& fqn) {
  for (const DcpEntry& e : md.entries) {
    if (e.fqn == fqn) return e;
  }
  throw std::runtime_error("no entry " + fqn);
}

// The bytes of a chunk's item, from its file in the fixture.
inline std::string item(const DcpChunk& c) { return read_file(tiny_dir() + "/" + c.file).substr(c.offset, c.length); }

inline torch::Tensor tensor_of(const DcpChunk& c) {
  const std::string bytes = item(c);
  return read_tensor_item(bytes.data(), bytes.size(), c.file + " item");
}

inline PickleValue object_of(const DcpChunk& c) {
  const std::string bytes = item(c);
  return read_object_item(bytes.data(), bytes.size(), c.file + " item");
}

inline std::string le(uint64_t v, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out += char(v >> (8 * i));
  return out;
}

// A protocol-2 pickle written by hand (GLOBAL, no memo), for what PyTorch would not write.
struct Pickle {
  std::string b = "\x80\x02";
  void op(char c) { b += c; }
  void global(const std::string& module, const std::string& name) { b += "c" + module + "\n" + name + "\n"; }
  void text(const std::string& s) { b += "X" + le(s.size(), 4) + s; }
  void integer(int64_t v) { b += "\x8a\x08" + le(uint64_t(v), 8); }  // LONG1 of 8 bytes
  void ints(const std::vector<int64_t>& v) {
    op('(');
    for (int64_t x : v) integer(x);
    op('t');
  }
  void size(const std::vector<int64_t>& v) {  // torch.Size(v)
    global("torch", "Size");
    op('(');
    ints(v);
    op('t');
    op('R');
  }
  void instance(const std::string& module, const std::string& cls) {
    global(module, cls);
    b += ")\x81";  // EMPTY_TUPLE NEWOBJ
  }
  std::string done() const { return b + "."; }
};

inline const std::string kMd = "torch.distributed.checkpoint.metadata";

// A chunk of tensor 'w' for fake_metadata, and its storage_data entry (none when `file` is empty).
struct FakeChunk {
  std::vector<int64_t> offsets, sizes;
  std::string file = "__0_0.distcp";
  int64_t offset = 0, length = 100;
  bool zstd = false;
};

// A `.metadata` of one tensor 'w' of `dtype` and `size` with these chunks.
inline std::string fake_metadata(const std::vector<int64_t>& size, const std::vector<FakeChunk>& chunks,
                                 const std::string& dtype = "float32") {
  Pickle p;
  p.instance(kMd, "Metadata");
  p.b += "}";
  p.text("state_dict_metadata");
  p.b += "}";
  p.text("w");
  p.instance(kMd, "TensorStorageMetadata");
  p.b += "}";
  p.text("properties");
  p.instance(kMd, "TensorProperties");
  p.op('(');
  p.global("torch", dtype);
  p.b += "N\x89N\x89tb";  // layout, requires_grad, memory format, pin_memory: not read
  p.op('s');
  p.text("size");
  p.size(size);
  p.op('s');
  p.text("chunks");
  p.b += "]";
  for (const FakeChunk& c : chunks) {
    p.instance(kMd, "ChunkStorageMetadata");
    p.b += "}";
    p.text("offsets");
    p.size(c.offsets);
    p.op('s');
    p.text("sizes");
    p.size(c.sizes);
    p.b += "sba";  // SETITEM BUILD APPEND
  }
  p.b += "sbss";  // chunks set, TensorStorageMetadata built, 'w' set, state_dict_metadata set
  p.text("storage_data");
  p.b += "}";
  for (const FakeChunk& c : chunks) {
    if (c.file.empty()) continue;
    p.instance(kMd, "MetadataIndex");
    p.b += "}";
    p.text("fqn");
    p.text("w");
    p.op('s');
    p.text("offset");
    p.size(c.offsets);
    p.b += "sb";
    p.instance("torch.distributed.checkpoint.filesystem", "_StorageInfo");
    p.b += "}";
    p.text("relative_path");
    p.text(c.file);
    p.op('s');
    p.text("offset");
    p.integer(c.offset);
    p.op('s');
    p.text("length");
    p.integer(c.length);
    p.op('s');
    if (c.zstd) {
      p.text("transform_descriptors");
      p.b += "]";
      p.text("stream.zstd/1");
      p.b += "as";
    }
    p.b += "bs";
  }
  p.b += "sb";  // storage_data set, Metadata built
  return p.done();
}

FakeChunk chunk(std::vector<int64_t> offsets, std::vector<int64_t> sizes, std::string file = "__0_0.distcp") {
  FakeChunk c;
  c.offsets = std::move(offsets);
  c.sizes = std::move(sizes);
  c.file = std::move(file);
  return c;
}

inline std::string metadata_error(const std::vector<int64_t>& size, const std::vector<FakeChunk>& chunks,
                                  const std::string& dtype = "float32") {
  return error_of([&] { parse_dcp_metadata(fake_metadata(size, chunks, dtype), "ckpt/.metadata"); });
}

// zlib's CRC32, bit by bit (the test executables do not link zlib).
inline uint32_t crc32_of(const std::string& bytes) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char byte : bytes) {
    crc ^= byte;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

// A zip of STORED records, no zip64, no data descriptors: what Python's zipfile writes.
inline std::string stored_zip(const std::vector<std::pair<std::string, std::string>>& records) {
  std::string out, directory;
  for (const auto& [name, bytes] : records) {
    const std::string common = le(0, 2) + le(0, 2) + le(0, 4) + le(crc32_of(bytes), 4) + le(bytes.size(), 4) +
                               le(bytes.size(), 4) + le(name.size(), 2) + le(0, 2);
    directory += "PK\x01\x02" + le(20, 2) + le(20, 2) + common + le(0, 2) + le(0, 2) + le(0, 2) + le(0, 4) +
                 le(out.size(), 4) + name;
    out += "PK\x03\x04" + le(20, 2) + common + name + bytes;
  }
  return out + directory + "PK\x05\x06" + le(0, 4) + le(records.size(), 2) + le(records.size(), 2) +
         le(directory.size(), 4) + le(out.size(), 4) + le(0, 2);
}

// torch.save's data.pkl of a tensor over storage '0' of `cls` with `numel` elements.
inline std::string tensor_pickle(const std::string& cls, int64_t numel, int64_t offset,
                                 const std::vector<int64_t>& size, const std::vector<int64_t>& stride) {
  Pickle p;
  p.global("torch._utils", "_rebuild_tensor_v2");
  p.b += "((";
  p.text("storage");
  p.global("torch", cls);
  p.text("0");
  p.text("cpu");
  p.integer(numel);
  p.b += "tQ";  // TUPLE BINPERSID
  p.integer(offset);
  p.ints(size);
  p.ints(stride);
  p.op('\x89');
  p.global("collections", "OrderedDict");
  p.b += ")RtR";
  return p.done();
}

inline std::string floats(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

inline std::string tensor_zip(const std::string& pickle, const std::string& storage) {
  return stored_zip({{"archive/data.pkl", pickle}, {"archive/data/0", storage}, {"archive/version", "3\n"}});
}

inline std::string item_error(const std::string& bytes) {
  return error_of([&] { read_tensor_item(bytes.data(), bytes.size(), "x.distcp item w"); });
}

inline std::string pickle_error(const std::string& bytes, const PickleLimits& limits = {}) {
  return error_of([&] { parse_pickle(bytes.data(), bytes.size(), "p", limits); });
}
}  // namespace cohort::testing::dcp
