// What the fuzz targets share: the readers under test take a path, so each input is written to a
// private file in /dev/shm first (no disk I/O per execution), and a reader may only ever fail with
// cohort::Error: any other exception escapes to libFuzzer, which reports it with the input.
// The file is made new under a random name (a file or link planted at a guessable name is never
// written through) and removed when the input is done, so a run leaves nothing in /dev/shm.
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

namespace cohort_fuzz {

/// The input as /dev/shm/cohort-fuzz-<pid>-XXXXXX-<name>: created by mkostemps (O_CREAT | O_EXCL,
/// mode 0600) with O_NOFOLLOW as well, written whole, and removed when this goes out of scope.
class InputFile {
 public:
  InputFile(const uint8_t* data, size_t size, const std::string& name) {
    std::string pattern = "/dev/shm/cohort-fuzz-" + std::to_string(getpid()) + "-XXXXXX-" + name;
    const int fd = mkostemps(pattern.data(), int(name.size()) + 1, O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) std::abort();  // /dev/shm full or gone: no input could be tried
    path_ = pattern;
    for (size_t done = 0; done < size;) {
      const ssize_t n = ::write(fd, data + done, size - done);
      if (n <= 0) std::abort();
      done += size_t(n);
    }
    ::close(fd);
  }
  ~InputFile() { ::unlink(path_.c_str()); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace cohort_fuzz
