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

/// `text` parsed as Json (nlohmann::json, or ordered_json to keep the file's key order). Throws
/// cohort::Error of options.kind, starting with options.source, when the text is not JSON, nests
/// deeper than options.max_depth (refused while parsing: nothing deeper is ever built), or repeats a
/// key in one object under options.unique_keys ("duplicate key zero_optimization.stage").
template <typename Json = nlohmann::json>
Json parse_json(const std::string& text, const JsonReadOptions& options) {
  using Event = typename Json::parse_event_t;
  // The objects being read, outermost first: their keys so far and the last, whose value holds the
  // next. A repeated key's path is joined only once one is found, so reading stays linear in the text.
  struct Object {
    std::set<std::string> keys;
    std::string last;
  };
  std::vector<Object> objects;
  auto on_event = [&](int depth, Event event, Json& parsed) {
    if (event == Event::object_start || event == Event::array_start) {
      // `depth` counts the objects and arrays around this one.
      if (depth >= options.max_depth) json_read::refuse(options, json_read::too_deep(options));
      if (event == Event::object_start && options.unique_keys) objects.emplace_back();
    } else if (event == Event::object_end && options.unique_keys) {
      objects.pop_back();
    } else if (event == Event::key && options.unique_keys) {
      objects.back().last = parsed.template get<std::string>();
      if (!objects.back().keys.insert(objects.back().last).second) {
        std::string path;
        for (const Object& object : objects) path += (path.empty() ? "" : ".") + object.last;
        json_read::refuse(options, "duplicate key " + excerpt(path) + options.duplicate_note);
      }
    }
    return true;
  };
  try {
    return Json::parse(text, on_event, /*allow_exceptions=*/true, /*ignore_comments=*/options.comments);
  } catch (const typename Json::exception& error) {  // parse_error, and out_of_range for a number past double
    json_read::refuse(options, "not valid JSON: " + json_error_text(error));
  }
}

}  // namespace cohort::detail
