// A Python pickle's value tree, as cohort's bounded unpickler (pickle_reader.h) builds it from a PyTorch
// file: plain values, containers, and the classes and calls a pickle names, which are recorded, never
// run (a global is its module and name; an object is callable(*args), with BUILD's state). The memo may
// share a subtree between parents, but a value never changes once it is inside another, so the tree
// has no cycles and every walk over it recurses at most `height` levels (bounded by the reader).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace cohort::detail::dcp {

enum class PickleKind {
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,  ///< str (UTF-8 bytes, as the pickle holds them)
  kBytes,
  kTuple,
  kList,
  kDict,
  kGlobal,        ///< module.name: a class or function the pickle names (GLOBAL, STACK_GLOBAL)
  kObject,        ///< callable(*args) (REDUCE, NEWOBJ), then BUILD's state if any
  kPersistentId,  ///< BINPERSID: an object the pickle leaves to its reader (a tensor's storage)
};

struct PickleValue;
using PickleRef = std::shared_ptr<const PickleValue>;

struct PickleValue {
  PickleKind kind = PickleKind::kNone;
  int height = 1;       ///< levels of values in this subtree: 1 for a value that holds none
  int64_t integer = 0;  ///< kInt; kBool: 0 or 1
  double real = 0;      ///< kFloat
  std::string text;     ///< kString, kBytes; kGlobal: the module
  std::string name;     ///< kGlobal: the name
  /// kTuple, kList: the items. kObject: the callable, the args tuple, then the state once BUILD gave
  /// one. kPersistentId: the persistent id.
  std::vector<PickleRef> items;
  std::vector<std::pair<PickleRef, PickleRef>> entries;  ///< kDict: key, value, in the pickle's order

  bool is_global(const std::string& module_name, const std::string& global_name) const {
    return kind == PickleKind::kGlobal && text == module_name && name == global_name;
  }
  /// kObject: what was called, with what; BUILD's state (nullptr when there was no BUILD).
  const PickleValue& callable() const { return *items[0]; }
  const PickleValue& args() const { return *items[1]; }
  const PickleValue* state() const { return items.size() > 2 ? items[2].get() : nullptr; }
  /// kDict: the value of the str key `key`, nullptr when there is none.
  const PickleValue* field(const std::string& key) const;
};

/// "a str", "a tuple", "a global", ... : for messages saying what a value is instead of what was expected.
const char* kind_name(PickleKind kind);

/// The value as a message shows it, in Python's notation and at most about `max_chars` characters:
/// 'model.0.weight', (3, 2), torch.float32, torch.Size((3, 2)), [...] cut with "...".
std::string describe(const PickleValue& value, size_t max_chars = 120);

}  // namespace cohort::detail::dcp
