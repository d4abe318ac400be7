// Routing of worker output (see output.h). Each console line is one write(2) of prefix + line, so
// lines of different ranks never mix; log files get the worker's bytes unchanged, like torchrun's.
#include "cohortrun/output.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "core/socket.h"

namespace cohort::detail::launch {

StreamRoute route_stream(const LaunchOptions& options, int local_rank, int stream) {
  const int redirect = options.redirects.for_rank(local_rank) & stream;
  const int tee = options.tee.for_rank(local_rank) & stream;
  const bool none_given = options.redirects.all == 0 && options.redirects.per_rank.empty() && options.tee.all == 0 &&
                          options.tee.per_rank.empty();
  StreamRoute route;
  route.file = redirect != 0 || tee != 0 || (none_given && !options.log_dir.empty());
  route.console = redirect == 0 || tee != 0;
  if (!options.local_ranks_filter.empty() && !options.local_ranks_filter.count(local_rank)) {
    route.console = false;
  }
  return route;
}

bool needs_log_files(const LaunchOptions& options) {
  for (int local_rank = 0; local_rank < options.nproc; ++local_rank) {
    for (int stream : {StdSpec::kOut, StdSpec::kErr}) {
      if (route_stream(options, local_rank, stream).file) return true;
    }
  }
  return false;
}

void check_log_dir(const std::string& dir) {
  if (dir.empty()) return;
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) throw UsageError("--log-dir=" + dir + ": cannot create the directory: " + error.message());
  if (!std::filesystem::is_directory(dir, error)) throw UsageError("--log-dir=" + dir + " is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw UsageError("--log-dir=" + dir + ": cannot write into the directory: " + std::strerror(errno));
}

int write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n > 0) {
      data += n;
      size -= static_cast<size_t>(n);
    } else if (n < 0 && errno == EAGAIN) {
      pollfd waiting{fd, POLLOUT, 0};
      net::poll_fds(&waiting, 1, 100);
    } else if (!(n < 0 && errno == EINTR)) {
      return n < 0 ? errno : EIO;
    }
  }
  return 0;
}

WorkerOutput::WorkerOutput(std::string prefix, StreamRoute out, StreamRoute err, const std::string& log_dir)
    : prefix_(std::move(prefix)) {
  streams_[0].route = out;
  streams_[1].route = err;
  for (int i = 0; i < 2; ++i) {
    if (!streams_[i].route.file) continue;
    const std::string path = log_dir + (i == 0 ? "/stdout.log" : "/stderr.log");
    streams_[i].path = path;
    streams_[i].file_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (streams_[i].file_fd < 0) {
      throw std::runtime_error("cannot create " + path + ": " + std::strerror(errno));
    }
  }
}

WorkerOutput::~WorkerOutput() {
  for (auto& stream : streams_) {
    if (stream.file_fd >= 0) ::close(stream.file_fd);
  }
}

void WorkerOutput::on_data(int stream, const char* data, size_t size) {
  Stream& s = streams_[stream == StdSpec::kOut ? 0 : 1];
  if (s.file_fd >= 0) {
    if (const int error = write_all(s.file_fd, data, size)) file_failed(s, error);
  }
  for (auto& line : s.splitter.feed(data, size)) emit(stream, line);
}

// The log file cannot take more (ENOSPC, EFBIG, EIO): said at once, and the stream goes on to the
// console so that what follows is not lost as well.
void WorkerOutput::file_failed(Stream& s, int error) {
  ::close(s.file_fd);
  s.file_fd = -1;
  s.route.console = true;
  log_failures_.push_back("cannot write " + s.path + ": " + std::strerror(error));
  const std::string line = "[cohortrun] warning: " + log_failures_.back() +
                           "; the log file is incomplete and this stream goes on to the console\n";
  write_all(2, line.data(), line.size());
}

void WorkerOutput::finish(int stream) {
  Stream& s = streams_[stream == StdSpec::kOut ? 0 : 1];
  const std::string rest = s.splitter.flush();
  if (!rest.empty()) emit(stream, rest);
}

void WorkerOutput::emit(int stream, const std::string& line) {
  if (stream == StdSpec::kErr) tail_.push(line);
  if (!streams_[stream == StdSpec::kOut ? 0 : 1].route.console) return;
  std::string text = prefix_ + line + "\n";
  write_all(stream == StdSpec::kOut ? 1 : 2, text.data(), text.size());
}

}  // namespace cohort::detail::launch
