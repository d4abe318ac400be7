// The examples' memory check: a job's estimated bytes per rank against the memory this node can still
// give each local rank (MemAvailable, or less under a cgroup limit), refused in one line before
// anything large is allocated, instead of LibTorch's allocator text or the kernel's OOM killer. Each
// example estimates its own need (fashion_mnist/resources.cpp: one CNN step; gpt/train.cpp: a GPT and AdamW).
#pragma once

#include <cohort/ddp.h>  // reduce_metrics
#include <cohort/error.h>
#include <cohort/number.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <new>
#include <sstream>
#include <string>

namespace examples {

/// A number in a cgroup v2 file ("max" or absent: -1).
inline int64_t read_cgroup(const char* path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return -1;
  try {
    return cohort::parse_integer(text, {path, 0});
  } catch (const cohort::Error&) {
    return -1;
  }
}

/// This process's memory cgroup under cgroup v1 ("/sys/fs/cgroup/memory/<path>"), "" when none.
inline std::string cgroup_v1_memory_dir() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':'), second = line.find(':', colon + 1);
    if (colon == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = "," + line.substr(colon + 1, second - colon - 1) + ",";
    if (controllers.find(",memory,") != std::string::npos) return "/sys/fs/cgroup/memory" + line.substr(second + 1);
  }
  return "";
}

/// Memory this process can still get: MemAvailable, or less when a cgroup limit (v2, or v1's memory
/// controller, as bench/gpt/largest.sh sets one) is closer; -1 when unknown.
inline int64_t available_memory_bytes() {
  int64_t available = -1;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") available = kib * 1024;
  }
  int64_t limit = read_cgroup("/sys/fs/cgroup/memory.max");
  int64_t used = read_cgroup("/sys/fs/cgroup/memory.current");
  if (const std::string v1 = cgroup_v1_memory_dir(); limit < 0 && !v1.empty()) {
    limit = read_cgroup((v1 + "/memory.limit_in_bytes").c_str());
    used = read_cgroup((v1 + "/memory.usage_in_bytes").c_str());
    if (limit >= (int64_t(1) << 60)) limit = -1;  // v1 writes "no limit" as a huge number
  }
  if (limit >= 0 && used >= 0) {
    const int64_t room = std::max<int64_t>(0, limit - used);
    available = available < 0 ? room : std::min(available, room);
  }
  return available;
}

/// "1.5 GB", "2.5 TB" (1e9 / 1e12 bytes).
inline std::string format_bytes(int64_t bytes) {
  char text[32];
  if (bytes >= 1000000000000) std::snprintf(text, sizeof text, "%.1f TB", bytes / 1e12);
  else if (bytes >= 1000000000) std::snprintf(text, sizeof text, "%.1f GB", bytes / 1e9);
  else std::snprintf(text, sizeof text, "%.1f MB", bytes / 1e6);
  return text;
}

/// What a job asks of each rank's memory, in the words of its refusal.
struct MemoryNeed {
  std::string asked;   ///< what the user asked for, with the flags: "--batch-size 64"
  int64_t bytes = 0;   ///< the estimate, per rank
  std::string what;    ///< what the bytes hold: "for one training step"
  std::string lower;   ///< the fix: "lower --batch-size"
};

/// "" when `need` fits in `available` bytes shared by `local_ranks` ranks (or `available` is unknown),
/// else the refusal: "<asked> needs an estimated X per rank <what>, more than the Y available to each
/// of the N rank(s) on this node: <lower>, or pass --no-memory-check to try anyway".
inline std::string memory_refusal(const MemoryNeed& need, int local_ranks, int64_t available) {
  const int64_t per_rank = available / std::max(1, local_ranks);
  if (available < 0 || need.bytes <= per_rank) return "";
  std::ostringstream out;
  out << need.asked << " needs an estimated " << format_bytes(need.bytes) << " per rank " << need.what
      << ", more than the " << format_bytes(per_rank) << " available to each of the " << local_ranks
      << " rank(s) on this node: " << need.lower << ", or pass --no-memory-check to try anyway";
  return out.str();
}

/// Every rank's refusal (or "") agreed on by all (a collective: every rank calls it at the same point),
/// so all refuse together rather than some waiting forever for the others: a rank that refused throws
/// its refusal, the others say that `what` was refused elsewhere.
inline void refuse_together(const std::string& refusal, const std::string& what) {
  const auto refusing = cohort::reduce_metrics({torch::tensor(int64_t(refusal.empty() ? 0 : 1))});
  if (refusing[0].item<int64_t>() == 0) return;
  if (refusal.empty())
    throw cohort::Error("another rank refused " + what + ": it needs more memory than that rank's node has available",
                        cohort::ErrorKind::kOutOfMemory);
  throw cohort::Error(refusal, cohort::ErrorKind::kOutOfMemory);
}

/// The bytes of a failed allocation in LibTorch's text ("... you tried to allocate 51539607552 bytes ..."), or "".
inline std::string allocation_size(const std::string& text) {
  const size_t at = text.find("allocate ");
  if (at == std::string::npos) return "";
  try {
    const std::string digits = text.substr(at + 9, text.find(' ', at + 9) - at - 9);
    return format_bytes(cohort::parse_integer(digits, {"an allocation's size", 0}));
  } catch (const cohort::Error&) {
    return "";
  }
}

/// Runs `run`; an allocation that failed under it (LibTorch's CPU allocator, CUDA's OutOfMemoryError,
/// std::bad_alloc) becomes one cohort::Error of kind kOutOfMemory that says `what` ran out and how much
/// it asked for, with `hint` after it, instead of LibTorch's enforce text. Other errors pass unchanged.
template <class Run>
void run_reporting_memory(const std::string& what, const std::string& hint, Run&& run) {
  const auto ran_out = [&](const char* memory, const std::string& size) {
    return cohort::Error(what + " ran out of " + memory + " memory" +
                             (size.empty() ? std::string() : ": an allocation of " + size + " failed") + hint,
                         cohort::ErrorKind::kOutOfMemory);
  };
  try {
    run();
  } catch (const c10::OutOfMemoryError& e) {  // CUDA's text says the sizes itself ("Tried to allocate 2.00 GiB ...")
    const std::string text = e.what_without_backtrace();
    throw cohort::Error(what + " ran out of device memory: " + text.substr(0, text.find('\n')) + hint,
                        cohort::ErrorKind::kOutOfMemory);
  } catch (const c10::Error& e) {
    const std::string text = e.what_without_backtrace();
    if (text.find("DefaultCPUAllocator") == std::string::npos) throw;
    throw ran_out("host", allocation_size(text));
  } catch (const std::bad_alloc&) {
    throw ran_out("host", "");
  }
}

}  // namespace examples
