// Every file cohort writes goes through here (checkpoints and `latest`, the timeline, consolidated
// output, CSV logs): a temporary of a random name made beside the target with O_CREAT|O_EXCL|O_NOFOLLOW,
// written, fsynced and renamed over the target, so readers see the old file or the new one, a planted
// symbolic link is never followed, a device or directory at the target is refused, and no temporary
// outlives a failure. Reads of cohort's own files open with O_NOFOLLOW. See docs/security.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace cohort::detail {

/// Throws cohort::Error naming `path` when something other than a regular file is there (a symbolic
/// link, a character or block device, a directory, a socket, a fifo): cohort replaces regular files only.
void check_replaceable(const std::string& path);

/// A file being written: the constructor checks the target (check_replaceable) and creates the
/// temporary; commit() makes it the target. Destroyed uncommitted (an exception, a failed write), the
/// temporary is closed and removed.
class SafeFile {
 public:
  explicit SafeFile(std::string target);
  ~SafeFile();
  SafeFile(const SafeFile&) = delete;
  SafeFile& operator=(const SafeFile&) = delete;

  /// Appends `bytes` bytes (short writes and EINTR handled); throws naming the target on failure.
  void write(const void* data, size_t bytes);
  void write(const std::string& text) { write(text.data(), text.size()); }
  /// Writes at a byte offset without moving the append position (a header filled in at the end).
  void write_at(const void* data, size_t bytes, int64_t offset);
  /// fsync, the target checked again, rename over it, fsync of the directory. Once only.
  void commit();
  const std::string& target() const { return target_; }

 private:
  std::string target_, temporary_;
  int fd_ = -1;
};

/// SafeFile in one call: `text` becomes the contents of `path`.
void write_file_safely(const std::string& path, const std::string& text);

/// Removes the temporaries a SafeFile for `path` left when its process was killed before the rename
/// (`<dir>/.<name>.<random>.tmp`, regular files only). For the one process that writes `path`.
void remove_stale_temporaries(const std::string& path);

/// Opens a file cohort wrote, for reading: O_NOFOLLOW, and a regular file only (a link, a device or a
/// fifo there is refused, naming `path`). `what` starts the message ("shard file", "manifest").
/// Returns the descriptor; the caller closes it.
int open_own_file(const std::string& path, const std::string& what);

/// The whole of a small file cohort wrote (open_own_file), at most `max_bytes`: a larger one is refused
/// naming `path` and its size, so a huge or endless input is never read whole.
std::string read_own_file(const std::string& path, const std::string& what, int64_t max_bytes);

}  // namespace cohort::detail
