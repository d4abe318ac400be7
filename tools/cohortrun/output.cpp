// Routing of worker output (see output.h). Each console line is one write(2) of prefix + line, so
// lines of different ranks never mix; log files get the worker's bytes unchanged, like torchrun's.
#include "cohortrun/output.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>
#include <cstring>

namespace cohort::detail::launch {

StreamRoute route_stream(const LaunchOptions& options, int local_rank, int stream) {
  const int redirect = options.redirects.for_rank(local_rank) & stream;
  const int tee = options.tee.for_rank(local_rank) & stream;
  const bool none_given = options.redirects.all == 0 && options.redirects.per_rank.empty() &&
                          options.tee.all == 0 && options.tee.per_rank.empty();
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

void write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n > 0) {
      data += n;
      size -= static_cast<size_t>(n);
    } else if (n < 0 && errno == EAGAIN) {
      pollfd waiting{fd, POLLOUT, 0};
      ::poll(&waiting, 1, 100);
    } else if (!(n < 0 && errno == EINTR)) {
      return;
    }
  }
}

WorkerOutput::WorkerOutput(std::string prefix, StreamRoute out, StreamRoute err,
                           const std::string& log_dir)
    : prefix_(std::move(prefix)) {
  streams_[0].route = out;
  streams_[1].route = err;
  for (int i = 0; i < 2; ++i) {
    if (!streams_[i].route.file) continue;
    const std::string path = log_dir + (i == 0 ? "/stdout.log" : "/stderr.log");
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
  if (s.file_fd >= 0) write_all(s.file_fd, data, size);
  for (auto& line : s.splitter.feed(data, size)) emit(stream, line);
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
