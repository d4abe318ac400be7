#include "checkpoint/dcp/metadata_writer.h"

#include <algorithm>

#include "checkpoint/dcp/pickle_writer.h"
#include "cohort/error.h"

namespace cohort::detail::dcp {

namespace {

constexpr const char* kMetadata = "torch.distributed.checkpoint.metadata";

// torch.float32 and the like: the dtype object, as torch pickles it.
const char* pickled_dtype_name(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float: return "float32";
    case c10::ScalarType::Double: return "float64";
    case c10::ScalarType::Half: return "float16";
    case c10::ScalarType::BFloat16: return "bfloat16";
    case c10::ScalarType::Long: return "int64";
    case c10::ScalarType::Int: return "int32";
    case c10::ScalarType::Short: return "int16";
    case c10::ScalarType::Char: return "int8";
    case c10::ScalarType::Byte: return "uint8";
    case c10::ScalarType::Bool: return "bool";
    default: break;
  }
  COHORT_CHECK_KIND(kInvalidArgument, false, "a DCP checkpoint cannot hold a tensor of dtype ", c10::toString(dtype));
  return nullptr;
}

// TensorProperties, whose state is the tuple (dtype, layout, requires_grad, memory format, pin_memory).
void tensor_properties(PickleWriter& p, c10::ScalarType dtype) {
  p.instance(kMetadata, "TensorProperties");
  p.mark();
  p.global("torch", pickled_dtype_name(dtype));
  p.global("torch.serialization", "_get_layout");
  p.mark();
  p.text("torch.strided");
  p.tuple();
  p.reduce();
  p.boolean(false);
  p.global(kMetadata, "_MEM_FORMAT_ENCODING");
  p.mark();
  p.integer(0);  // torch.contiguous_format
  p.tuple();
  p.reduce();
  p.boolean(false);
  p.tuple();
  p.build();
}

void tensor_storage(PickleWriter& p, const DcpEntry& e) {
  p.instance(kMetadata, "TensorStorageMetadata");
  p.empty_dict();
  p.text("properties");
  tensor_properties(p, e.dtype);
  p.set_item();
  p.text("size");
  p.torch_size(e.size);
  p.set_item();
  p.text("chunks");
  p.empty_list();
  for (const DcpChunk& c : e.chunks) {
    p.instance(kMetadata, "ChunkStorageMetadata");
    p.empty_dict();
    p.text("offsets");
    p.torch_size(c.offsets);
    p.set_item();
    p.text("sizes");
    p.torch_size(c.sizes);
    p.set_item();
    p.build();
    p.append();
  }
  p.set_item();
  p.build();
}

void state_dict_metadata(PickleWriter& p, const std::vector<PlannedEntry>& entries) {
  p.empty_dict();
  for (const PlannedEntry& planned : entries) {
    p.text(planned.entry.fqn);
    if (planned.entry.tensor) tensor_storage(p, planned.entry);
    else p.instance(kMetadata, "BytesStorageMetadata");  // no fields: no BUILD
    p.set_item();
  }
}

void planner_data(PickleWriter& p, const std::vector<PlannedEntry>& entries) {
  p.empty_dict();
  for (const PlannedEntry& planned : entries) {
    p.text(planned.entry.fqn);
    p.mark();
    for (const std::string& part : planned.path) {
      const bool index = !part.empty() &&
                         std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (index) p.integer(std::stoll(part));
      else p.text(part);
    }
    p.tuple();
    p.set_item();
  }
}

// MetadataIndex(fqn, offsets, index) -> _StorageInfo(relative_path, offset, length) for every chunk;
// an object's key has no offset.
void storage_data(PickleWriter& p, const std::vector<PlannedEntry>& entries) {
  p.empty_dict();
  for (const PlannedEntry& planned : entries) {
    const DcpEntry& e = planned.entry;
    for (size_t i = 0; i < e.chunks.size(); ++i) {
      const DcpChunk& c = e.chunks[i];
      p.instance(kMetadata, "MetadataIndex");
      p.empty_dict();
      p.text("fqn");
      p.text(e.fqn);
      p.set_item();
      if (e.tensor) {
        p.text("offset");
        p.torch_size(c.offsets);
        p.set_item();
      }
      p.text("index");
      if (e.tensor) p.integer(static_cast<int64_t>(i));
      else p.none();
      p.set_item();
      p.build();
      p.instance("torch.distributed.checkpoint.filesystem", "_StorageInfo");
      p.empty_dict();
      p.text("relative_path");
      p.text(c.file);
      p.set_item();
      p.text("offset");
      p.integer(c.offset);
      p.set_item();
      p.text("length");
      p.integer(c.length);
      p.set_item();
      p.build();
      p.set_item();
    }
  }
}

}  // namespace

std::string metadata_pickle(const std::vector<PlannedEntry>& entries) {
  PickleWriter p;
  p.instance(kMetadata, "Metadata");
  p.empty_dict();
  p.text("state_dict_metadata");
  state_dict_metadata(p, entries);
  p.set_item();
  p.text("planner_data");
  planner_data(p, entries);
  p.set_item();
  p.text("storage_data");
  storage_data(p, entries);
  p.set_item();
  p.text("storage_meta");
  p.none();
  p.set_item();
  p.text("version");
  p.text("1.0.0");  // filesystem.CURRENT_DCP_VERSION of PyTorch 2.11
  p.set_item();
  p.build();
  return p.finish();
}

}  // namespace cohort::detail::dcp
