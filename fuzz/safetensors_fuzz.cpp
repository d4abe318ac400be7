// Fuzz target: pretrained weights' readers (SafetensorsSource, issue 42): the input as a safetensors
// file, its header validated and every tensor read by range (the first and the last element, as a
// rank's shard would ask), and the same bytes as a sharded set's index.json, whose weight_map names the
// files beside it. Either may only fail with cohort::Error.
#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "checkpoint/safetensors_source.h"
#include "cohort/error.h"
#include "fuzz_file.h"

namespace {

void read_every_tensor(const std::string& path) {
  const cohort::detail::SafetensorsSource source(path);
  for (const std::string& name : source.names()) {
    const std::vector<int64_t>& shape = source.shape(name);
    const int64_t numel = c10::multiply_integers(shape);
    if (numel == 0 || numel > (1 << 20)) continue;  // a buffer the harness can hold
    source.read(name, shape, 0, torch::empty({1}));
    source.read(name, shape, numel - 1, torch::empty({1}, torch::kDouble));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (const char* name : {"model.safetensors", "model.safetensors.index.json"}) {
    const cohort_fuzz::InputFile input(data, size, name);  // removed when this returns
    try {
      read_every_tensor(input.path());
    } catch (const cohort::Error&) {
    }
  }
  return 0;
}
