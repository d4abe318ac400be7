// Python pickles written from C++, for PyTorch's torch.distributed.checkpoint (DCP) files: a DCP
// checkpoint's `.metadata` and each item's data.pkl are pickles of Python objects. Protocol 2 with
// the fewest opcodes that build them (GLOBAL, NEWOBJ, REDUCE, BUILD, MARK/TUPLE, dicts, lists, no
// memo), which every Python 3 reads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::detail::dcp {

/// Appends opcodes; each call pushes one value on the unpickler's stack (or combines the top ones).
class PickleWriter {
 public:
  PickleWriter();

  void global(const std::string& module, const std::string& name);  ///< module.name (a class, a function)
  void text(const std::string& value);                              ///< str
  void integer(int64_t value);                                      ///< int
  void real(double value);                                          ///< float
  void boolean(bool value);
  void none();
  void mark();   ///< the start of a tuple's items
  void tuple();  ///< the items since the last mark, as a tuple
  void empty_tuple();
  void empty_dict();
  void set_item();  ///< dict[key] = value: the dict, then key and value, below the top
  void empty_list();
  void append();         ///< list.append(value)
  void new_object();     ///< cls.__new__(cls, *args): the class, then an args tuple
  void reduce();         ///< callable(*args)
  void build();          ///< obj.__setstate__(state), or obj.__dict__.update(state)
  void persistent_id();  ///< the top value becomes a persistent id (a tensor's storage)

  /// A tuple of ints, e.g. a shape.
  void int_tuple(const std::vector<int64_t>& values);
  /// torch.Size(values).
  void torch_size(const std::vector<int64_t>& values);
  /// cls() with `__dict__` state to come: GLOBAL, EMPTY_TUPLE, NEWOBJ (no __init__ runs).
  void instance(const std::string& module, const std::string& name);

  /// The pickle, STOP appended. The writer is spent afterwards.
  std::string finish();

 private:
  std::string out_;
};

}  // namespace cohort::detail::dcp
