// The checkpoint's filesystem steps and path confinement (see files.h). A checkpoint directory may
// come from anyone (a shared scratch space, a copy from another user): nothing it names is opened
// before the name is checked to stay inside it.
#include "checkpoint/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "checkpoint/layout.h"
#include "cohort/error.h"
#include "core/safe_file.h"
#include "core/text.h"

namespace fs = std::filesystem;

namespace cohort::detail::ckpt {
namespace {

// `latest` holds "step-<n>\n": anything much longer is not a pointer, and is not read whole.
constexpr int64_t kMaxLatestBytes = 4096;

}  // namespace

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
    if (step && item.symlink_status(error).type() == fs::file_type::directory)
      out.emplace_back(*step, item.path().string());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

std::string read_latest(const std::string& root) {
  const std::string file = (fs::path(root) / "latest").string();
  struct stat info {};
  if (::lstat(file.c_str(), &info) != 0 && errno == ENOENT) return "";
  std::string name;
  try {
    name = read_own_file(file, "the checkpoint pointer", kMaxLatestBytes);  // a link, a device, 5 MB: refused
  } catch (const Error& e) {
    throw CheckpointPathError(e.what());
  }
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' ')) name.pop_back();
  if (name.empty()) return "";
  if (!parse_step_dir(name)) {
    throw CheckpointPathError(file + " names '" + excerpt(name) + "', not a step-<n> directory of " + root +
                              ": the pointer must name one of the checkpoint's own step directories; nothing was read");
  }
  const std::string dir = (fs::path(root) / name).string();
  if (!path_inside(root, dir)) {
    throw CheckpointPathError(file + " names " + name + ", a link that leads out of " + root +
                              ": a checkpoint's step directories are its own; nothing was read");
  }
  return dir;
}

void check_file_name(const std::string& name, const std::string& where) {
  const bool plain = !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
                     name.find('\0') == std::string::npos;
  if (!plain) {
    throw CheckpointPathError(where + ": file name '" + excerpt(name) + "' is not a plain name inside the step " +
                              "directory (a checkpoint's files are its own); nothing was read");
  }
}

bool path_inside(const std::string& dir, const std::string& path) {
  const auto resolved = [](const std::string& p, fs::path* out) {
    std::error_code error;
    *out = fs::weakly_canonical(p, error);
    if (!out->empty() && out->filename().empty()) *out = out->parent_path();  // "dir/" is dir
    return !error && !out->empty();
  };
  fs::path outer, inner;
  if (!resolved(dir, &outer) || !resolved(path, &inner)) return false;  // a loop: not known to be inside
  return std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end()).first == outer.end();
}

bool path_exists(const std::string& path) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (error && error != std::errc::no_such_file_or_directory) {
    throw Error("checkpoint path " + path + " cannot be read: " + error.message(), ErrorKind::kIO);
  }
  return fs::exists(status);
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string latest_step_to_load(const std::string& root, bool* replaced) {
  const std::string latest = read_latest(root);
  if (replaced != nullptr) *replaced = false;
  if (latest.empty() || path_exists(latest)) return latest;
  const std::filesystem::path aside = std::filesystem::path(root) /
                                      old_copy_name(std::filesystem::path(latest).filename().string());
  if (std::filesystem::is_symlink(aside) || !path_exists((aside / "manifest.json").string())) return latest;
  if (replaced != nullptr) *replaced = true;
  return aside.string();
}

}  // namespace cohort::detail::ckpt
