// A double as text that reads back bit for bit ("0.001", "0.0030000000000000001"): what the examples
// save as a checkpoint's user value (the run's lr) to compare with the next run's exactly.
#pragma once

#include <cstdio>
#include <string>

namespace examples {

inline std::string exact_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

}  // namespace examples
