// A node's room for worker processes (see node_room.h).
#include "world/node_room.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace cohort::detail {

int usable_cores() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return std::max(1, int(::sysconf(_SC_NPROCESSORS_ONLN)));
}

int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return -1;
  return resident * ::sysconf(_SC_PAGESIZE);
}

int64_t available_memory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0, available = -1;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") available = kib * 1024;
  std::ifstream max_file("/sys/fs/cgroup/memory.max"), current_file("/sys/fs/cgroup/memory.current");
  int64_t limit = 0, used = 0;
  if (max_file >> limit && current_file >> used) {  // "max" (no limit) fails the read
    const int64_t room = std::max<int64_t>(0, limit - used);
    available = available < 0 ? room : std::min(available, room);
  }
  return available;
}

std::string megabytes(int64_t bytes) { return std::to_string((bytes + 999999) / 1000000) + " MB"; }

std::string refuse_workers(const WorkerRoom& room) {
  std::ostringstream out;
  const int per_cores = kProcessesPerCore * room.cores;
  if (room.workers > per_cores) {
    out << room.asked << " would start " << room.workers << " processes on the " << room.cores
        << " core(s) this process may use (at most " << kProcessesPerCore << " per core): use " << room.setting << " "
        << per_cores << " or fewer, or " << room.elsewhere;
    return out.str();
  }
  const int64_t needed = room.each * room.started;
  if (room.each <= 0 || room.available < 0 || needed <= room.available) return "";
  const int64_t fits = room.available / room.each + (room.workers - room.started);
  out << room.asked << " would start " << room.started << (room.started < room.workers ? " more" : "")
      << " processes of at least " << megabytes(room.each) << " each (" << room.each_is << "), " << megabytes(needed)
      << " in all, more than the " << megabytes(room.available) << " available on this node: use " << room.setting
      << " " << std::max<int64_t>(1, fits) << " or fewer, or " << room.elsewhere;
  return out.str();
}

}  // namespace cohort::detail
