// A bounded unpickler for the pickles in PyTorch's files (a DCP checkpoint's `.metadata`, a torch.save
// archive's data.pkl): protocols 2 to 5, the opcodes Python's pickler emits for dicts, lists, tuples,
// str, bytes, ints, floats, bools, None, classes and objects, and persistent ids. It builds a value tree
// (pickle_value.h) and runs nothing. A hostile pickle is a one-line cohort::Error (ErrorKind::kIO):
// every length is checked against the bytes left, the memo's indices against what was stored, the
// tree's depth, its number of values and the open MARKs against limits, and a list, dict or object
// that would change after it went inside another value (a recursive structure) is refused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "checkpoint/dcp/pickle_value.h"

namespace cohort::detail::dcp {

/// What parse_pickle accepts. The defaults hold any real `.metadata` up to ~50 MB (it uses one value
/// per 3.5 bytes); a hostile pickle makes at most max_values values of ~160 bytes (2.7 GB by default:
/// pass less where the input is known to be small).
struct PickleLimits {
  int max_depth = 64;                     ///< levels of nesting in the value tree (a real .metadata has 12)
  int64_t max_values = int64_t(1) << 24;  ///< values pushed (new or from the memo) plus memo entries
};

/// The value the pickle in [data, data + size) builds. Errors start with `what` (e.g. the file's path)
/// and give the byte where the pickle went wrong. The pickle must end with its STOP: bytes after it
/// are an error, as is a STOP that leaves more than one value on the stack.
PickleRef parse_pickle(const char* data, size_t size, const std::string& what, const PickleLimits& limits = {});

}  // namespace cohort::detail::dcp
