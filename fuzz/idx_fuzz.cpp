// Fuzz target: the IDX reader behind the Fashion-MNIST loader (images and labels, plain or gzip: an
// input starting with gzip's magic is read through zlib). Headers that declare huge shapes, truncated
// data and trailing bytes must all end in cohort::Error, never in a crash or a runaway allocation.
#include <cstdint>

#include "cohort/data.h"
#include "cohort/error.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const bool gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  const cohort_fuzz::InputFile input(data, size, gzip ? "idx.gz" : "idx");  // removed when this returns
  const std::string& path = input.path();
  try {
    (void)cohort::data::load_idx_images(path);
  } catch (const cohort::Error&) {
  }
  try {
    (void)cohort::data::load_idx_labels(path);
  } catch (const cohort::Error&) {
  }
  return 0;
}
