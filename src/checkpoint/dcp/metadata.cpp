// Reading a DCP `.metadata` (metadata.h): the pickle's value tree (pickle_reader.h) interpreted as the
// dataclasses PyTorch pickles (NEWOBJ, then BUILD with the __dict__; TensorProperties's state is a
// tuple). Only the classes of what is read are checked; anything else (planner_data, storage_meta's
// pathlib.PosixPath, version, fields a later PyTorch adds) is left alone.
#include "checkpoint/dcp/metadata.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "checkpoint/dcp/metadata_chunks.h"
#include "checkpoint/dcp/pickle_reader.h"
#include "core/check.h"
#include "core/file_read.h"
#include "core/text.h"

namespace cohort::detail::dcp {

namespace {
// A name of its own: the checkpoint layer compiles in unity batches, which share anonymous namespaces.
namespace metadata_reading {

const std::string kMetadataModule = "torch.distributed.checkpoint.metadata";
constexpr int64_t kMaxMetadataBytes = int64_t(256) << 20;

// A storage_data key: MetadataIndex's (fqn, offset), where an object's key has no offset.
using StorageKey = std::tuple<std::string, bool, std::vector<int64_t>>;

// Where a key's item lies. A key may be given twice: PyTorch's dict keeps the last, and a writer that
// records each rank's empty shard of a tensor (all at one offset) gives that key once per rank.
struct StorageItem {
  DcpChunk chunk;  // file, offset and length
  bool repeated = false;
};

class MetadataParser {
 public:
  explicit MetadataParser(const std::string& path) : path_(path) {}
  DcpMetadata parse(const PickleValue& root);

 private:
  [[noreturn]] void fail(const std::string& message) const { throw Error(path_ + ": " + message, ErrorKind::kIO); }
  const PickleValue& state(const PickleValue& object, const std::string& module, const std::string& cls,
                           const std::string& where) const;
  const PickleValue& require(const PickleValue& state, const std::string& key, const std::string& where) const;
  int64_t integer(const PickleValue& value, const std::string& where) const;
  std::string text(const PickleValue& value, const std::string& where) const;
  std::vector<int64_t> dims(const PickleValue& value, const std::string& where) const;
  c10::ScalarType dtype(const PickleValue& properties, const std::string& where) const;

  void read_storage_data(const PickleValue* storage_data);
  DcpChunk storage_info(const PickleValue& info, const std::string& where) const;
  DcpEntry entry(const std::string& fqn, const PickleValue& value) const;
  DcpChunk chunk_item(const StorageKey& key, bool elements, const std::string& where) const;

