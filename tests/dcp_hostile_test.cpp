// Hostile inputs to cohort's reader of PyTorch's torch.distributed.checkpoint (DCP) format
// (src/checkpoint/dcp/): pickles, `.metadata` files and torch.save items built by hand
// (tests/support/dcp_builders.h) or real ones of tests/data/dcp/tiny/ with bytes changed or cut,
// each refused with its message. The real checkpoint's values are dcp_reader_test.cpp's.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/dcp/metadata.h"
#include "checkpoint/dcp/pickle_reader.h"
#include "checkpoint/dcp/torch_save_item.h"
#include "support/dcp_builders.h"
#include "support/errors.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace dcp_hostile_test {

using namespace cohort::detail::dcp;
using namespace cohort::testing::dcp;
using cohort::testing::error_of;

TEST(DcpHostilePickle, HostilePickles) {
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

TEST(DcpHostileMetadata, TruncatedOrMissing) {
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

TEST(DcpHostileMetadata, HostileMetadata) {
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

TEST(DcpHostileItem, HostileItems) {
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

}  // namespace dcp_hostile_test
