// Reading JSON that may be hostile (a user's ds_config, a damaged manifest, a trace, a safetensors
// header): nesting bounded while parsing, repeated keys refused with their path, nlohmann's errors in
// cohort's words (never its "[json.exception...]" tag), and excerpts of values that never serialize
// more than they show. Header-only: templates over nlohmann::json and ordered_json.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "cohort/error.h"
#include "core/text.h"

namespace cohort::detail {

// Deepest nesting of objects and arrays parse_json accepts unless told otherwise. nlohmann parses any
// depth without recursion, but copying, dump(), comparing and cohort's own walks of a value recurse once
// per level: a 100,000-deep trace overflowed cohort-trace's stack, and each level is an allocation (an
// 80 MB header of '[' cost 3.2 GB). The files cohort reads nest 5 levels at most; 64 leaves users room in
// their own values and keeps every recursion over a parsed value a few KB of stack.
inline constexpr int kMaxJsonDepth = 64;

/// How parse_json reads a text and words its errors.
struct JsonReadOptions {
  std::string source;    ///< what every error names first: "ds_config deep.json", "<path>: the 80-byte header"
  std::string document;  ///< what the text should be, for the depth error: "no <document> nests so deep"
  ErrorKind kind = ErrorKind::kInvalidArgument;  ///< of its errors: kIO for a file cohort wrote, now damaged
  int max_depth = kMaxJsonDepth;                 ///< objects and arrays nested deeper are refused while parsing
  bool comments = false;                         ///< accept // and /* */ comments (DeepSpeed's hjson does)
  bool unique_keys = false;                      ///< refuse a key repeated in one object (nlohmann would keep the last)
  std::string duplicate_note;  ///< said after "duplicate key a.b", e.g. " (DeepSpeed refuses them too)"
  /// Objects with more keys are refused while parsing (0: no limit). For ordered_json, whose objects
  /// find each new key by a linear search: 50,000 keys in one object took 5 s to read.
  int64_t max_object_keys = 0;
};

/// Why nlohmann refused a text or a value, in cohort's words: its message without the
/// "[json.exception.parse_error.101] " tag ("parse error at line 3, column 8: syntax error while parsing
/// object - unexpected string literal; expected '}'"), bounded by excerpt() as it quotes the input.
inline std::string json_error_text(const std::exception& error) {
  std::string what = error.what();
  const size_t tag_end = what.find("] ");
  if (what.rfind("[json.exception.", 0) == 0 && tag_end != std::string::npos) what.erase(0, tag_end + 2);
  return excerpt(what);
}

namespace json_read {

[[noreturn]] inline void refuse(const JsonReadOptions& options, const std::string& why) {
  throw Error(options.source + ": " + why, options.kind);
}

inline std::string too_deep(const JsonReadOptions& options) {
  return "objects and arrays nested more than " + std::to_string(options.max_depth) + " levels deep" +
         (options.document.empty() ? "" : ": no " + options.document + " nests so deep");
}

template <typename Json>
void append_excerpt(const Json& value, size_t limit, std::string* out) {
  // Each level adds a character before going deeper, so the recursion ends within `limit` levels.
  if (out->size() > limit) return;
  auto quoted = [&](const std::string& text) {  // as dump() writes it, cut just past the limit
    const std::string cut = text.substr(0, limit + 1 - std::min(limit + 1, out->size()));
    *out += Json(cut).dump(-1, ' ', false, Json::error_handler_t::replace);  // a cut UTF-8 sequence is fine
  };
  if (value.is_string()) return quoted(value.template get_ref<const std::string&>());
  if (!value.is_structured()) {
    *out += value.dump();
    return;
  }
  *out += value.is_array() ? '[' : '{';
  for (auto it = value.begin(); it != value.end() && out->size() <= limit; ++it) {
    if (it != value.begin()) *out += ',';
    if (value.is_object()) {
      quoted(it.key());
      *out += ':';
    }
    append_excerpt(*it, limit, out);
  }
  *out += value.is_array() ? ']' : '}';
}

}  // namespace json_read

/// What a message may quote of a JSON value of any size or depth: its first `max_chars` characters as
/// dump() writes them (printable() escapes the rest of the bytes), then "..." when there is more. Never
/// serializes more than that, so a huge or deeply nested value costs nothing to quote.
template <typename Json>
std::string json_excerpt(const Json& value, size_t max_chars = 200) {
  std::string out;
  json_read::append_excerpt(value, max_chars, &out);
  if (out.size() <= max_chars) return printable(out);
  return printable(out.substr(0, max_chars)) + "...";
}

namespace json_read {

// The first of parse_json's two passes: nlohmann's SAX parser with a handler that builds nothing and
// checks what the DOM parser cannot check cheaply. Nesting deeper than max_depth is refused at the
// first level too deep (nothing has been allocated for it), a repeated key with its path. The
// checks are linear in the text: nlohmann's callback parser would check the same but walks the
// whole enclosing array each time an object ends, which made an array of n objects cost n^2.
template <typename Json>
class Checker {
 public:
  using number_integer_t = typename Json::number_integer_t;
  using number_unsigned_t = typename Json::number_unsigned_t;
  using number_float_t = typename Json::number_float_t;
  using string_t = typename Json::string_t;
  using binary_t = typename Json::binary_t;

