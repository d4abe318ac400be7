// Text helpers (see text.h).
#include "core/text.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace cohort::detail {

std::string printable(const std::string& value) {
  std::string out;
  char escaped[8];
  for (unsigned char c : value) {
    std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
    out += std::isprint(c) ? std::string(1, static_cast<char>(c)) : std::string(escaped);
  }
  return out;
}

std::string excerpt(const std::string& value, size_t max_chars) {
  if (value.size() <= max_chars) return printable(value);
  return printable(value.substr(0, max_chars)) + "... (" + std::to_string(value.size()) + " bytes)";
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (unsigned char c : s) {
    if (!std::isdigit(c)) return false;
  }
  return true;
}

std::string number_text(double value) {
  char text[40];
  if (std::floor(value) == value && std::fabs(value) < 9223372036854775808.0) {
    std::snprintf(text, sizeof text, "%lld", static_cast<long long>(value));
    return text;
  }
  // The shortest form that reads back as the same double (0.3, not 0.29999999999999999).
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  return text;
}

}  // namespace cohort::detail
