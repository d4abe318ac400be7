// Reading and writing safetensors files (Hugging Face's format, what cohort-ckpt consolidate writes)
// and loading named tensors into a module: weights saved from PyTorch (safetensors.torch.save_file, or
// the file written by hand) load into the C++ model of the same parameter names, and a C++ model's
// tensors save for Python. The header is bounded and validated before anything is allocated; every
// error is one line naming the file and the tensor.
//
//   auto tensors = cohort::load_safetensors("model.safetensors");
//   cohort::load_state_dict(*gpt, tensors);                                         // PyTorch's names
//   cohort::load_state_dict(*gpt, tensors, cohort::StateDictOptions().prefix("model/"));  // consolidated
//   cohort::load_pretrained(engine, "model.safetensors.index.json");  // fsdp: each rank reads its shards
#pragma once

#include <torch/arg.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <map>
#include <string>

#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort {

/// The largest JSON header load_safetensors reads (the format's own limit: 100 MB).
inline constexpr int64_t kSafetensorsMaxHeaderBytes = 100'000'000;

/// Every tensor of the safetensors file at `path`, by name (CPU, the file's dtype: F64, F32, F16, BF16,
/// I64, I32, I16, I8, U8, BOOL). Throws cohort::Error naming the file (and the tensor) when the file is
/// short, the header too long or not JSON, a dtype unknown, or a tensor's byte range outside the data,
/// overlapping another or of the wrong size for its shape.
std::map<std::string, torch::Tensor> load_safetensors(const std::string& path);

/// Writes `tensors` (any device, any of those dtypes) to a safetensors file at `path`, sorted by name,
/// with `metadata` as its __metadata__: what Python's safetensors.torch.load_file reads. The file is
/// written whole or not at all (a temporary renamed over it; a link or device at `path` is refused).
void save_safetensors(const std::map<std::string, torch::Tensor>& tensors, const std::string& path,
                      const std::map<std::string, std::string>& metadata = {});

struct StateDictOptions {
  /// Prepended to each of the module's names to find its tensor ("model/" for a consolidated
  /// cohort checkpoint whose module entry was added as "model").
  TORCH_ARG(std::string, prefix) = "";
  /// Refuse tensors under the prefix that name nothing in the module (PyTorch's strict=True); a
  /// parameter or buffer without a tensor is refused either way.
  TORCH_ARG(bool, strict) = true;
  /// load_pretrained: only the module's tensors whose names begin with this are loaded, and the file
  /// names them without it ("gpt." when the file holds a GPT that the trained module keeps as its
  /// "gpt"; Hugging Face's base_model_prefix). The others keep what they hold.
  TORCH_ARG(std::string, module_prefix) = "";
};

/// Copies `tensors` into the module's parameters and buffers by name (PyTorch's load_state_dict):
/// shapes must be equal; dtypes are converted. Nothing is changed unless every check passes.
void load_state_dict(torch::nn::Module& module, const std::map<std::string, torch::Tensor>& tensors,
                     const StateDictOptions& options = {});

/// The metadata of pretrained weights, read without their tensors: a safetensors file's __metadata__, or
/// a sharded set's index's "metadata" (its string values). Validated as load_pretrained validates them.
std::map<std::string, std::string> safetensors_metadata(const std::string& path);

class ZeroEngineCore;  // cohort/zero.h

/// Pretrained weights from a safetensors file, or from a Hugging Face sharded set through its index
/// (`model.safetensors.index.json`, whose weight_map names the file beside it holding each tensor),
/// into `module` (DDP, one process): each tensor read straight from the file into its parameter or
/// buffer, never a second copy of the model. Names, shapes and `options` as load_state_dict; dtypes
/// are converted. Nothing is changed unless every name and shape matches.
void load_pretrained(torch::nn::Module& module, const std::string& path, const StateDictOptions& options = {});

/// The same into a ZeRO engine (stage 1-3, fsdp, HSDP), streamed: each rank reads only the bytes of
/// the parameter shards it keeps (a model built under cohort::ShardedInit never exists whole on a
/// rank), frozen parameters and buffers whole; the optimizer state is left as it is. All ranks call
/// it; a tensor missing or of another shape fails it on every rank, naming the tensor.
void load_pretrained(ZeroEngineCore& engine, const std::string& path, const StateDictOptions& options = {});

}  // namespace cohort
COHORT_EXPORT_END