  const std::string& path_;
  std::map<StorageKey, StorageItem> storage_;
};

// The state dict of `object`, an instance of module.cls made by NEWOBJ (or REDUCE) with BUILD's state;
// an empty dict when there was no BUILD (BytesStorageMetadata has no fields).
const PickleValue& MetadataParser::state(const PickleValue& object, const std::string& module, const std::string& cls,
                                         const std::string& where) const {
  static const PickleValue kNoFields = [] {
    PickleValue v;
    v.kind = PickleKind::kDict;
    return v;
  }();
  if (object.kind != PickleKind::kObject || !object.callable().is_global(module, cls))
    fail(str(where, " is ", describe(object, 100), ", not a ", module, ".", cls));
  const PickleValue* s = object.state();
  if (s == nullptr) return kNoFields;
  if (s->kind != PickleKind::kDict) fail(str(where, ": the ", cls, "'s state is ", describe(*s, 100), ", not a dict"));
  return *s;
}

const PickleValue& MetadataParser::require(const PickleValue& state, const std::string& key,
                                           const std::string& where) const {
  const PickleValue* value = state.field(key);
  if (value == nullptr) fail(str(where, " has no '", key, "'"));
  return *value;
}

int64_t MetadataParser::integer(const PickleValue& value, const std::string& where) const {
  if (value.kind != PickleKind::kInt) fail(str(where, " is ", describe(value, 100), ", not an int"));
  return value.integer;
}

std::string MetadataParser::text(const PickleValue& value, const std::string& where) const {
  if (value.kind != PickleKind::kString) fail(str(where, " is ", describe(value, 100), ", not a str"));
  return value.text;
}

// A torch.Size (torch.Size((3, 2)) by REDUCE) or a plain tuple, which torch.Size equals.
std::vector<int64_t> MetadataParser::dims(const PickleValue& value, const std::string& where) const {
  const PickleValue* tuple = &value;
  if (value.kind == PickleKind::kObject && value.callable().is_global("torch", "Size") &&
      value.args().items.size() == 1 && value.state() == nullptr)
    tuple = value.args().items[0].get();
  if (tuple->kind != PickleKind::kTuple && tuple->kind != PickleKind::kList)
    fail(str(where, " is ", describe(value, 100), ", not a torch.Size"));
  std::vector<int64_t> out;
  for (const PickleRef& item : tuple->items) out.push_back(integer(*item, where));
  return out;
}

// TensorProperties's dtype: its state is the tuple (dtype, layout, requires_grad, memory_format,
// pin_memory) (its __getstate__), or a dict from a PyTorch that pickled its __dict__.
c10::ScalarType MetadataParser::dtype(const PickleValue& properties, const std::string& where) const {
  static const std::map<std::string, c10::ScalarType> kTypes = {
      {"float32", c10::ScalarType::Float},  {"float16", c10::ScalarType::Half}, {"bfloat16", c10::ScalarType::BFloat16},
      {"float64", c10::ScalarType::Double}, {"int64", c10::ScalarType::Long},   {"int32", c10::ScalarType::Int},
      {"int16", c10::ScalarType::Short},    {"int8", c10::ScalarType::Char},    {"uint8", c10::ScalarType::Byte},
      {"bool", c10::ScalarType::Bool}};
  const std::string at = where + "'s properties";
  if (properties.kind != PickleKind::kObject || !properties.callable().is_global(kMetadataModule, "TensorProperties"))
    fail(str(at, " are ", describe(properties, 100), ", not a TensorProperties"));
  const PickleValue* s = properties.state();
  const PickleValue* type = nullptr;
  if (s != nullptr && s->kind == PickleKind::kTuple && !s->items.empty()) type = s->items[0].get();
  if (s != nullptr && s->kind == PickleKind::kDict) type = s->field("dtype");
  if (type == nullptr) fail(str(at, " have no dtype"));
  const auto it = type->kind == PickleKind::kGlobal && type->text == "torch" ? kTypes.find(type->name) : kTypes.end();
  if (it == kTypes.end())
    fail(str(where, " has dtype ", describe(*type, 100),
             ", which cohort does not read (it reads float32, float16, bfloat16, float64, int64, int32, int16, int8, "
             "uint8, bool)"));
  return it->second;
}

// A _StorageInfo: the item's file, a plain name (a hostile path cannot lead out of the directory), and
// its byte range; an item piped through a stream transform (zstd) is not a torch.save archive.
DcpChunk MetadataParser::storage_info(const PickleValue& info, const std::string& where) const {
  const PickleValue& s = state(info, "torch.distributed.checkpoint.filesystem", "_StorageInfo", where);
  DcpChunk c;
  c.file = text(require(s, "relative_path", where), where + "'s relative_path");
  if (c.file.empty() || c.file == "." || c.file == ".." ||
      c.file.find_first_of(std::string("/\0", 2)) != std::string::npos)
    fail(str(where, " has relative_path '", excerpt(c.file), "': not a file name in the checkpoint's directory"));
  c.offset = integer(require(s, "offset", where), where + "'s offset");
  c.length = integer(require(s, "length", where), where + "'s length");
  if (c.offset < 0 || c.length < 0 || c.length > INT64_MAX - c.offset)
    fail(str(where, " has the byte range offset ", c.offset, " length ", c.length, ", not one a file can hold"));
  const PickleValue* transforms = s.field("transform_descriptors");
  if (transforms != nullptr && transforms->kind != PickleKind::kNone &&
      !(transforms->kind == PickleKind::kList && transforms->items.empty()))
    fail(str(where, " has transform_descriptors ", describe(*transforms, 100),
             ": compressed items (stream.zstd) are not supported"));
  return c;
}

// storage_data: MetadataIndex(fqn, offset) -> _StorageInfo, one key at most per chunk.
void MetadataParser::read_storage_data(const PickleValue* storage_data) {
  if (storage_data == nullptr || storage_data->kind == PickleKind::kNone) return;  // then every lookup fails
  if (storage_data->kind != PickleKind::kDict)
    fail(str("storage_data is ", describe(*storage_data, 100), ", not a dict"));
  for (const auto& [key, value] : storage_data->entries) {
    const PickleValue& s = state(*key, kMetadataModule, "MetadataIndex", "a key of storage_data");
    const std::string fqn = text(require(s, "fqn", "a key of storage_data"), "a key's fqn in storage_data");
    const PickleValue* offset = s.field("offset");
    const bool tensor = offset != nullptr && offset->kind != PickleKind::kNone;
    const std::vector<int64_t> offsets = tensor ? dims(*offset, "the offset of storage_data key '" + excerpt(fqn) + "'")
                                                : std::vector<int64_t>();
    const std::string where = str("storage_data for '", excerpt(fqn), "'", tensor ? " " + shape_text(offsets) : "");
    StorageItem& item = storage_[StorageKey(fqn, tensor, offsets)];
    item.repeated = !item.chunk.file.empty();
    item.chunk = storage_info(*value, where);  // the last wins, as in Python's dict
  }
}

// The item of a chunk (of `elements` or none): a key given twice is two items for one chunk, which
// only an empty chunk may have (it is never read).
DcpChunk MetadataParser::chunk_item(const StorageKey& key, bool elements, const std::string& where) const {
  const auto it = storage_.find(key);
  if (it == storage_.end()) fail(str(where, " has no storage_data entry (where its item lies)"));
  if (it->second.repeated && elements) fail(str(where, " has two storage_data entries: which item holds it?"));
  return it->second.chunk;
}

DcpEntry MetadataParser::entry(const std::string& fqn, const PickleValue& value) const {
  DcpEntry e;
  e.fqn = fqn;
  const std::string where = "'" + excerpt(fqn) + "'";
  if (value.kind == PickleKind::kObject && value.callable().is_global(kMetadataModule, "BytesStorageMetadata")) {
    e.chunks.push_back(chunk_item(StorageKey(fqn, false, {}), true, "object " + where));
    return e;
  }
  const std::string tensor = "tensor " + where;
  const PickleValue& s = state(value, kMetadataModule, "TensorStorageMetadata", where + " in state_dict_metadata");
  e.tensor = true;
  e.dtype = dtype(require(s, "properties", tensor), tensor);
  e.size = dims(require(s, "size", tensor), tensor + "'s size");
  const PickleValue& chunks = require(s, "chunks", tensor);
  if (chunks.kind != PickleKind::kList && chunks.kind != PickleKind::kTuple)
    fail(str(tensor, "'s chunks are ", describe(chunks, 100), ", not a list"));
  for (size_t i = 0; i < chunks.items.size(); ++i) {
    const std::string at = str(tensor, " chunk ", i);
    const PickleValue& cs = state(*chunks.items[i], kMetadataModule, "ChunkStorageMetadata", at);
    std::vector<int64_t> offsets = dims(require(cs, "offsets", at), at + "'s offsets");
    std::vector<int64_t> sizes = dims(require(cs, "sizes", at), at + "'s sizes");
    const bool elements = std::all_of(sizes.begin(), sizes.end(), [](int64_t n) { return n > 0; });
    DcpChunk c = chunk_item(StorageKey(fqn, true, offsets), elements, str(at, " (offsets ", shape_text(offsets), ")"));
    c.offsets = std::move(offsets);
    c.sizes = std::move(sizes);
    e.chunks.push_back(std::move(c));
  }
  check_chunks(e, path_);
  return e;
}

DcpMetadata MetadataParser::parse(const PickleValue& root) {
  if (root.kind != PickleKind::kObject || !root.callable().is_global(kMetadataModule, "Metadata"))
    fail(str("not a DCP checkpoint's metadata: its pickle holds ", describe(root, 100), ", not a ", kMetadataModule,
             ".Metadata"));
  const PickleValue& s = state(root, kMetadataModule, "Metadata", "the metadata");
  read_storage_data(s.field("storage_data"));
  const PickleValue& keys = require(s, "state_dict_metadata", "the metadata");
  if (keys.kind != PickleKind::kDict) fail(str("state_dict_metadata is ", describe(keys, 100), ", not a dict"));
  DcpMetadata md;
  for (const auto& [key, value] : keys.entries)
    md.entries.push_back(entry(text(*key, "a key of state_dict_metadata"), *value));
  std::sort(md.entries.begin(), md.entries.end(), [](const DcpEntry& a, const DcpEntry& b) { return a.fqn < b.fqn; });
  for (size_t i = 1; i < md.entries.size(); ++i) {
    if (md.entries[i].fqn == md.entries[i - 1].fqn)
      fail(str("state_dict_metadata names '", excerpt(md.entries[i].fqn), "' twice"));
  }
  return md;
}

}  // namespace metadata_reading
}  // namespace

DcpMetadata parse_dcp_metadata(const std::string& bytes, const std::string& path_for_errors) {
  const PickleRef root = parse_pickle(bytes.data(), bytes.size(), path_for_errors);
  return metadata_reading::MetadataParser(path_for_errors).parse(*root);
}

DcpMetadata read_dcp_metadata(const std::string& dir) {
  const std::string path = dir + "/.metadata";
  return parse_dcp_metadata(read_regular_file(path, path, metadata_reading::kMaxMetadataBytes), path);
}

}  // namespace cohort::detail::dcp
