// The bounded unpickler (pickle_reader.h). It walks the opcodes in one loop (no recursion, whatever the
// pickle holds) over a stack of values under construction. A list, dict or object is sealed when it
// goes inside another value, and a sealed one is never changed again: so a value's height is final
// once it has a parent, the tree has no cycles, and the depth limit bounds every later walk over it.
#include "checkpoint/dcp/pickle_reader.h"

#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "checkpoint/dcp/pickle_opcodes.h"
#include "core/check.h"
#include "core/text.h"

namespace cohort::detail::dcp {

namespace {
// A name of its own: the checkpoint layer compiles in unity batches, which share anonymous namespaces.
namespace unpickling {

using namespace pickle_op;

// A value under construction, and whether it is inside another value already (then final).
struct Node {
  PickleValue value;
  bool sealed = false;
};
using NodePtr = std::shared_ptr<Node>;

// The finished value of a node, sharing its ownership.
PickleRef shared_value(const NodePtr& node) { return PickleRef(node, &node->value); }

class Unpickler {
 public:
  Unpickler(const char* data, size_t size, const std::string& what, const PickleLimits& limits)
      : data_(reinterpret_cast<const unsigned char*>(data)), size_(size), what_(what), limits_(limits) {}

  PickleRef run();

 private:
  [[noreturn]] void fail(const std::string& message) const {
    throw Error(what_ + ": pickle " + message, ErrorKind::kIO);
  }
  std::string at() const { return str(op_name(op_), " at byte ", start_); }

  const unsigned char* take(size_t n);
  uint64_t read_le(size_t n);
  std::string read_line();
  std::string read_text(size_t length_bytes);
  int64_t read_long1();
  uint32_t read_memo_index(size_t n);

  bool atom();
  bool container();
  bool reference();
  void push_tuple(std::vector<NodePtr> items);
  void push_object(NodePtr callable, NodePtr args);
  void collect(const NodePtr& target, std::vector<NodePtr> items, PickleKind kind);
  void build();

  NodePtr make(PickleKind kind);
  NodePtr number(int64_t value);
  NodePtr text(PickleKind kind, size_t length_bytes);
  NodePtr global(std::string module, std::string name);
  void push(NodePtr node);
  NodePtr pop();
  const NodePtr& top();
  std::vector<NodePtr> pop_to_mark();
  void adopt(Node& parent, const NodePtr& child);
  void expect_open(const Node& node, PickleKind kind);
  void memo_put(uint32_t index);
  void count();