  explicit Checker(const JsonReadOptions& options) : options_(options) {}
  bool null() { return value(); }
  bool boolean(bool) { return value(); }
  bool number_integer(number_integer_t) { return value(); }
  bool number_unsigned(number_unsigned_t) { return value(); }
  bool number_float(number_float_t, const string_t&) { return value(); }
  bool string(string_t&) { return value(); }
  bool binary(binary_t&) { return value(); }
  bool start_object(std::size_t) {
    value();
    enter();
    if (tracks_objects()) objects_.emplace_back();
    return true;
  }
  bool key(string_t& key) {
    if (!tracks_objects()) return true;
    if (options_.max_object_keys > 0 && ++objects_.back().count > options_.max_object_keys)
      refuse(options_, "an object with more than " + std::to_string(options_.max_object_keys) + " keys" +
                           (options_.document.empty() ? "" : ": no " + options_.document + " has so many"));
    if (!options_.unique_keys) return true;
    objects_.back().last = key;
    if (!objects_.back().keys.insert(key).second) {
      // The path is joined only once a key repeats, so reading stays linear.
      std::string path;
      for (const Object& object : objects_) path += (path.empty() ? "" : ".") + object.last;
      refuse(options_, "duplicate key " + excerpt(path) + options_.duplicate_note);
    }
    return true;
  }
  bool end_object() {
    --depth_;
    if (tracks_objects()) objects_.pop_back();
    return true;
  }
  bool start_array(std::size_t) {
    if (depth_ == 0) top_is_array_ = true;
    value();
    enter();
    return true;
  }
  bool end_array() {
    --depth_;
    return true;
  }
  template <typename Exception>
  bool parse_error(std::size_t, const std::string&, const Exception& error) {
    refuse(options_, "not valid JSON: " + json_error_text(error));
  }
  bool top_is_array() const { return top_is_array_; }
  int64_t top_elements() const { return top_elements_; }  ///< of the top-level array or object

 private:
  // The objects being read, outermost first: their keys so far and the last, whose value holds the next.
  struct Object {
    std::set<std::string> keys;
    std::string last;
    int64_t count = 0;
  };
  bool value() {
    if (depth_ == 1) ++top_elements_;
    return true;
  }
  bool tracks_objects() const { return options_.unique_keys || options_.max_object_keys > 0; }
  void enter() {
    if (depth_ >= options_.max_depth) refuse(options_, too_deep(options_));
    ++depth_;
  }
  const JsonReadOptions& options_;
  int depth_ = 0;  // objects and arrays open around the next value
  std::vector<Object> objects_;
  bool top_is_array_ = false;
  int64_t top_elements_ = 0;
};

}  // namespace json_read

/// `text` parsed as Json (nlohmann::json, or ordered_json to keep the file's key order). Throws
/// cohort::Error of options.kind, starting with options.source, when the text is not JSON, nests
/// deeper than options.max_depth (refused while parsing: nothing deeper is ever built), or repeats a
/// key in one object under options.unique_keys ("duplicate key zero_optimization.stage"). Linear in
/// the text: a checking pass (json_read::Checker), then nlohmann's plain parser.
template <typename Json = nlohmann::json>
Json parse_json(const std::string& text, const JsonReadOptions& options) {
  // nlohmann's reader ends the text at a NUL byte: what followed one was read as if never written.
  if (const size_t nul = text.find('\0'); nul != std::string::npos)
    json_read::refuse(options, "not valid JSON: a NUL byte at offset " + std::to_string(nul));
  try {
    json_read::Checker<Json> checker(options);
    Json::sax_parse(text, &checker, Json::input_format_t::json, /*strict=*/true,
                    /*ignore_comments=*/options.comments);
    return Json::parse(text, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/options.comments);
  } catch (const typename Json::exception& error) {  // out_of_range for a number past double, and the like
    json_read::refuse(options, "not valid JSON: " + json_error_text(error));
  }
}

/// Checks `text` as parse_json does, without building it, and counts the elements of its top-level array:
/// for a text that is only passed on (the timeline splices each rank's array of events into one). Throws
/// as parse_json does, and when the top-level value is not an array.
inline int64_t check_json_array(const std::string& text, const JsonReadOptions& options) {
  if (const size_t nul = text.find('\0'); nul != std::string::npos)
    json_read::refuse(options, "not valid JSON: a NUL byte at offset " + std::to_string(nul));
  json_read::Checker<nlohmann::json> checker(options);
  try {
    nlohmann::json::sax_parse(text, &checker, nlohmann::json::input_format_t::json, /*strict=*/true,
                              /*ignore_comments=*/options.comments);
  } catch (const nlohmann::json::exception& error) {
    json_read::refuse(options, "not valid JSON: " + json_error_text(error));
  }
  if (!checker.top_is_array()) json_read::refuse(options, "not a JSON array");
  return checker.top_elements();
}

}  // namespace cohort::detail
