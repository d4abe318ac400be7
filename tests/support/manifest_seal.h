// For tests that edit a checkpoint's manifest to reach a check behind its checksums: sets
// 'values_crc32', 'user_crc32' and 'records_crc32' to match the edited values and records, as a
// manifest written with them would carry. A value of another type than the checksum covers is left unsealed: reading refuses it first.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint/manifest.h"

namespace cohort::testing {

inline void reseal_manifest(nlohmann::json& manifest) {
  using cohort::detail::ckpt::state_values_crc32;
  using cohort::detail::ckpt::user_values_crc32;
  try {
    manifest["values_crc32"] = state_values_crc32(manifest["values"].get<std::map<std::string, StateValues>>());
  } catch (const nlohmann::json::exception&) {
  }
  try {
    manifest["user_crc32"] = user_values_crc32(manifest["user"].get<std::map<std::string, std::string>>());
  } catch (const nlohmann::json::exception&) {
  }
  manifest["records_crc32"] = cohort::detail::ckpt::records_crc32_of(manifest.dump());
}

}  // namespace cohort::testing
