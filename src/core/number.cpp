// parse_integer / parse_real and their environment twins (include/cohort/number.h): the one parser
// every flag and COHORT_* variable goes through, so each says the same thing about a bad value.
// Integers use std::from_chars (no whitespace, no locale, overflow reported); reals use strtod after
// a check that the text holds only digits, signs, '.', 'e' (strtod alone takes " 1", "0x1p3", "inf").
#include "cohort/number.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "cohort/error.h"
#include "core/check.h"

namespace cohort {
namespace {

enum class Parsed { kOk, kMalformed, kOutOfRange };

// The shortest text that reads back as `value`: "0.001", "1e-12", "9007199254740992".
std::string real_text(double value) {
  char text[40];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  return text;
}

Parsed read_integer(const std::string& text, int64_t* value) {
  if (text.empty()) return Parsed::kMalformed;
  const char* begin = text.data() + (text[0] == '+' && text.size() > 1 && text[1] != '-' ? 1 : 0);
  const char* end = text.data() + text.size();
  const auto [ptr, error] = std::from_chars(begin, end, *value);
  if (ptr != end || error == std::errc::invalid_argument) return Parsed::kMalformed;
  return error == std::errc::result_out_of_range ? Parsed::kOutOfRange : Parsed::kOk;
}

Parsed read_real(const std::string& text, bool allow_infinite, double* value) {
  if (text.empty()) return Parsed::kMalformed;
  if (allow_infinite && (text == "inf" || text == "+inf" || text == "infinity")) {
    *value = HUGE_VAL;
    return Parsed::kOk;
  }
  if (text.find_first_not_of("0123456789+-.eE") != std::string::npos) return Parsed::kMalformed;
  char* end = nullptr;
  *value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return Parsed::kMalformed;
  // 1e400 overflows to inf; 1e-320 and 1e-400 underflow to a denormal or 0, the nearest double (as
  // Python's float() reads them), which the range then judges (hostile pass 8: "--momentum 1e-320").
  if (!std::isfinite(*value)) return Parsed::kOutOfRange;
  return Parsed::kOk;
}

[[noreturn]] void flag_error(Parsed parsed, const std::string& name, const std::string& expected,
                             const std::string& text) {
  const std::string got = text.empty() ? "\"\"" : text;
  if (parsed == Parsed::kMalformed)
    throw Error(name + " expects " + expected + ", got " + got, ErrorKind::kInvalidArgument);
  throw Error(name + " is out of range: expected " + expected + ", got " + got, ErrorKind::kInvalidArgument);
}

std::optional<std::string> env_text(const std::string& name) {
  const char* raw = std::getenv(name.c_str());
  if (raw == nullptr || *raw == '\0') return std::nullopt;
  return std::string(raw);
}

}  // namespace

std::string describe_range(const IntegerRange& range) {
  return "from " + std::to_string(range.min) + " to " + std::to_string(range.max);
}

std::string describe_range(const RealRange& range) {
  return "from " + real_text(range.min) + " to " + real_text(range.max);
}

int64_t parse_integer(const std::string& text, const IntegerRange& range) {
  int64_t value = 0;
  Parsed parsed = read_integer(text, &value);
  if (parsed == Parsed::kOk && (value < range.min || value > range.max)) parsed = Parsed::kOutOfRange;
  if (parsed != Parsed::kOk) flag_error(parsed, range.name, range.what + " " + describe_range(range), text);
  return value;
}

double parse_real(const std::string& text, const RealRange& range) {
  double value = 0;
  Parsed parsed = read_real(text, range.allow_infinite, &value);
  if (parsed == Parsed::kOk && !(value >= range.min && value <= range.max)) parsed = Parsed::kOutOfRange;
  if (parsed != Parsed::kOk) flag_error(parsed, range.name, range.what + " " + describe_range(range), text);
  return value;
}

int64_t env_integer(const IntegerRange& range, int64_t fallback) {
  const auto text = env_text(range.name);
  if (!text) return fallback;
  int64_t value = 0;
  const bool ok = read_integer(*text, &value) == Parsed::kOk && value >= range.min && value <= range.max;
  COHORT_CHECK_KIND(kInvalidArgument, ok, range.name, "=", *text, " is not ", range.what, " ", describe_range(range));
  return value;
}

double env_real(const RealRange& range, double fallback) {
  const auto text = env_text(range.name);
  if (!text) return fallback;
  double value = 0;
  const bool ok = read_real(*text, range.allow_infinite, &value) == Parsed::kOk && value >= range.min &&
                  value <= range.max;
  COHORT_CHECK_KIND(kInvalidArgument, ok, range.name, "=", *text, " is not ", range.what, " ", describe_range(range));
  return value;
}

}  // namespace cohort
