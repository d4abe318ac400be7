// Parameter counts for cohort-plan's --model and --checkpoint: the fashion_mnist example's network
// built with LibTorch, or the tensors of a file written by torch::save, torch::pickle_save or as
// safetensors. (Files from Python's torch.save are not readable: LibTorch 1.13's unpickler rejects them.)
#pragma once

#include <cstdint>
#include <string>

namespace cohort_plan {

struct ModelSize {
  int64_t params = 0;           // elements the optimizer updates (what ZeRO shards)
  int64_t tensors = 0;          // how many tensors those are
  int64_t buffer_elements = 0;  // module buffers (BatchNorm statistics): neither sharded nor counted
  std::string format;           // how it was read, for the report
};

/// The models cohort-plan knows by name: "fashion_mnist_cnn". Throws cohort::Error for others.
ModelSize count_named_model(const std::string& name);

/// A module saved with torch::save (parameters counted, buffers reported apart), any IValue saved
/// with torch::pickle_save (the elements of every distinct tensor in it), or a safetensors file (every
/// tensor; of a file cohort-ckpt consolidate wrote, the "model/" ones). Throws cohort::Error naming the
/// path, in one line, when the file is missing, unreadable or of none of these formats.
ModelSize count_checkpoint(const std::string& path);

}  // namespace cohort_plan
