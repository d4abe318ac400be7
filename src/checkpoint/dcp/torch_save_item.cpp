// Reading one DCP item (torch_save_item.h). A tensor's data.pkl, as torch.save writes it (protocol 2):
//   torch._utils._rebuild_tensor_v2(persistent_id(('storage', torch.FloatStorage, '0', 'cpu', numel)),
//                                   storage_offset, size, stride, requires_grad, OrderedDict()[, metadata])
// and its storage's bytes are the record `data/0` (the key). The result is copied out of the item, so
// it owns its memory and outlives the mapping the item came from.
#include "checkpoint/dcp/torch_save_item.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "checkpoint/dcp/pickle_reader.h"
#include "checkpoint/dcp/stored_zip.h"
#include "core/check.h"
#include "core/text.h"

namespace cohort::detail::dcp {

namespace {
// A name of its own: the checkpoint layer compiles in unity batches, which share anonymous namespaces.
namespace item_reading {

// An item's data.pkl is a few hundred bytes for a tensor; an object's (a list of every param's name) a
// few MB at most.
constexpr size_t kMaxPickleBytes = size_t(64) << 20;
constexpr PickleLimits kItemPickleLimits{64, int64_t(1) << 22};

[[noreturn]] void fail(const std::string& what, const std::string& message) {
  throw Error(what + ": " + message, ErrorKind::kIO);
}

// The archive's records by their names below its one top-level folder (torch.load requires one).
std::map<std::string, ZipRecord> open_archive(const char* data, size_t size, const std::string& what) {
  std::map<std::string, ZipRecord> records;
  std::string prefix;
  for (ZipRecord& r : read_stored_zip(data, size, what)) {
    const size_t slash = r.name.find('/');
    if (slash == std::string::npos || slash == 0)
      fail(what, str("zip record '", excerpt(r.name), "' is not under a top-level folder, as torch.save puts them"));
    if (prefix.empty()) prefix = r.name.substr(0, slash + 1);
    if (r.name.compare(0, prefix.size(), prefix) != 0)
      fail(what, str("zip records are under both '", excerpt(prefix), "' and '", excerpt(r.name.substr(0, slash + 1)),
                     "': torch.save puts them under one folder"));
    records.emplace(r.name.substr(prefix.size()), r);
  }
  const auto order = records.find("byteorder");
  if (order != records.end() && std::string(order->second.data, order->second.size) != "little")
    fail(what, str("the archive's byteorder is '", excerpt(std::string(order->second.data, order->second.size)),
                   "': cohort reads little-endian archives only"));
  return records;
}

PickleRef read_data_pickle(const std::map<std::string, ZipRecord>& records, const std::string& what) {
  const auto it = records.find("data.pkl");
  if (it == records.end()) fail(what, "the archive has no data.pkl record (not a torch.save archive?)");
  const ZipRecord& r = it->second;
  if (r.size > kMaxPickleBytes)
    fail(what, str("data.pkl has ", r.size, " bytes, more than the ", kMaxPickleBytes, " accepted"));
  return parse_pickle(r.data, r.size, what + ": data.pkl", kItemPickleLimits);
}

c10::ScalarType storage_dtype(const PickleValue& cls, const std::string& what) {
  static const std::map<std::string, c10::ScalarType> kStorages = {
      {"FloatStorage", c10::ScalarType::Float}, {"DoubleStorage", c10::ScalarType::Double},
      {"HalfStorage", c10::ScalarType::Half},   {"BFloat16Storage", c10::ScalarType::BFloat16},
      {"LongStorage", c10::ScalarType::Long},   {"IntStorage", c10::ScalarType::Int},
      {"ShortStorage", c10::ScalarType::Short}, {"CharStorage", c10::ScalarType::Char},
      {"ByteStorage", c10::ScalarType::Byte},   {"BoolStorage", c10::ScalarType::Bool}};
  const auto it = cls.kind == PickleKind::kGlobal && cls.text == "torch" ? kStorages.find(cls.name) : kStorages.end();
  if (it == kStorages.end())
    fail(what, str("data.pkl names storage class ", describe(cls, 100), ", which cohort does not read"));
  return it->second;
}

// What a tensor's data.pkl says: its storage (dtype, record, element count) and the view of it.
struct TensorView {
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::string key;
  int64_t numel = 0, offset = 0;
  std::vector<int64_t> size, stride;
};

std::vector<int64_t> ints(const PickleValue& tuple, const char* name, const std::string& what) {
  std::vector<int64_t> out;
  if (tuple.kind != PickleKind::kTuple) fail(what, str("data.pkl gives the ", name, " ", describe(tuple, 100)));
  for (const PickleRef& item : tuple.items) {
    if (item->kind != PickleKind::kInt || item->integer < 0)
      fail(what, str("data.pkl gives the ", name, " ", describe(tuple, 100), ": not a tuple of non-negative ints"));
    out.push_back(item->integer);
  }
  return out;
}

TensorView tensor_view(const PickleValue& root, const std::string& what) {
  if (root.kind != PickleKind::kObject || !root.callable().is_global("torch._utils", "_rebuild_tensor_v2") ||
      root.args().items.size() < 6 || root.args().items.size() > 7)
    fail(what, str("data.pkl holds ", describe(root, 160), ", not a tensor as torch.save writes one"));
  const std::vector<PickleRef>& args = root.args().items;
  const PickleValue& pid = *args[0];
  const PickleValue* t = pid.kind == PickleKind::kPersistentId ? pid.items[0].get() : nullptr;
  if (t == nullptr || t->kind != PickleKind::kTuple || t->items.size() != 5 ||
      t->items[0]->kind != PickleKind::kString || t->items[0]->text != "storage" ||
      t->items[2]->kind != PickleKind::kString || t->items[4]->kind != PickleKind::kInt || t->items[4]->integer < 0)
    fail(what, str("data.pkl's tensor has storage ", describe(pid, 160),
                   ", not ('storage', class, key, location, element count)"));
  TensorView v{storage_dtype(*t->items[1], what), t->items[2]->text, t->items[4]->integer, 0, {}, {}};
  if (args[1]->kind != PickleKind::kInt || args[1]->integer < 0 || args[1]->integer > v.numel)
    fail(what, str("data.pkl's tensor has storage offset ", describe(*args[1], 100), " in a storage of ", v.numel,
                   " elements"));
  v.offset = args[1]->integer;
  v.size = ints(*args[2], "size", what);
  v.stride = ints(*args[3], "stride", what);
  if (v.size.size() != v.stride.size())
    fail(what, str("data.pkl's tensor has size ", shape_text(v.size), " and stride ", shape_text(v.stride)));
  return v;
}

// The view addresses only the storage: its last element, offset + sum((size - 1) * stride), is inside.
// Nor has it more elements than the storage (an expanded view, which DCP never saves: it clones a
// tensor whose storage is not its own size), so the copy made is never larger than the item.
void check_view(const TensorView& v, const std::string& what) {
  int64_t numel = 1, last = v.offset;
  bool overflow = false;
  for (size_t d = 0; d < v.size.size(); ++d) {
    overflow |= __builtin_mul_overflow(numel, v.size[d], &numel);
    int64_t step = 0;
    if (v.size[d] > 0) overflow |= __builtin_mul_overflow(v.size[d] - 1, v.stride[d], &step);
    overflow |= __builtin_add_overflow(last, step, &last);
  }
  if (!overflow && numel > v.numel)
    fail(what, str("data.pkl's tensor of size ", shape_text(v.size), " has more elements than its storage of ", v.numel,
                   " (an expanded view, which DCP never saves)"));
  if (!overflow && (numel == 0 || last < v.numel)) return;
  fail(what, str("data.pkl's tensor of size ", shape_text(v.size), " and stride ", shape_text(v.stride), " at offset ",
                 v.offset, " addresses elements past its storage of ", v.numel));
}

torch::Tensor rebuild(const TensorView& v, const ZipRecord& storage, const std::string& what) {
  // A bool other than 0 or 1 is undefined behaviour to read as bool.
  if (v.dtype == c10::ScalarType::Bool &&
      std::any_of(storage.data, storage.data + storage.size, [](char c) { return uint8_t(c) > 1; }))
    fail(what, "its bool storage holds a byte other than 0 and 1");
  const auto options = torch::TensorOptions().dtype(v.dtype);
  torch::Tensor all = torch::empty({v.numel}, options);
  if (storage.size > 0) std::memcpy(all.data_ptr(), storage.data, storage.size);
  torch::Tensor view = all.as_strided(v.size, v.stride, v.offset);
  if (v.offset == 0 && view.numel() == v.numel && view.is_contiguous()) return all.view(v.size);
  return view.clone(at::MemoryFormat::Contiguous);  // only the viewed elements, in order
}

}  // namespace item_reading
}  // namespace

torch::Tensor read_tensor_item(const char* data, size_t size, const std::string& what) {
  using namespace item_reading;
  const auto records = open_archive(data, size, what);
  const TensorView v = tensor_view(*read_data_pickle(records, what), what);
  const auto it = records.find("data/" + v.key);
  if (it == records.end()) fail(what, str("the archive has no record data/", excerpt(v.key), " for its tensor"));
  const size_t item_bytes = c10::elementSize(v.dtype);
  if (uint64_t(v.numel) > it->second.size / item_bytes || it->second.size != size_t(v.numel) * item_bytes)
    fail(what, str("record data/", excerpt(v.key), " has ", it->second.size, " bytes for a storage of ", v.numel, " ",
                   c10::toString(v.dtype), " elements"));
  check_view(v, what);
  return rebuild(v, it->second, what);
}

PickleValue read_object_item(const char* data, size_t size, const std::string& what) {
  const auto records = item_reading::open_archive(data, size, what);
  return *item_reading::read_data_pickle(records, what);
}

}  // namespace cohort::detail::dcp
