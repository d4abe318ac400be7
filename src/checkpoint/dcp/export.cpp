#include "checkpoint/dcp/export.h"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "checkpoint/dcp/distcp_writer.h"
#include "checkpoint/dcp/export_plan.h"
#include "checkpoint/dcp/metadata_writer.h"
#include "checkpoint/files.h"
#include "checkpoint/inspect.h"
#include "checkpoint/manifest.h"
#include "checkpoint/piece_stream.h"
#include "cohort/error.h"
#include "core/check.h"
#include "core/safe_file.h"

namespace fs = std::filesystem;

namespace cohort::detail::dcp {

namespace {

using ckpt::Manifest;
using ckpt::TensorRecord;

constexpr const char* kDataFile = "__0_0.distcp";

// The rows of `shape` in each item: whole rows, at most max_item_bytes an item (a 0-d tensor: one).
std::vector<int64_t> rows_per_item(const TensorRecord& r, const ExportOptions& options) {
  if (r.shape.empty()) return {1};
  int64_t row = c10::elementSize(r.dtype);
  for (size_t d = 1; d < r.shape.size(); ++d) row *= r.shape[d];
  const int64_t per_item = row == 0 ? std::max<int64_t>(r.shape[0], 1)
                                    : std::max<int64_t>(options.max_item_bytes / row, 1);
  COHORT_CHECK_KIND(kInvalidArgument, row < (int64_t(1) << 32) - 4096, "a row of '", r.name, "' is ", row,
                    " bytes, over the 4 GiB of an item");
  std::vector<int64_t> rows;
  for (int64_t done = 0; done < r.shape[0] || rows.empty(); done += per_item)
    rows.push_back(std::min(per_item, r.shape[0] - done));
  return rows;
}

}  // namespace

namespace {

// Streams a saved tensor's pieces into items of whole rows (rows_per_item), one chunk each.
DcpEntry write_tensor(const Source& s, ckpt::PieceFiles& files, DistcpWriter& out, const ExportOptions& options,
                      std::vector<char>& buffer) {
  const TensorRecord& r = *s.record;
  DcpEntry e{s.key, true, r.dtype, r.shape, {}};
  const std::vector<int64_t> rows = rows_per_item(r, options);
  int64_t row_bytes = c10::elementSize(r.dtype);
  for (size_t d = 1; d < r.shape.size(); ++d) row_bytes *= r.shape[d];
  size_t next = 0;  // the next item to open
  bool open = false;
  int64_t left = 0, first_row = 0;  // bytes the open item still takes; its first row
  auto close = [&] {
    const ItemRange range = out.end_tensor_item();
    e.chunks.back().offset = range.offset;
    e.chunks.back().length = range.length;
    open = false;
  };
  auto advance = [&] {  // the open item is full: close it, open the next (closing empty ones at once)
    if (open) close();
    for (; next < rows.size(); ++next) {
      std::vector<int64_t> offsets(r.shape.size(), 0), sizes = r.shape;
      if (!r.shape.empty()) {
        offsets[0] = first_row;
        sizes[0] = rows[next];
        first_row += rows[next];
      }
      e.chunks.push_back({offsets, sizes, kDataFile, 0, 0});
      out.begin_tensor_item(r.dtype, sizes);
      open = true;
      left = r.shape.empty() ? c10::elementSize(r.dtype) : rows[next] * row_bytes;
      if (left > 0) {
        ++next;
        return;
      }
      close();
    }
  };
  advance();
  for (const ckpt::Piece& p : ckpt::ordered_pieces(r)) {
    const std::string mismatch = ckpt::stream_piece(files, p, r.name, buffer, [&](const char* data, int64_t n) {
      while (n > 0) {
        COHORT_CHECK_KIND(kIO, open, "the pieces of '", r.name, "' hold more than the ",
                          c10::multiply_integers(r.shape), " elements of its shape ", c10::IntArrayRef(r.shape));
        const int64_t take = std::min(n, left);
        out.tensor_bytes(data, take);
        data += take;
        n -= take;
        left -= take;
        if (left == 0) advance();
      }
    });
    if (!mismatch.empty()) throw Error(mismatch, ErrorKind::kIO);
  }
  COHORT_CHECK_KIND(kIO, !open && next == rows.size(), "the pieces of '", r.name, "' hold less than the ",
                    c10::multiply_integers(r.shape), " elements of its shape ", c10::IntArrayRef(r.shape));
  return e;
}

// A 0-d float32 tensor (an optimizer's step count), as PyTorch's Adam keeps it.
DcpEntry write_step(const Source& s, DistcpWriter& out) {
  out.begin_tensor_item(c10::ScalarType::Float, {});
  const float value = *s.step;
  out.tensor_bytes(reinterpret_cast<const char*>(&value), sizeof(value));
  const ItemRange range = out.end_tensor_item();
  return {s.key, true, c10::ScalarType::Float, {}, {{{}, {}, kDataFile, range.offset, range.length}}};
}

void check_output(const std::string& step_dir, const std::string& out_dir) {
  ckpt::check_output_outside(step_dir, out_dir);
  std::error_code error;
  const bool exists = fs::exists(fs::symlink_status(out_dir, error));
  COHORT_CHECK_KIND(kInvalidArgument,
                    !exists || (fs::is_directory(fs::symlink_status(out_dir)) && fs::is_empty(out_dir, error)),
                    "the output ", out_dir, " exists and is not an empty directory: name a new one");
}

}  // namespace

ExportSummary export_dcp(const std::string& step_dir, const std::string& out_dir, const ExportOptions& options) {
  check_output(step_dir, out_dir);
  const Manifest m = ckpt::read_manifest(step_dir + "/manifest.json");
  const ExportPlan plan = plan_export(m, options);
  std::error_code error;
  const bool made = fs::create_directories(out_dir, error);
  COHORT_CHECK_KIND(kIO, !error, "cannot create ", out_dir, ": ", error.message());
  ExportSummary summary;
  summary.skipped = plan.skipped;
  try {
    std::vector<PlannedEntry> entries;
    DistcpWriter out(out_dir + "/" + kDataFile);
    ckpt::PieceFiles files(step_dir, m);
    std::vector<char> buffer(ckpt::kPieceChunk);
    for (const Source& s : plan.sources) {  // objects first, as PyTorch writes them
      if (s.record != nullptr || s.step) continue;
      const ItemRange range = out.object_item(s.pickle);
      entries.push_back(
          {{s.key, false, c10::ScalarType::Float, {}, {{{}, {}, kDataFile, range.offset, range.length}}}, s.path});
      ++summary.objects;
    }
    for (const Source& s : plan.sources) {
      if (s.record == nullptr && !s.step) continue;
      entries.push_back({s.step ? write_step(s, out) : write_tensor(s, files, out, options, buffer), s.path});
      ++summary.tensors;
    }
    out.commit();
    write_file_safely(out_dir + "/.metadata", metadata_pickle(entries));  // last: its presence says complete
  } catch (...) {
    fs::remove(out_dir + "/" + kDataFile, error);
    if (made) fs::remove(out_dir, error);
    throw;
  }
  return summary;
}

}  // namespace cohort::detail::dcp
