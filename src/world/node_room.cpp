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

namespace {

// A number in a cgroup file; -1 for "max", a missing file or anything else.
int64_t cgroup_number(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text.empty() || text.size() > 19 || text.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stoll(text);
}

// The least room (limit less usage) over a cgroup directory and its ancestors up to `root`: a limit
// set on a parent (a job's, a user's slice) holds the processes below it too. -1 when none is set.
int64_t room_along(const std::string& root, std::string path, const char* limit_file, const char* usage_file) {
  int64_t room = -1;
  while (true) {
    const int64_t limit = cgroup_number(root + path + "/" + limit_file);
    const int64_t usage = cgroup_number(root + path + "/" + usage_file);
    if (limit >= 0 && limit < (int64_t(1) << 60) && usage >= 0) {  // v1 writes "no limit" as ~2^63
      const int64_t here = std::max<int64_t>(0, limit - usage);
      room = room < 0 ? here : std::min(room, here);
    }
    if (path.empty() || path == "/") return room;
    path = path.substr(0, path.rfind('/'));
  }
}

}  // namespace

int64_t cgroup_memory_room(const std::string& proc_cgroup, const std::string& cgroup_root) {
  std::istringstream in(proc_cgroup);
  std::string line;
  int64_t room = -1;
  const auto take = [&](int64_t more) { room = more < 0 ? room : room < 0 ? more : std::min(room, more); };
  while (std::getline(in, line)) {
    const size_t colon = line.find(':'), second = line.find(':', colon + 1);
    if (colon == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = "," + line.substr(colon + 1, second - colon - 1) + ",";
    const std::string path = line.substr(second + 1);
    if (line.compare(0, 3, "0::") == 0) take(room_along(cgroup_root, path, "memory.max", "memory.current"));
    if (controllers.find(",memory,") != std::string::npos)
      take(room_along(cgroup_root + "/memory", path, "memory.limit_in_bytes", "memory.usage_in_bytes"));
  }
  return room;
}

int64_t available_memory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0, available = -1;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") available = kib * 1024;
  // Hostile pass 7, M1: only the root's memory.max was read; a v1 limit or one on this process's own
  // v2 cgroup let --devices 4 start under 250 MB and the kernel killed a rank.
  std::ifstream self("/proc/self/cgroup");
  std::stringstream text;
  text << self.rdbuf();
  const int64_t room = cgroup_memory_room(text.str(), "/sys/fs/cgroup");
  if (room >= 0) available = available < 0 ? room : std::min(available, room);
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
