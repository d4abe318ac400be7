// Tests of cohort's reader of PyTorch's torch.distributed.checkpoint (DCP) format (src/checkpoint/dcp/):
// a real 2-rank FSDP2 nn.Linear(2, 3) + AdamW checkpoint written by PyTorch 2.11 (tests/data/dcp/tiny/,
// made by tests/python/dcp_fixtures.py, whose docstring says what it holds) read to the values set
// there, a hand-built item with a storage offset and strides, and a pickle's values and sharing. The
// hostile inputs are dcp_hostile_test.cpp's; the builders, tests/support/dcp_builders.h.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/dcp/metadata.h"
#include "checkpoint/dcp/pickle_reader.h"
#include "checkpoint/dcp/torch_save_item.h"
#include "support/dcp_builders.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace dcp_reader_test {

using namespace cohort::detail::dcp;
using namespace cohort::testing::dcp;

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

TEST(DcpReaderPickle, ValuesAndSharing) {
  // LONG1 of -1 in 9 bytes (sign extension) fits int64; a memo entry shared by two parents.
  const std::string bytes = "\x80\x02\x8a\x09" + std::string(9, '\xff') + std::string("q\x00h\x00\x86.", 6);
  const PickleRef v = parse_pickle(bytes.data(), bytes.size(), "p");
  EXPECT_EQ(describe(*v), "(-1, -1)");
  EXPECT_EQ(v->items[0].get(), v->items[1].get());
}

}  // namespace dcp_reader_test
