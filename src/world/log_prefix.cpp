// Line splitting, prefix templates and stream tails for worker output (see log_prefix.h).
#include "world/log_prefix.h"

#include <cctype>

namespace cohort::detail::launch {

std::vector<std::string> LineSplitter::feed(const char* data, size_t size) {
  std::vector<std::string> lines;
  pending_.append(data, size);
  size_t start = 0;
  while (true) {
    const size_t newline = pending_.find('\n', start);
    if (newline == std::string::npos) break;
    lines.push_back(pending_.substr(start, newline - start));
    start = newline + 1;
  }
  pending_.erase(0, start);
  while (pending_.size() >= max_line_) {
    lines.push_back(pending_.substr(0, max_line_));
    pending_.erase(0, max_line_);
  }
  return lines;
}

std::string LineSplitter::flush() {
  std::string rest;
  rest.swap(pending_);
  return rest;
}

std::string expand_prefix(const std::string& template_text, int rank, int local_rank, const std::string& role) {
  const std::string text = template_text.empty() ? "[rank${rank}]: " : template_text;
  const auto value = [&](const std::string& name, std::string* out) {
    if (name == "rank") *out = std::to_string(rank);
    else if (name == "local_rank") *out = std::to_string(local_rank);
    else if (name == "role_name") *out = role;
    else return false;
    return true;
  };
  std::string result;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '$' || i + 1 >= text.size()) {
      result += text[i];
      continue;
    }
    if (text[i + 1] == '$') {  // $$ is a literal $
      result += '$';
      ++i;
      continue;
    }
    std::string name, replacement;
    size_t end = i + 1;
    if (text[end] == '{') {
      const size_t close = text.find('}', end);
      if (close == std::string::npos) {
        result += text[i];
        continue;
      }
      name = text.substr(end + 1, close - end - 1);
      end = close + 1;
    } else {
      while (end < text.size() && (std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '_')) {
        name += text[end++];
      }
    }
    if (value(name, &replacement)) {  // safe_substitute: unknown names stay as written
      result += replacement;
      i = end - 1;
    } else {
      result += text[i];
    }
  }
  return result;
}

void TailBuffer::push(std::string line) {
  if (capacity_ == 0) return;
  if (lines_.size() == capacity_) lines_.pop_front();
  lines_.push_back(std::move(line));
}

}  // namespace cohort::detail::launch
