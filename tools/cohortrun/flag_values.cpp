// Pure parsers for cohortrun's flag values (see flag_values.h). Every error is one line that names
// the flag, quotes the value and shows the expected form, because it is all the user will see.
#include "cohortrun/flag_values.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <vector>

#include "cohort/error.h"
#include "cohort/number.h"
#include "world/node_room.h"

namespace cohort::detail::launch {
namespace {

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, sep)) parts.push_back(part);
  if (!text.empty() && text.back() == sep) parts.push_back("");
  return parts;
}

bool is_digits(const std::string& text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// The whole text as a finite number ("inf" would overflow the milliseconds it becomes), else nullopt.
std::optional<double> read_seconds(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0 || !std::isfinite(value)) return std::nullopt;
  return value;
}

}  // namespace

int StdSpec::for_rank(int local_rank) const {
  if (per_rank.empty()) return all;
  auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? kNone : it->second;
}

std::string Endpoint::str() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

// cohort's one integer parser (cohort/number.h), so a value too long for an int is "out of range"
// and every message reads as the examples' and the COHORT_* variables' do.
int parse_int(const std::string& what, const std::string& text, int min, int max) {
  try {
    return static_cast<int>(cohort::parse_integer(text, {what, min, max}));
  } catch (const cohort::Error& e) {
    throw UsageError(e.what());
  }
}

// A year: past it a deadline (now + seconds) overflows the clock's nanoseconds near 9.2e9 s, and
// --stop-timeout 1e10 killed the workers at once instead of waiting (hostile pass 5, m3).
static constexpr double kMaxSeconds = 31536000;

static double within_a_year(const std::string& what, const std::string& text, double value) {
  if (value > kMaxSeconds) throw UsageError(what + "=" + text + " is out of range: at most 31536000 seconds (a year)");
  return value;
}

double parse_seconds(const std::string& what, const std::string& text) {
  const std::optional<double> value = read_seconds(text);
  if (!value || *value < 0) throw UsageError(what + "=" + text + " is not a number of seconds >= 0");
  return within_a_year(what, text, *value);
}

double parse_positive_seconds(const std::string& what, const std::string& text) {
  const std::optional<double> value = read_seconds(text);
  if (!value || *value <= 0) throw UsageError(what + "=" + text + " is not a number of seconds > 0");
  return within_a_year(what, text, *value);
}

NodeRange parse_nnodes(const std::string& text, const std::string& what) {
  const auto parts = split(text, ':');
  NodeRange range;
  if (parts.size() == 1) {
    range.min = range.max = parse_int(what, text, 1, 1 << 20);
  } else if (parts.size() == 2) {
    range.min = parse_int(what, parts[0], 1, 1 << 20);
    range.max = parse_int(what, parts[1], 1, 1 << 20);
  } else {
    throw UsageError(what + "=" + text + " is not N or MIN:MAX");
  }
  if (range.min > range.max) {
    throw UsageError(what + "=" + text + ": MIN is larger than MAX");
  }
  return range;
}

int parse_nproc(const std::string& text, const HostFacts& host, const std::string& what) {
  if (text == "cpu") return host.cpu_count;
  if (text == "gpu") {
    if (host.gpu_count <= 0) {
      throw UsageError(what + "=gpu: no CUDA device is visible (use a number, cpu or auto)");
    }
    return host.gpu_count;
  }
  if (text == "auto") return host.gpu_count > 0 ? host.gpu_count : host.cpu_count;
  std::string digits = text;
  if (!digits.empty() && digits[0] == '-') digits = digits.substr(1);
  if (!is_digits(digits)) {
    throw UsageError(what + "=" + text + " is not a number, cpu, gpu or auto");
  }
  return parse_int(what, text, 1, 1 << 16);
}

