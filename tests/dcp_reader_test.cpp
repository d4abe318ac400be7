// Tests of cohort's reader of PyTorch's torch.distributed.checkpoint (DCP) format (src/checkpoint/dcp/):
// a real 2-rank FSDP2 nn.Linear(2, 3) + AdamW checkpoint written by PyTorch 2.11 (tests/data/dcp/tiny/,
// made by tests/python/dcp_fixtures.py, whose docstring says what it holds) read to the values set
// there; then hostile pickles, metadata and items (built here by hand, or real ones with bytes
// changed), each refused with its message.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
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

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace dcp_reader_test {

namespace {

using namespace cohort::detail::dcp;
using cohort::testing::error_of;

std::string tiny_dir() {
  const char* root = std::getenv("COHORT_SOURCE_DIR");
  const std::string here = __FILE__;
  const std::string source = root != nullptr && *root != '\0' ? std::string(root)
                                                              : here.substr(0, here.find_last_of('/')) + "/..";
  return source + "/tests/data/dcp/tiny";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

const DcpEntry& entry(const DcpMetadata& md, const std::string& fqn) {
  for (const DcpEntry& e : md.entries) {
    if (e.fqn == fqn) return e;
  }
  throw std::runtime_error("no entry " + fqn);
}

// The bytes of a chunk's item, from its file in the fixture.
std::string item(const DcpChunk& c) { return read_file(tiny_dir() + "/" + c.file).substr(c.offset, c.length); }

torch::Tensor tensor_of(const DcpChunk& c) {
  const std::string bytes = item(c);
  return read_tensor_item(bytes.data(), bytes.size(), c.file + " item");
}

PickleValue object_of(const DcpChunk& c) {
  const std::string bytes = item(c);
  return read_object_item(bytes.data(), bytes.size(), c.file + " item");
}

std::string le(uint64_t v, int bytes) {
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

const std::string kMd = "torch.distributed.checkpoint.metadata";

// A chunk of tensor 'w' for fake_metadata, and its storage_data entry (none when `file` is empty).
struct FakeChunk {
  std::vector<int64_t> offsets, sizes;
  std::string file = "__0_0.distcp";
  int64_t offset = 0, length = 100;
  bool zstd = false;
};

// A `.metadata` of one tensor 'w' of `dtype` and `size` with these chunks.
std::string fake_metadata(const std::vector<int64_t>& size, const std::vector<FakeChunk>& chunks,
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

std::string metadata_error(const std::vector<int64_t>& size, const std::vector<FakeChunk>& chunks,
                           const std::string& dtype = "float32") {
  return error_of([&] { parse_dcp_metadata(fake_metadata(size, chunks, dtype), "ckpt/.metadata"); });
}

// zlib's CRC32, bit by bit (the test executables do not link zlib).
uint32_t crc32_of(const std::string& bytes) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char byte : bytes) {
    crc ^= byte;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

// A zip of STORED records, no zip64, no data descriptors: what Python's zipfile writes.
std::string stored_zip(const std::vector<std::pair<std::string, std::string>>& records) {
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
std::string tensor_pickle(const std::string& cls, int64_t numel, int64_t offset, const std::vector<int64_t>& size,
                          const std::vector<int64_t>& stride) {
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

std::string floats(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

std::string tensor_zip(const std::string& pickle, const std::string& storage) {
  return stored_zip({{"archive/data.pkl", pickle}, {"archive/data/0", storage}, {"archive/version", "3\n"}});
}

std::string item_error(const std::string& bytes) {
  return error_of([&] { read_tensor_item(bytes.data(), bytes.size(), "x.distcp item w"); });
}

std::string pickle_error(const std::string& bytes, const PickleLimits& limits = {}) {
  return error_of([&] { parse_pickle(bytes.data(), bytes.size(), "p", limits); });
}

}  // namespace

TEST(DcpReaderMetadata, RealCheckpointEntries) {
  const DcpMetadata md = read_dcp_metadata(tiny_dir());
  std::vector<std::string> fqns;
  for (const DcpEntry& e : md.entries) fqns.push_back(e.fqn);
  EXPECT_EQ(fqns.size(), 19u);
  EXPECT_TRUE(std::is_sorted(fqns.begin(), fqns.end()));
  const DcpEntry& w = entry(md, "model.0.weight");
  EXPECT_TRUE(w.tensor);
  EXPECT_EQ(w.dtype, c10::ScalarType::Float);
  EXPECT_EQ(w.size, (std::vector<int64_t>{3, 2}));
  ASSERT_EQ(w.chunks.size(), 2u);
  EXPECT_EQ(w.chunks[0].offsets, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(w.chunks[0].sizes, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(w.chunks[0].file, "__0_0.distcp");
  EXPECT_EQ(w.chunks[0].offset, 0);
  EXPECT_EQ(w.chunks[0].length, 1577);
  EXPECT_EQ(w.chunks[1].offsets, (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(w.chunks[1].sizes, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(w.chunks[1].file, "__1_0.distcp");
  const DcpEntry& step = entry(md, "optimizer.state.0.weight.step");
  EXPECT_TRUE(step.tensor);
  EXPECT_TRUE(step.size.empty());
  ASSERT_EQ(step.chunks.size(), 1u);
  EXPECT_TRUE(step.chunks[0].offsets.empty() && step.chunks[0].sizes.empty());
  EXPECT_EQ(entry(md, "extra.bf16").dtype, c10::ScalarType::BFloat16);
  EXPECT_EQ(entry(md, "extra.i64").dtype, c10::ScalarType::Long);
  const DcpEntry& lr = entry(md, "optimizer.param_groups.0.lr");
  EXPECT_FALSE(lr.tensor);
  ASSERT_EQ(lr.chunks.size(), 1u);
  EXPECT_EQ(lr.chunks[0].file, "__1_0.distcp");
  EXPECT_EQ(lr.chunks[0].length, 1261);
}

// The same Metadata pickled by Python at protocol 2 (GLOBAL, BINPUT, BINUNICODE, no frames) reads the same.
TEST(DcpReaderMetadata, Protocol2ReadsTheSame) {
  const DcpMetadata md = read_dcp_metadata(tiny_dir());
  const std::string path = tiny_dir() + "/../tiny_protocol2.metadata";
  const DcpMetadata again = parse_dcp_metadata(read_file(path), path);
  ASSERT_EQ(again.entries.size(), md.entries.size());
  for (size_t i = 0; i < md.entries.size(); ++i) {
    const DcpEntry &a = md.entries[i], &b = again.entries[i];
    EXPECT_TRUE(a.fqn == b.fqn && a.tensor == b.tensor && a.dtype == b.dtype && a.size == b.size) << a.fqn;
    ASSERT_EQ(a.chunks.size(), b.chunks.size()) << a.fqn;
    for (size_t j = 0; j < a.chunks.size(); ++j) {
      const DcpChunk &x = a.chunks[j], &y = b.chunks[j];
      EXPECT_TRUE(x.offsets == y.offsets && x.sizes == y.sizes && x.file == y.file && x.offset == y.offset &&
                  x.length == y.length)
          << a.fqn << " chunk " << j;
    }
  }
}

// Every item of the checkpoint reads: a tensor to its chunk's sizes and its entry's dtype.
TEST(DcpReaderMetadata, EveryItemReads) {
  const DcpMetadata md = read_dcp_metadata(tiny_dir());
  for (const DcpEntry& e : md.entries) {
    for (const DcpChunk& c : e.chunks) {
      if (!e.tensor) {
        object_of(c);
        continue;
      }
      const torch::Tensor t = tensor_of(c);
      EXPECT_EQ(t.sizes().vec(), c.sizes) << e.fqn;
      EXPECT_EQ(t.scalar_type(), e.dtype) << e.fqn;
      EXPECT_TRUE(t.is_contiguous()) << e.fqn;
    }
  }
}

TEST(DcpReaderItem, TensorValues) {
  const DcpMetadata md = read_dcp_metadata(tiny_dir());
  const torch::Tensor weight = torch::arange(6, torch::kFloat).reshape({3, 2});
  const DcpEntry& w = entry(md, "model.0.weight");
  EXPECT_TRUE(torch::equal(tensor_of(w.chunks[0]), weight.slice(0, 0, 2)));
  EXPECT_TRUE(torch::equal(tensor_of(w.chunks[1]), weight.slice(0, 2, 3)));
  const DcpEntry& exp_avg = entry(md, "optimizer.state.0.weight.exp_avg");
  EXPECT_TRUE(torch::equal(tensor_of(exp_avg.chunks[1]), (10 * weight + 1).slice(0, 2, 3)));
  // Saved with strides (1, 3): read in order, contiguous.
  EXPECT_TRUE(torch::equal(tensor_of(entry(md, "extra.transposed").chunks[0]),
                           torch::arange(6, torch::kFloat).reshape({2, 3}).t()));
  EXPECT_TRUE(torch::equal(tensor_of(entry(md, "extra.bf16").chunks[0]), torch::tensor({1.5, -2.0}, torch::kBFloat16)));
  EXPECT_TRUE(torch::equal(tensor_of(entry(md, "extra.i64").chunks[0]), torch::arange(3, torch::kLong) + 7));
  const torch::Tensor step = tensor_of(entry(md, "optimizer.state.0.weight.step").chunks[0]);
  EXPECT_EQ(step.dim(), 0);
  EXPECT_EQ(step.item<float>(), 1.0f);
}

TEST(DcpReaderItem, ObjectValues) {
  const DcpMetadata md = read_dcp_metadata(tiny_dir());
  const PickleValue lr = object_of(entry(md, "optimizer.param_groups.0.lr").chunks[0]);
  EXPECT_EQ(lr.kind, PickleKind::kFloat);
  EXPECT_EQ(lr.real, 0.001);
  EXPECT_EQ(describe(object_of(entry(md, "optimizer.param_groups.0.betas").chunks[0])), "(0.9, 0.999)");
  EXPECT_EQ(describe(object_of(entry(md, "optimizer.param_groups.0.params").chunks[0])), "['0.weight']");
  EXPECT_EQ(describe(object_of(entry(md, "optimizer.param_groups.0.amsgrad").chunks[0])), "False");
  EXPECT_EQ(describe(object_of(entry(md, "optimizer.param_groups.0.foreach").chunks[0])), "None");
}

// A view with a storage offset and strides (a Python zipfile archive: no zip64, no alignment).
TEST(DcpReaderItem, OffsetAndStridesHonoured) {
  const std::string zip = tensor_zip(tensor_pickle("FloatStorage", 6, 1, {2, 2}, {1, 2}), floats({0, 1, 2, 3, 4, 5}));
  const torch::Tensor t = read_tensor_item(zip.data(), zip.size(), "x");
  EXPECT_TRUE(torch::equal(t, torch::tensor({1.0f, 3.0f, 2.0f, 4.0f}).reshape({2, 2})));
  EXPECT_TRUE(t.is_contiguous());
}

TEST(DcpReaderPickle, HostilePickles) {
  EXPECT_EQ(pickle_error("\x80\x02\xff."), "p: pickle has opcode 0xff at byte 2, which cohort does not read");
  EXPECT_EQ(pickle_error("\x80\x02h\x05."),
            "p: pickle BINGET at byte 2 reads memo entry 5, which was never set (the memo holds 0 entries)");
  EXPECT_EQ(pickle_error("\x80\x02" + std::string(100000, ']') + std::string(99999, 'a') + "."),
            "p: pickle nests values deeper than 64 levels (APPEND at byte 100065)");
  EXPECT_EQ(pickle_error("\x80\x02" + std::string(100000, '(')),
            "p: pickle has more than 64 MARKs open (MARK at byte 66)");
  EXPECT_EQ(pickle_error(std::string("\x80\x02X\xff\xff\xff\x7f"
                                     "ab",
                                     9)),
            "p: pickle BINUNICODE at byte 2 gives a length of 2147483647 bytes, past the pickle's end (2 bytes left)");
  EXPECT_EQ(pickle_error("\x80\x02]"), "p: pickle is truncated: it ends at byte 3 without its STOP");
  EXPECT_EQ(pickle_error("\x80\x02J\x01"), "p: pickle is truncated: BININT at byte 2 needs 4 bytes, 1 left");
  EXPECT_EQ(pickle_error("\x80\x02"
                         "a."),
            "p: pickle APPEND at byte 2 needs a value on the stack, finds none (a damaged file?)");
  EXPECT_EQ(pickle_error("\x80\x02K\x01t."), "p: pickle TUPLE at byte 4 has no MARK before it");
  EXPECT_EQ(pickle_error(std::string("\x80\x02]q\x00h\x00"
                                     "a.",
                                     9)),
            "p: pickle APPEND at byte 7 changes a list already inside another value (a recursive structure, which "
            "cohort does not read)");
  EXPECT_EQ(pickle_error("\x80\x02\x8a\x09" + std::string(9, '\x01') + "."),
            "p: pickle LONG1 at byte 2 holds an int of 9 bytes, beyond int64");
  EXPECT_EQ(pickle_error("\x80\x02N.xx"), "p: pickle is followed by 2 bytes after its STOP at byte 3");
  EXPECT_EQ(pickle_error("\x80\x02NN."),
            "p: pickle STOP at byte 4 leaves 2 values on the stack and 0 MARKs open, not one value");
  std::string many = "\x80\x02(";
  for (int i = 0; i < 11; ++i) many += "K\x01";
  EXPECT_EQ(pickle_error(many + "t.", PickleLimits{64, 10}),
            "p: pickle holds more than 10 values and memo entries (BININT1 at byte 23)");
}

TEST(DcpReaderPickle, ValuesAndSharing) {
  // LONG1 of -1 in 9 bytes (sign extension) fits int64; a memo entry shared by two parents.
  const std::string bytes = "\x80\x02\x8a\x09" + std::string(9, '\xff') + std::string("q\x00h\x00\x86.", 6);
  const PickleRef v = parse_pickle(bytes.data(), bytes.size(), "p");
  EXPECT_EQ(describe(*v), "(-1, -1)");
  EXPECT_EQ(v->items[0].get(), v->items[1].get());
}

TEST(DcpReaderMetadata, TruncatedOrMissing) {
  const std::string real = read_file(tiny_dir() + "/.metadata");
  EXPECT_EQ(error_of([&] { parse_dcp_metadata(real.substr(0, 2000), "tiny/.metadata"); }),
            "tiny/.metadata: pickle FRAME at byte 2 announces 4827 bytes, past the pickle's end (1989 bytes left)");
  EXPECT_EQ(error_of([] { read_dcp_metadata("/nonexistent/ckpt"); }),
            "/nonexistent/ckpt/.metadata: cannot open: No such file or directory");
  const std::string just_int = "\x80\x02K\x07.";
  EXPECT_EQ(error_of([&] { parse_dcp_metadata(just_int, "m"); }),
            "m: not a DCP checkpoint's metadata: its pickle holds 7, not a "
            "torch.distributed.checkpoint.metadata.Metadata");
}

TEST(DcpReaderMetadata, HostileMetadata) {
  const FakeChunk whole = chunk({0, 0}, {3, 2});
  EXPECT_NO_THROW(parse_dcp_metadata(fake_metadata({3, 2}, {whole}), "m"));
  for (const char* path : {"../x", "..", "a/b", ""}) {
    FakeChunk c = whole;
    c.file = path;
    if (c.file.empty()) continue;  // an empty file: no storage_data entry (below)
    EXPECT_EQ(metadata_error({3, 2}, {c}),
              std::string("ckpt/.metadata: storage_data for 'w' [0, 0] has relative_path '") + path +
                  "': not a file name in the checkpoint's directory");
  }
  FakeChunk unstored = whole;
  unstored.file = "";
  EXPECT_EQ(metadata_error({3, 2}, {unstored}),
            "ckpt/.metadata: tensor 'w' chunk 0 (offsets [0, 0]) has no storage_data entry (where its item lies)");
  EXPECT_EQ(metadata_error({3, 2}, {chunk({2, 0}, {2, 2})}),
            "ckpt/.metadata: tensor 'w' chunk 0 (offsets [2, 0], sizes [2, 2]) lies outside its size [3, 2]");
  EXPECT_EQ(metadata_error({3, 2}, {chunk({INT64_MAX, 0}, {2, 2})}),
            "ckpt/.metadata: tensor 'w' chunk 0 (offsets [9223372036854775807, 0], sizes [2, 2]) lies outside its "
            "size [3, 2]");
  EXPECT_EQ(metadata_error({3, 2}, {chunk({0, 0}, {2, 2}), chunk({1, 0}, {2, 2}, "__1_0.distcp")}),
            "ckpt/.metadata: tensor 'w' has chunks 0 (offsets [0, 0], sizes [2, 2]) and 1 (offsets [1, 0], sizes [2, "
            "2]) that overlap");
  EXPECT_EQ(metadata_error({3, 2}, {chunk({0}, {3})}),
            "ckpt/.metadata: tensor 'w' chunk 0 (offsets [0], sizes [3]) does not have the rank of its size [3, 2]");
  EXPECT_EQ(metadata_error({3, 2}, {whole}, "complex64"),
            "ckpt/.metadata: tensor 'w' has dtype torch.complex64, which cohort does not read (it reads float32, "
            "float16, bfloat16, float64, int64, int32, int16, int8, uint8, bool)");
  FakeChunk zstd = whole;
  zstd.zstd = true;
  EXPECT_EQ(metadata_error({3, 2}, {zstd}),
            "ckpt/.metadata: storage_data for 'w' [0, 0] has transform_descriptors ['stream.zstd/1']: compressed "
            "items (stream.zstd) are not supported");
  FakeChunk negative = whole;
  negative.offset = -1;
  EXPECT_EQ(metadata_error({3, 2}, {negative}),
            "ckpt/.metadata: storage_data for 'w' [0, 0] has the byte range offset -1 length 100, not one a file can "
            "hold");
  // Empty shards of several ranks share one key (PyTorch's dict keeps one); a chunk with elements may not.
  const FakeChunk empty = chunk({3, 0}, {0, 2});
  EXPECT_NO_THROW(parse_dcp_metadata(fake_metadata({3, 2}, {whole, empty, empty}), "m"));
  EXPECT_EQ(metadata_error({3, 2}, {whole, whole}),
            "ckpt/.metadata: tensor 'w' chunk 0 (offsets [0, 0]) has two storage_data entries: which item holds it?");
}

TEST(DcpReaderItem, HostileItems) {
  const DcpMetadata md = read_dcp_metadata(tiny_dir());
  const std::string real = item(entry(md, "model.0.weight").chunks[0]);
  const size_t local = real.find("archive/data/0"), central = real.rfind("archive/data/0");
  auto changed = [&](size_t at, const std::string& bytes) {
    std::string out = real;
    out.replace(at, bytes.size(), bytes);
    return out;
  };
  EXPECT_EQ(item_error(changed(central - 46 + 20, le(32767, 4) + le(32767, 4))),
            "x.distcp item w: zip record 'archive/data/0' (32767 bytes at byte 704) runs past the end of the "
            "archive's 1577 bytes");
  const size_t data = local + 14 + uint8_t(real[local - 2]) + 256 * uint8_t(real[local - 1]);
  EXPECT_EQ(item_error(changed(data, std::string(1, char(real[data] ^ 1)))),
            "x.distcp item w: zip record 'archive/data/0' fails its CRC32 check (stored 0x25601b8b, computed "
            "0x8b088a1a): the item is damaged");
  EXPECT_EQ(item_error(changed(central - 46 + 10, le(8, 2))),
            "x.distcp item w: zip record 'archive/data/0' is compressed (method 8): cohort reads STORED records only");
  EXPECT_EQ(item_error(real.substr(0, 1000)),
            "x.distcp item w: not a zip archive: no end of central directory record in its 1000 bytes");
  EXPECT_EQ(item_error(tensor_zip(tensor_pickle("FloatStorage", 4, 0, {2, 2}, {3, 1}), floats({1, 2, 3, 4}))),
            "x.distcp item w: data.pkl's tensor of size [2, 2] and stride [3, 1] at offset 0 addresses elements past "
            "its storage of 4");
  EXPECT_EQ(item_error(tensor_zip(tensor_pickle("FloatStorage", 4, 2, {3}, {1}), floats({1, 2, 3, 4}))),
            "x.distcp item w: data.pkl's tensor of size [3] and stride [1] at offset 2 addresses elements past its "
            "storage of 4");
  EXPECT_EQ(item_error(tensor_zip(tensor_pickle("FloatStorage", 1, 0, {1 << 30, 1 << 30}, {0, 0}), floats({1}))),
            "x.distcp item w: data.pkl's tensor of size [1073741824, 1073741824] has more elements than its storage "
            "of 1 (an expanded view, which DCP never saves)");
  EXPECT_EQ(item_error(tensor_zip(tensor_pickle("FloatStorage", 3, 0, {3}, {1}), floats({1, 2}))),
            "x.distcp item w: record data/0 has 8 bytes for a storage of 3 Float elements");
  EXPECT_EQ(item_error(tensor_zip(tensor_pickle("ComplexFloatStorage", 1, 0, {1}, {1}), floats({1, 2}))),
            "x.distcp item w: data.pkl names storage class torch.ComplexFloatStorage, which cohort does not read");
  EXPECT_EQ(item_error(tensor_zip(tensor_pickle("BoolStorage", 2, 0, {2}, {1}), "\x01\x02")),
            "x.distcp item w: its bool storage holds a byte other than 0 and 1");
  EXPECT_EQ(item_error(stored_zip({{"data.pkl", "\x80\x02N."}})),
            "x.distcp item w: zip record 'data.pkl' is not under a top-level folder, as torch.save puts them");
}

}  // namespace dcp_reader_test
