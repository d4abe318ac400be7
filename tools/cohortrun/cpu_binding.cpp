// CPU placement of local ranks (see cpu_binding.h). Only allowed_host_cpus() looks at the machine;
// the rest are pure functions of its answer, tested with made-up topologies.
#include "cohortrun/cpu_binding.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <tuple>

namespace cohort::detail::launch {
namespace {

constexpr const char* kThreadVariables[] = {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"};
constexpr int kMaxCpu = 1 << 16;  // far above any machine; bounds the list parser and the mask

int read_topology(int cpu, const char* name, int fallback) {
  std::ifstream in("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/" + name);
  int value = fallback;
  return in >> value ? value : fallback;
}

// "12" -> 12; -1 unless the whole text is a number up to kMaxCpu.
int cpu_number(const std::string& text) {
  if (text.empty() || text.size() > 6) return -1;
  for (char c : text) {
    if (c < '0' || c > '9') return -1;
  }
  const int value = std::stoi(text);
  return value < kMaxCpu ? value : -1;
}

}  // namespace

std::vector<HostCpu> allowed_host_cpus() {
  // A mask for kMaxCpu CPUs: CPU_SETSIZE (1024) is too small for the largest machines.
  const size_t bytes = CPU_ALLOC_SIZE(kMaxCpu);
  std::unique_ptr<cpu_set_t, void (*)(cpu_set_t*)> mask(CPU_ALLOC(kMaxCpu), [](cpu_set_t* set) { CPU_FREE(set); });
  std::vector<HostCpu> cpus;
  if (!mask || ::sched_getaffinity(0, bytes, mask.get()) != 0) return cpus;
  for (int cpu = 0; cpu < kMaxCpu; ++cpu) {
    if (!CPU_ISSET_S(cpu, bytes, mask.get())) continue;
    cpus.push_back({cpu, read_topology(cpu, "physical_package_id", 0), read_topology(cpu, "core_id", -1)});
  }
  return cpus;
}

std::vector<int> parse_cpu_list(const std::string& flag, const std::string& text) {
  const auto bad = [&] {
    return UsageError(flag + "=" + text + " is not a CPU list like 0-3,8 (CPU numbers, ranges A-B with A <= B)");
  };
  std::vector<int> cpus;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    const size_t dash = item.find('-');
    const int first = cpu_number(item.substr(0, dash));
    const int last = dash == std::string::npos ? first : cpu_number(item.substr(dash + 1));
    if (first < 0 || last < first) throw bad();
    for (int cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
    start = comma + 1;
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string format_cpu_list(std::vector<int> cpus) {
  std::sort(cpus.begin(), cpus.end());
  std::string text;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    text += (text.empty() ? "" : ",") + std::to_string(cpus[i]);
    if (j > i) text += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return text;
}

std::vector<std::vector<int>> split_cpus(std::vector<HostCpu> pool, int nproc) {
  // A CPU whose core is unknown is a core of its own: ordered by its number among the others.
  std::stable_sort(pool.begin(), pool.end(), [](const HostCpu& a, const HostCpu& b) {
    const int core_a = a.core < 0 ? a.cpu : a.core, core_b = b.core < 0 ? b.cpu : b.core;
    return std::tie(a.package, core_a, a.cpu) < std::tie(b.package, core_b, b.cpu);
  });
  std::vector<std::vector<int>> ranks(static_cast<size_t>(std::max(nproc, 0)));
  const size_t each = nproc > 0 ? pool.size() / static_cast<size_t>(nproc) : 0;
  const size_t extra = nproc > 0 ? pool.size() % static_cast<size_t>(nproc) : 0;
  size_t next = 0;
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    const size_t count = each + (rank < extra ? 1 : 0);
    for (size_t i = 0; i < count; ++i) ranks[rank].push_back(pool[next++].cpu);
    std::sort(ranks[rank].begin(), ranks[rank].end());
  }
  return ranks;
}

std::vector<std::vector<int>> bind_local_ranks(const LaunchOptions& options, const std::vector<HostCpu>& allowed) {
  std::vector<HostCpu> pool = allowed;
  std::vector<int> allowed_numbers;
  for (const auto& cpu : allowed) allowed_numbers.push_back(cpu.cpu);
  std::string source = "this process may use " + std::to_string(allowed.size()) + " (CPUs " +
                       format_cpu_list(allowed_numbers) + ")";
  if (!options.core_list.empty()) {
    pool.clear();
    for (int cpu : parse_cpu_list("--core-list", options.core_list)) {
      const auto found = std::find_if(allowed.begin(), allowed.end(), [&](const HostCpu& c) { return c.cpu == cpu; });
      if (found == allowed.end()) {
        throw UsageError("--core-list=" + options.core_list + ": CPU " + std::to_string(cpu) +
                         " is not one this process may use (CPUs " + format_cpu_list(allowed_numbers) + ")");
      }
      pool.push_back(*found);
    }
    source = "--core-list=" + options.core_list + " has " + std::to_string(pool.size());
  }
  if (static_cast<int>(pool.size()) < options.nproc) {
    throw UsageError("--bind-cores needs a core per local rank: --nproc-per-node=" + options.nproc_per_node +
                     " starts " + std::to_string(options.nproc) + " but " + source);
  }
  return split_cpus(std::move(pool), options.nproc);
}

void set_thread_counts(EnvVars& env, const EnvVars& user, size_t cpu_count) {
  for (const char* name : kThreadVariables) {
    if (!user.count(name)) env[name] = std::to_string(cpu_count);
  }
}

std::string describe_binding(int local_rank, const std::vector<int>& cpus, const EnvVars& user) {
  EnvVars env;
  set_thread_counts(env, user, cpus.size());
  const auto omp = env.count("OMP_NUM_THREADS") ? env.at("OMP_NUM_THREADS") : user.at("OMP_NUM_THREADS");
  return "--bind-cores: local rank " + std::to_string(local_rank) + " -> CPUs " + format_cpu_list(cpus) +
         " (OMP_NUM_THREADS=" + omp + ")";
}

}  // namespace cohort::detail::launch