void check_local_workers(int nproc, const std::string& what, const std::string& text, const HostFacts& host) {
  WorkerRoom room;
  room.workers = room.started = nproc;
  room.cores = host.allowed_cpus.empty() ? host.cpu_count : static_cast<int>(host.allowed_cpus.size());
  room.each = kLeastWorkerMemory;
  room.available = host.available_memory;
  room.asked = what + "=" + text;
  room.setting = what;
  room.elsewhere = "more nodes (--nnodes)";
  room.each_is = "what a LibTorch program takes when it starts";
  const std::string refusal = refuse_workers(room);
  if (!refusal.empty()) throw UsageError(refusal);
}

Endpoint parse_endpoint(const std::string& text, int default_port) {
  Endpoint endpoint;
  std::string port_text;
  if (!text.empty() && text[0] == '[') {  // [v6addr] or [v6addr]:port
    const auto close = text.find(']');
    if (close == std::string::npos || close == 1) {
      throw UsageError("--rdzv-endpoint=" + text + " is not HOST[:PORT]");
    }
    endpoint.host = text.substr(1, close - 1);
    const std::string rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') throw UsageError("--rdzv-endpoint=" + text + " is not HOST[:PORT]");
      port_text = rest.substr(1);
      if (port_text.empty()) throw UsageError("--rdzv-endpoint=" + text + " has an empty port");
    }
  } else {
    const auto colon = text.find(':');
    if (colon != std::string::npos && text.find(':', colon + 1) != std::string::npos) {
      throw UsageError("--rdzv-endpoint=" + text + " is not HOST[:PORT] (write IPv6 as [ADDR]:PORT)");
    }
    endpoint.host = text.substr(0, colon);
    if (colon != std::string::npos) {
      port_text = text.substr(colon + 1);
      if (port_text.empty()) throw UsageError("--rdzv-endpoint=" + text + " has an empty port");
    }
  }
  if (endpoint.host.empty()) throw UsageError("--rdzv-endpoint=" + text + " has no host");
  for (char c : endpoint.host) {
    if (c == ' ' || c == '/' || c == '\t') {
      throw UsageError("--rdzv-endpoint=" + text + " has a malformed host");
    }
  }
  endpoint.port = port_text.empty() ? default_port : parse_int("--rdzv-endpoint port", port_text, 1, 65535);
  return endpoint;
}

StdSpec parse_std_spec(const std::string& flag, const std::string& text) {
  StdSpec spec;
  const auto bad = [&] {
    return UsageError(flag + "=" + text + " is not 0-3 or a map like 0:1,1:2 (local rank:value)");
  };
  if (is_digits(text)) {
    if (text.size() != 1 || text[0] > '3') throw bad();
    spec.all = text[0] - '0';
    return spec;
  }
  for (const auto& item : split(text, ',')) {
    const auto colon = item.find(':');
    if (colon == std::string::npos) throw bad();
    const std::string rank = item.substr(0, colon), value = item.substr(colon + 1);
    if (!is_digits(rank) || rank.size() > 6 || value.size() != 1 || value[0] < '0' || value[0] > '3') {
      throw bad();
    }
    // "0:1,0:2" would keep one of the two silently.
    if (!spec.per_rank.emplace(std::stoi(rank), value[0] - '0').second) {
      throw UsageError(flag + "=" + text + ": local rank " + std::to_string(std::stoi(rank)) +
                       " is given twice: give each local rank once");
    }
  }
  if (spec.per_rank.empty()) throw bad();
  return spec;
}

std::map<std::string, std::string> parse_key_values(const std::string& text) {
  std::map<std::string, std::string> values;
  if (text.empty()) return values;
  for (const auto& item : split(text, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw UsageError("--rdzv-conf=" + text + " is not key=value,key2=value2");
    }
    values[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return values;
}

std::set<int> parse_rank_list(const std::string& text) {
  std::set<int> ranks;
  for (const auto& item : split(text, ',')) {
    if (!is_digits(item) || item.size() > 6) {
      throw UsageError("--local-ranks-filter=" + text + " is not a list of local ranks like 0,1");
    }
    ranks.insert(std::stoi(item));
  }
  if (ranks.empty()) {
    throw UsageError("--local-ranks-filter=" + text + " is not a list of local ranks like 0,1");
  }
  return ranks;
}

}  // namespace cohort::detail::launch
