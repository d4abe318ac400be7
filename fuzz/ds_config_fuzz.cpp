// Fuzz target: DeepSpeed's ds_config.json as cohort reads it (parse_ds_config). Every input either
// parses or is refused with cohort::Error; the world size comes from the input's length so that
// batch-size arithmetic (train_batch_size = micro x accumulation x world) is exercised too.
#include <cstdint>
#include <string>

#include "cohort/error.h"
#include "cohort/zero_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const int world_size = 1 + int(size % 8);
  try {
    cohort::ZeroConfig config = cohort::parse_ds_config(text, world_size);
    (void)cohort::warmup_lr(config.scheduler(), 1000);
  } catch (const cohort::Error&) {
  }
  return 0;
}