  const unsigned char* data_;
  size_t size_, pos_ = 0, start_ = 0;  // start_: the byte of the opcode being read
  uint8_t op_ = 0;
  const std::string& what_;
  PickleLimits limits_;
  std::vector<NodePtr> stack_;
  std::vector<size_t> marks_;  // the stack's size at each open MARK
  std::unordered_map<uint32_t, NodePtr> memo_;
  int64_t values_ = 0;  // pushes plus memo entries, against limits_.max_values
};

const unsigned char* Unpickler::take(size_t n) {
  if (n > size_ - pos_) fail(str("is truncated: ", at(), " needs ", n, " bytes, ", size_ - pos_, " left"));
  const unsigned char* p = data_ + pos_;
  pos_ += n;
  return p;
}

uint64_t Unpickler::read_le(size_t n) {
  const unsigned char* p = take(n);
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

// GLOBAL's and PUT's or GET's arguments: text up to a newline, within the bytes left.
std::string Unpickler::read_line() {
  const void* end = std::memchr(data_ + pos_, '\n', size_ - pos_);
  if (end == nullptr) fail(str("is truncated: ", at(), " has no newline before the end"));
  const size_t length = size_t(static_cast<const unsigned char*>(end) - (data_ + pos_));
  std::string line(reinterpret_cast<const char*>(take(length)), length);
  ++pos_;
  return line;
}

std::string Unpickler::read_text(size_t length_bytes) {
  const uint64_t length = read_le(length_bytes);
  if (length > size_ - pos_)
    fail(str(at(), " gives a length of ", length, " bytes, past the pickle's end (", size_ - pos_, " bytes left)"));
  return std::string(reinterpret_cast<const char*>(take(length)), length);
}

// LONG1: a little-endian two's complement int of n bytes, which must fit int64.
int64_t Unpickler::read_long1() {
  const size_t n = take(1)[0];
  const unsigned char* p = take(n);
  const size_t low = n < 8 ? n : 8;
  uint64_t v = 0;
  for (size_t i = 0; i < low; ++i) v |= uint64_t(p[i]) << (8 * i);
  const bool negative = n > 0 && (p[low - 1] & 0x80);
  if (negative && low < 8) v |= ~uint64_t(0) << (8 * low);
  for (size_t i = 8; i < n; ++i) {
    if (p[i] != (negative ? 0xff : 0x00)) fail(str(at(), " holds an int of ", n, " bytes, beyond int64"));
  }
  return static_cast<int64_t>(v);
}

// BINPUT, LONG_BINPUT, BINGET, LONG_BINGET: an n-byte index; PUT and GET (n = 0): decimal text.
uint32_t Unpickler::read_memo_index(size_t n) {
  if (n > 0) return static_cast<uint32_t>(read_le(n));
  const std::string line = read_line();
  if (line.empty() || line.size() > 10 || !all_digits(line) || std::stoull(line) > UINT32_MAX)
    fail(str(at(), " has memo index '", excerpt(line, 40), "'"));
  return static_cast<uint32_t>(std::stoull(line));
}

void Unpickler::count() {
  if (++values_ > limits_.max_values)
    fail(str("holds more than ", limits_.max_values, " values and memo entries (", at(), ")"));
}

NodePtr Unpickler::make(PickleKind kind) {
  auto node = std::make_shared<Node>();
  node->value.kind = kind;
  return node;
}

NodePtr Unpickler::number(int64_t value) {
  NodePtr node = make(PickleKind::kInt);
  node->value.integer = value;
  return node;
}

// A str or bytes whose length takes `length_bytes` bytes.
NodePtr Unpickler::text(PickleKind kind, size_t length_bytes) {
  NodePtr node = make(kind);
  node->value.text = read_text(length_bytes);
  return node;
}

NodePtr Unpickler::global(std::string module, std::string name) {
  NodePtr node = make(PickleKind::kGlobal);
  node->value.text = std::move(module);
  node->value.name = std::move(name);
  return node;
}

void Unpickler::push(NodePtr node) {
  count();
  stack_.push_back(std::move(node));
}

// Python's unpickler cannot pop below the last MARK either (its "stack underflow").
NodePtr Unpickler::pop() {
  NodePtr node = top();
  stack_.pop_back();
  return node;
}

const NodePtr& Unpickler::top() {
  const size_t floor = marks_.empty() ? 0 : marks_.back();
  if (stack_.size() <= floor) fail(str(at(), " needs a value on the stack, finds none (a damaged file?)"));
  return stack_.back();
}

std::vector<NodePtr> Unpickler::pop_to_mark() {
  if (marks_.empty()) fail(str(at(), " has no MARK before it"));
  std::vector<NodePtr> items(stack_.begin() + std::ptrdiff_t(marks_.back()), stack_.end());
  stack_.resize(marks_.back());
  marks_.pop_back();
  return items;
}

// `child` goes inside `parent`, final from now on; the parent is as high as it needs.
void Unpickler::adopt(Node& parent, const NodePtr& child) {
  child->sealed = true;
  if (child->value.height + 1 > parent.value.height) parent.value.height = child->value.height + 1;
  if (parent.value.height > limits_.max_depth)
    fail(str("nests values deeper than ", limits_.max_depth, " levels (", at(), ")"));
}

// The target of APPEND, SETITEM and BUILD: of the right kind and not inside another value yet.
void Unpickler::expect_open(const Node& node, PickleKind kind) {
  if (node.value.kind != kind) fail(str(at(), " applies to ", kind_name(node.value.kind), ", not ", kind_name(kind)));
  if (node.sealed)
    fail(str(at(), " changes ", kind_name(kind),
             " already inside another value (a recursive structure, which cohort does not read)"));
}

void Unpickler::memo_put(uint32_t index) {
  const NodePtr& value = top();
  NodePtr& slot = memo_[index];
  if (slot == nullptr) count();
  slot = value;
}

void Unpickler::push_tuple(std::vector<NodePtr> items) {
  NodePtr tuple = make(PickleKind::kTuple);
  for (const NodePtr& item : items) {
    adopt(*tuple, item);
    tuple->value.items.push_back(shared_value(item));
  }
  push(std::move(tuple));
}

// REDUCE and NEWOBJ: callable(*args), recorded, not called.
void Unpickler::push_object(NodePtr callable, NodePtr args) {
  if (args->value.kind != PickleKind::kTuple)
    fail(str(at(), " calls with ", kind_name(args->value.kind), " for arguments, not a tuple"));
  NodePtr object = make(PickleKind::kObject);
  for (const NodePtr* part : {&callable, &args}) {
    adopt(*object, *part);
    object->value.items.push_back(shared_value(*part));
  }
  push(std::move(object));
}

// APPEND(S) and SETITEM(S): `items` go into the list or dict `target` (pairs for a dict). They are
// sealed before the target is checked, so a list put inside itself is refused as a sealed one changed.
void Unpickler::collect(const NodePtr& target, std::vector<NodePtr> items, PickleKind kind) {
  for (const NodePtr& item : items) item->sealed = true;
  PickleValue& v = target->value;
  expect_open(*target, kind);
  if (kind == PickleKind::kDict && items.size() % 2 != 0)
    fail(str(at(), " has an odd number of values (", items.size(), ") after its MARK: keys and values come in pairs"));
  for (size_t i = 0; i < items.size(); ++i) {
    adopt(*target, items[i]);
    if (kind == PickleKind::kList) v.items.push_back(shared_value(items[i]));
    else if (i % 2 == 1) v.entries.emplace_back(shared_value(items[i - 1]), shared_value(items[i]));
  }
}

// BUILD: the object's state (a dataclass's __dict__, or what its __setstate__ takes), given once.
void Unpickler::build() {
  NodePtr state = pop();
  state->sealed = true;
  const NodePtr& object = top();
  expect_open(*object, PickleKind::kObject);
  if (object->value.state() != nullptr) fail(str(at(), " builds an object a second time"));
  adopt(*object, state);
  object->value.items.push_back(shared_value(state));
}

// Ints, floats, None, bools, str, bytes, globals: values that hold no other value.
bool Unpickler::atom() {
  NodePtr node;
  switch (op_) {
    case kBinInt: node = number(int32_t(uint32_t(read_le(4)))); break;
    case kBinInt1: node = number(int64_t(read_le(1))); break;
    case kBinInt2: node = number(int64_t(read_le(2))); break;
    case kLong1: node = number(read_long1()); break;
    case kBinFloat: {
      const uint64_t bits = __builtin_bswap64(read_le(8));  // big-endian
      node = make(PickleKind::kFloat);
      std::memcpy(&node->value.real, &bits, 8);
      break;
    }
    case kNone: node = make(PickleKind::kNone); break;
    case kNewTrue:
    case kNewFalse:
      node = number(op_ == kNewTrue);
      node->value.kind = PickleKind::kBool;
      break;
    case kShortBinUnicode: node = text(PickleKind::kString, 1); break;
    case kBinUnicode: node = text(PickleKind::kString, 4); break;
    case kBinUnicode8: node = text(PickleKind::kString, 8); break;
    case kShortBinBytes: node = text(PickleKind::kBytes, 1); break;
    case kBinBytes: node = text(PickleKind::kBytes, 4); break;
    case kBinBytes8: node = text(PickleKind::kBytes, 8); break;
    case kGlobal: {
      std::string module = read_line();
      node = global(std::move(module), read_line());
      break;
    }
    case kStackGlobal: {
      const NodePtr name = pop(), module = pop();
      if (module->value.kind != PickleKind::kString || name->value.kind != PickleKind::kString)
        fail(str(at(), " takes a module and a name as str, finds ", kind_name(module->value.kind), " and ",
                 kind_name(name->value.kind)));
      node = global(module->value.text, name->value.text);
      break;
    }
    default: return false;
  }
  push(std::move(node));
  return true;
}

// Tuples, lists, dicts and MARK.
bool Unpickler::container() {
  switch (op_) {
    case kMark:
      if (marks_.size() >= size_t(limits_.max_depth))
        fail(str("has more than ", limits_.max_depth, " MARKs open (", at(), ")"));
      marks_.push_back(stack_.size());
      return true;
    case kEmptyTuple: push_tuple({}); return true;
    case kTuple: push_tuple(pop_to_mark()); return true;
    case kTuple1:
    case kTuple2:
    case kTuple3: {
      std::vector<NodePtr> items(size_t(op_ - kTuple1 + 1));
      for (size_t i = items.size(); i-- > 0;) items[i] = pop();
      push_tuple(std::move(items));
      return true;
    }
    case kEmptyList: push(make(PickleKind::kList)); return true;
    case kEmptyDict: push(make(PickleKind::kDict)); return true;
    case kAppend: {
      NodePtr item = pop();
      collect(top(), {std::move(item)}, PickleKind::kList);
      return true;
    }
    case kSetItem: {
      NodePtr value = pop(), key = pop();
      collect(top(), {std::move(key), std::move(value)}, PickleKind::kDict);
      return true;
    }
    case kAppends:
    case kSetItems: {
      std::vector<NodePtr> items = pop_to_mark();
      collect(top(), std::move(items), op_ == kAppends ? PickleKind::kList : PickleKind::kDict);
      return true;
    }
    default: return false;
  }
}

// The memo, calls (REDUCE, NEWOBJ), BUILD and persistent ids.
bool Unpickler::reference() {
  switch (op_) {
    case kMemoize: memo_put(static_cast<uint32_t>(memo_.size())); return true;
    case kPut: memo_put(read_memo_index(0)); return true;
    case kBinPut: memo_put(read_memo_index(1)); return true;
    case kLongBinPut: memo_put(read_memo_index(4)); return true;
    case kGet:
    case kBinGet:
    case kLongBinGet: {
      const uint32_t index = read_memo_index(op_ == kGet ? 0 : op_ == kBinGet ? 1 : 4);
      const auto it = memo_.find(index);
      if (it == memo_.end())
        fail(str(at(), " reads memo entry ", index, ", which was never set (the memo holds ", memo_.size(),
                 " entries)"));
      push(it->second);
      return true;
    }
    case kReduce:
    case kNewObj: {
      NodePtr args = pop(), callable = pop();
      push_object(std::move(callable), std::move(args));
      return true;
    }
    case kBuild: build(); return true;
    case kBinPersId: {
      NodePtr pid = pop(), node = make(PickleKind::kPersistentId);
      adopt(*node, pid);
      node->value.items.push_back(shared_value(pid));
      push(std::move(node));
      return true;
    }
    default: return false;
  }
}

PickleRef Unpickler::run() {
  while (pos_ < size_) {
    start_ = pos_;
    op_ = data_[pos_++];
    if (op_ == kProto) {
      const unsigned version = take(1)[0];
      if (version < 2 || version > 5) fail(str("has protocol ", version, " (cohort reads protocols 2 to 5)"));
    } else if (op_ == kFrame) {
      const uint64_t length = read_le(8);  // a frame only groups opcodes for I/O: nothing to build
      if (length > size_ - pos_)
        fail(str(at(), " announces ", length, " bytes, past the pickle's end (", size_ - pos_, " bytes left)"));
    } else if (op_ == kStop) {
      if (stack_.size() != 1 || !marks_.empty())
        fail(str(at(), " leaves ", stack_.size(), " values on the stack and ", marks_.size(),
                 " MARKs open, not one value"));
      if (pos_ != size_) fail(str("is followed by ", size_ - pos_, " bytes after its STOP at byte ", start_));
      return shared_value(stack_.back());
    } else if (op_name(op_) == nullptr) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", op_);
      fail(str("has opcode ", hex, " at byte ", start_, ", which cohort does not read"));
    } else if (!atom() && !container() && !reference()) {
      fail(str("has opcode ", op_name(op_), " at byte ", start_, ", which cohort does not read"));  // unreachable
    }
  }
  fail(str("is truncated: it ends at byte ", size_, " without its STOP"));
}

}  // namespace unpickling
}  // namespace

PickleRef parse_pickle(const char* data, size_t size, const std::string& what, const PickleLimits& limits) {
  return unpickling::Unpickler(data, size, what, limits).run();
}

}  // namespace cohort::detail::dcp
