// Durable filesystem steps (see files.h).
#include "checkpoint/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "checkpoint/layout.h"
#include "cohort/error.h"

namespace fs = std::filesystem;

namespace cohort::detail::ckpt {

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  COHORT_CHECK(fd >= 0, "cannot create ", tmp, ": ", std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      throw Error("cannot write " + tmp + ": " + why);
    }
    done += static_cast<size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  COHORT_CHECK(synced, "cannot flush ", tmp, " to disk: ", std::strerror(errno));
  COHORT_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename ", tmp, " to ", path, ": ",
               std::strerror(errno));
}

void sync_directory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: some filesystems do not allow opening directories
  (void)::fsync(fd);
  ::close(fd);
}

std::vector<std::pair<int64_t, std::string>> step_directories(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code error;
  for (const auto& item : fs::directory_iterator(root, error)) {
    const auto step = parse_step_dir(item.path().filename().string());
    if (step && item.is_directory()) out.emplace_back(*step, item.path().string());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

std::string read_latest(const std::string& root) {
  std::ifstream in(root + "/latest");
  std::string name;
  if (in) std::getline(in, name);
  while (!name.empty() && (name.back() == '\r' || name.back() == ' ')) name.pop_back();
  return name;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

}  // namespace cohort::detail::ckpt
