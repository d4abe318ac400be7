// Worker output as lines: a splitter that turns pipe reads into whole lines (so lines of different
// ranks never interleave mid-line), the "[rankN]: " prefix (torchrun's TORCHELASTIC_LOG_LINE_PREFIX_
// TEMPLATE is honoured), and the tail of a stream kept for the failure summary.
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <vector>

namespace cohort::detail::launch {

/// Accumulates bytes and hands back complete lines without their '\n'. A line longer than
/// `max_line` is handed back in pieces of that size.
class LineSplitter {
 public:
  explicit LineSplitter(size_t max_line = 64 * 1024) : max_line_(max_line) {}
  std::vector<std::string> feed(const char* data, size_t size);
  /// The unterminated rest (at end of stream), or "" when there is none.
  std::string flush();

 private:
  size_t max_line_;
  std::string pending_;
};

/// The console prefix of a worker's lines. `template_text` uses Python string.Template syntax with
/// $rank, $local_rank, $role_name (torchrun's names); an empty template means "[rank${rank}]: ".
std::string expand_prefix(const std::string& template_text, int rank, int local_rank, const std::string& role);

/// The last `capacity` lines of a stream.
class TailBuffer {
 public:
  explicit TailBuffer(size_t capacity = 20) : capacity_(capacity) {}
  void push(std::string line);
  std::vector<std::string> lines() const { return {lines_.begin(), lines_.end()}; }

 private:
  size_t capacity_;
  std::deque<std::string> lines_;
};

}  // namespace cohort::detail::launch
