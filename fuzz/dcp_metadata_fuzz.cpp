// Fuzz target: the reader of a PyTorch DCP checkpoint's `.metadata` (src/checkpoint/dcp/metadata.h):
// the input as the file's bytes, through the bounded unpickler, the dataclasses' reading and the chunks'
// geometry checks. It may only fail with cohort::Error.
#include <cstdint>
#include <string>

#include "checkpoint/dcp/metadata.h"
#include "cohort/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    cohort::detail::dcp::parse_dcp_metadata(std::string(reinterpret_cast<const char*>(data), size), "fuzz/.metadata");
  } catch (const cohort::Error&) {
  }
  return 0;
}
