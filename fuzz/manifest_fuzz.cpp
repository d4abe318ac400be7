// Fuzz target: a checkpoint's manifest.json (read_manifest: world size, files, tensor records with
// their pieces, Stateful values, user keys). A damaged manifest must be refused with cohort::Error.
#include <cstdint>

#include "checkpoint/manifest.h"
#include "cohort/error.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const cohort_fuzz::InputFile input(data, size, "manifest.json");  // removed when this returns
  const std::string& path = input.path();
  try {
    const auto manifest = cohort::detail::ckpt::read_manifest(path);
    for (const auto& record : manifest.tensors) (void)manifest.find(record.name);
  } catch (const cohort::Error&) {
  }
  return 0;
}
