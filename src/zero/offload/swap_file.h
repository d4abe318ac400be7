// One rank's file of offloaded states under ZeRO-Infinity's nvme_path: created new (never an existing
// file), readable by its owner only, its size reserved at creation (so a full disk shows at the start,
// not in the middle of a step), opened for direct I/O where the filesystem allows it, and unlinked as
// soon as it is open, so that no end of the process (SIGKILL, a crash, a restart) leaves it behind: its
// space is the kernel's to free when the descriptor closes (df counts it, ls does not show it). A path
// that is not a writable directory is refused naming the config key.
#pragma once

#include <cstdint>
#include <string>

namespace cohort::detail {

class SwapFile {
 public:
  /// Creates `<directory>/cohort-<what>-rank<rank>-<pid>-<n>.swap` of `bytes` (rounded up to the
  /// direct-I/O alignment), then unlinks the name (path() still says where it was made, for messages). `key` names the
  /// config value in errors ("offload_optimizer.nvme_path").
  SwapFile(const std::string& directory, const std::string& key, const std::string& what, int rank, int64_t bytes);
  ~SwapFile();
  SwapFile(const SwapFile&) = delete;
  SwapFile& operator=(const SwapFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  int rank() const { return rank_; }
  int64_t bytes() const { return bytes_; }
  /// Whether reads and writes bypass the page cache (O_DIRECT); false on a filesystem without it
  /// (tmpfs), where the bytes stay in memory and offload saves nothing (warned once).
  bool direct() const { return direct_; }
  /// Throws an Error of kind I/O when the file was shortened under the job (through /proc/PID/fd).
  void check_intact() const;
  /// Reserves `more` bytes (rounded up to the alignment) at the end; returns where they begin. A disk
  /// without room is an Error of kind I/O naming the path, and the file stays as it was.
  int64_t grow(int64_t more);

 private:
  std::string path_;
  int fd_ = -1;
  int rank_ = 0;
  std::string key_;
  int64_t bytes_ = 0;
  bool direct_ = true;
};

}  // namespace cohort::detail
