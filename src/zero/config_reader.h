// The JSON reading kit behind parse_ds_config (config.cpp): a tolerant parser (DeepSpeed's hjson-style
// comments and trailing commas; duplicate keys and deep nesting refused) and Section, typed getters that
// check each value, name its key path when it is wrong, and record what was read so the rest can be listed.
#pragma once

#include <strings.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cohort/error.h"
#include "core/check.h"
#include "core/json_read.h"

namespace cohort::detail::ds_config {

using Json = nlohmann::ordered_json;  // keeps the file's key order for the warning

// What one parse shares: the name used in messages and the paths it read.
struct Context {
  std::string source;          // "ds_config" or "ds_config <path>"
  std::set<std::string> read;  // dotted paths whose values cohort used (or descended into)
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(source + ": " + what, ErrorKind::kInvalidArgument);  // the user's file is refused
  }
};

inline std::string join_path(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

// hjson (DeepSpeed's reader) accepts a comma before '}' or ']'; nlohmann does not. Blank such commas
// outside strings and comments (a space keeps every line and column of later error messages).
inline std::string blank_trailing_commas(std::string text) {
  const size_t n = text.size();
  auto skip_blank = [&](size_t i) {
    while (i < n) {
      if (std::isspace(static_cast<unsigned char>(text[i]))) {
        ++i;
      } else if (text.compare(i, 2, "//") == 0) {
        while (i < n && text[i] != '\n') ++i;
      } else if (text.compare(i, 2, "/*") == 0) {
        const size_t end = text.find("*/", i + 2);
        i = end == std::string::npos ? n : end + 2;
      } else {
        break;
      }
    }
    return i;
  };
  for (size_t i = 0; i < n; ++i) {
    const char c = text[i];
    if (c == '"') {
      for (++i; i < n && text[i] != '"'; ++i) {
        if (text[i] == '\\') ++i;
      }
    } else if (c == '/' && i + 1 < n && (text[i + 1] == '/' || text[i + 1] == '*')) {
      i = skip_blank(i) - 1;
    } else if (c == ',') {
      const size_t next = skip_blank(i + 1);
      if (next < n && (text[next] == '}' || text[next] == ']')) text[i] = ' ';
    }
  }
  return text;
}

// Parses JSON, refusing duplicate keys as DeepSpeed does (its hjson loader raises on them) and nesting
// past kMaxJsonDepth (core/json_read.h: a DeepSpeed config nests 4 levels; a file nested 20,000 deep
// was a stack overflow waiting to happen, and its key paths once took minutes to build).
inline Json read_config_json(const std::string& text, const Context& ctx) {
  JsonReadOptions options;
  options.source = ctx.source;
  options.document = "DeepSpeed config";
  options.comments = true;
  options.unique_keys = true;
  options.duplicate_note = " (DeepSpeed refuses them too)";
  options.max_object_keys = 256;  // DeepSpeed's largest section has under 50
  return parse_json<Json>(blank_trailing_commas(text), options);
}

constexpr const char* kAutoReason =
    "is a placeholder that Hugging Face's Trainer fills in; DeepSpeed and cohort need the value itself";

// An integer, or a float without fraction (5e8), as DeepSpeed's pydantic models accept; else nullopt.
inline std::optional<int64_t> as_integer(const Json& value) {
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return static_cast<int64_t>(u);
  } else if (value.is_number_integer()) {
    return value.get<int64_t>();
  } else if (value.is_number_float()) {
    const double d = value.get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.2e18) return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

// One JSON object of the config at a dotted path. The getters return the fallback for an absent or
// null key, check the type and range of a present one, and record the key as read.
class Section {
 public:
  Section(const Json* object, std::string path, Context* ctx) : object_(object), path_(std::move(path)), ctx_(ctx) {}

  bool has(const std::string& key) const {
    return object_ != nullptr && object_->contains(key) && !(*object_)[key].is_null();
  }
  std::string path(const std::string& key) const { return join_path(path_, key); }

  // A key that must be there and is not: "<path> is missing: <reason>".
  [[noreturn]] void fail_missing(const std::string& key, const std::string& reason) const {
    ctx_->fail(path(key) + " is missing: " + reason);
  }

  [[noreturn]] void fail(const std::string& key, const std::string& reason) const {
    const Json& value = (*object_)[key];
    ctx_->fail(path(key) + "=" + json_excerpt(value) + " " +
               (value.is_string() && value.get<std::string>() == "auto" ? kAutoReason : reason));
  }

  const Json* take(const std::string& key) {
    if (object_ != nullptr && object_->contains(key)) ctx_->read.insert(path(key));
    return has(key) ? &(*object_)[key] : nullptr;
  }

  Section child(const std::string& key) {
    const Json* value = take(key);
    if (value != nullptr && !value->is_object()) fail(key, "is not an object ({...})");
    return Section(value, path(key), ctx_);
  }

  bool boolean(const std::string& key, bool fallback) {
    const Json* value = take(key);
    if (value == nullptr) return fallback;
    if (!value->is_boolean()) fail(key, "is not a boolean (true or false)");
    return value->get<bool>();
  }

  // An integer in [min, max] (5e8 counts as an integer); nullopt when absent.
  std::optional<int64_t> integer(const std::string& key, int64_t min,
                                 int64_t max = std::numeric_limits<int64_t>::max()) {
    const Json* value = take(key);
    if (value == nullptr) return std::nullopt;
    const std::optional<int64_t> result = as_integer(*value);
    if (!result || *result < min || *result > max) {
      if (max >= std::numeric_limits<int>::max() && (min == 0 || min == 1)) {  // no bound worth naming
        fail(key, min == 1 ? "is not a positive integer" : "is not a non-negative integer");
      }
      fail(key, str("is not an integer in [", min, ", ", max, "]"));
    }
    return result;
  }

  std::string text(const std::string& key, const std::string& fallback) {
    const Json* value = take(key);
    if (value == nullptr) return fallback;
    if (!value->is_string()) fail(key, "is not a string");
    // A path or a name cut at the NUL would be another one, and every message about it cut short.
    if (value->get<std::string>().find('\0') != std::string::npos) fail(key, "holds a NUL character (\\u0000)");
    return value->get<std::string>();
  }

  enum class Sign { kAny, kNonNegative, kPositive };
  double number(const std::string& key, double fallback, Sign sign) {
    const Json* value = take(key);
    if (value == nullptr) return fallback;
    if (!value->is_number()) fail(key, "is not a number");
    const double d = value->get<double>();
    if (sign == Sign::kNonNegative && !(d >= 0)) fail(key, "must be >= 0");
    if (sign == Sign::kPositive && !(d > 0)) fail(key, "must be > 0");
    return d;
  }

  // Index of the value among `choices` (exact, or ignoring ASCII case); fallback when absent.
  size_t choice(const std::string& key, size_t fallback, const std::vector<std::string>& choices,
                bool ignore_case = false) {
    const Json* value = take(key);
    if (value == nullptr) return fallback;
    if (value->is_string()) {
      const std::string text = value->get<std::string>();
      for (size_t i = 0; i < choices.size(); ++i) {
        if (text == choices[i] || (ignore_case && strcasecmp(text.c_str(), choices[i].c_str()) == 0)) {
          return i;
        }
      }
    }
    std::string list;
    for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
    fail(key, "is not one of " + list);
  }

 private:
  const Json* object_;  // null: the section is absent
  std::string path_;
  Context* ctx_;
};

// The keys of `object` cohort did not read, depth first in file order; a key whose object cohort
// never entered is listed alone, not its contents.
inline void collect_unread(const Json& object, const std::string& prefix, const Context& ctx,
                           std::vector<std::string>* out) {
  for (const auto& item : object.items()) {
    const std::string path = join_path(prefix, item.key());
    if (item.value().is_null()) continue;  // null means the default, wherever it is
    if (ctx.read.count(path) == 0) {
      out->push_back(path);
    } else if (item.value().is_object()) {
      collect_unread(item.value(), path, ctx, out);
    }
  }
}

}  // namespace cohort::detail::ds_config
