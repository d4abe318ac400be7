// Fuzz target: the reader of one item of a PyTorch DCP data file (src/checkpoint/dcp/torch_save_item.h):
// the input as the item's bytes (a torch.save zip archive), read as a tensor and as a Python object
// (whose value tree is then described, as an error message would). Either may only fail with
// cohort::Error.
#include <torch/types.h>

#include <cstdint>
#include <string>

#include "checkpoint/dcp/torch_save_item.h"
#include "cohort/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* bytes = reinterpret_cast<const char*>(data);
  try {
    const torch::Tensor t = cohort::detail::dcp::read_tensor_item(bytes, size, "fuzz.distcp item");
    if (t.numel() > 0) t.sum();  // every element is readable
  } catch (const cohort::Error&) {
  }
  try {
    cohort::detail::dcp::describe(cohort::detail::dcp::read_object_item(bytes, size, "fuzz.distcp item"), 1000);
  } catch (const cohort::Error&) {
  }
  return 0;
}
