// Writing safetensors files (Hugging Face's format): an 8-byte little-endian header length, a JSON
// header giving each tensor's dtype, shape and byte range, the data section 8-byte aligned. Shared by
// cohort::save_safetensors (a map of tensors) and cohort-ckpt consolidate (a checkpoint streamed).
#pragma once

#include <c10/core/ScalarType.h>

#include <nlohmann/json.hpp>

#include "core/safe_file.h"

namespace cohort::detail {

/// The format's name of `type` ("F32", "BF16", ...); throws kInvalidArgument for a type it has none for.
const char* safetensors_dtype(c10::ScalarType type);

/// Writes the length and `header` (padded with spaces so the data begins 8-byte aligned) to `file`.
void write_safetensors_header(SafeFile& file, const nlohmann::json& header);

}  // namespace cohort::detail
