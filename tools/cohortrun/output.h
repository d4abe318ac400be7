// Where a worker's stdout and stderr go: to the console with a "[rankN]: " prefix, to
// attempt_N/LOCAL_RANK/stdout.log|stderr.log, or both, following torchrun's --redirects (files only),
// --tee (files and console) and --local-ranks-filter (which local ranks show on the console).
#pragma once

#include <string>
#include <vector>

#include "cohortrun/options.h"
#include "world/log_prefix.h"

namespace cohort::detail::launch {

struct StreamRoute {
  bool console = true;  // prefixed lines on cohortrun's own stdout/stderr
  bool file = false;    // raw bytes into the attempt's log file
};

/// The route of `stream` (StdSpec::kOut or kErr) of `local_rank`. With --log-dir and neither
/// --redirects nor --tee, every stream goes to both (cohortrun's choice; torchrun writes nothing).
StreamRoute route_stream(const LaunchOptions& options, int local_rank, int stream);

/// True when some stream of some local rank goes to a file (a log directory is needed).
bool needs_log_files(const LaunchOptions& options);

/// --log-dir made (with its parents) and checked to be a directory cohortrun may write into, before
/// any worker starts; throws UsageError naming the flag, the path and the reason otherwise.
void check_log_dir(const std::string& dir);

/// Writes all of `data` to `fd`, retrying on EINTR/EAGAIN. Returns 0, or the errno of the write that
/// failed (callers writing to the console ignore it: a closed console is no reason to stop).
int write_all(int fd, const char* data, size_t size);

/// The output of one worker: splits its pipes into lines, prefixes and routes them, and keeps the
/// tail of stderr for the failure summary.
class WorkerOutput {
 public:
  /// `log_dir` is attempt_N/LOCAL_RANK; files are created only for the streams routed there.
  WorkerOutput(std::string prefix, StreamRoute out, StreamRoute err, const std::string& log_dir);
  ~WorkerOutput();
  WorkerOutput(const WorkerOutput&) = delete;
  WorkerOutput& operator=(const WorkerOutput&) = delete;

  /// Bytes read from the worker's `stream` (StdSpec::kOut or kErr).
  void on_data(int stream, const char* data, size_t size);
  /// End of `stream`: a last unterminated line is emitted.
  void finish(int stream);
  std::vector<std::string> stderr_tail() const { return tail_.lines(); }
  /// A log file that could not be written (a full disk, a file size limit): "cannot write PATH: why",
  /// one entry per stream. Said on stderr at once; the stream's further output goes to the console.
  const std::vector<std::string>& log_failures() const { return log_failures_; }

 private:
  struct Stream {
    StreamRoute route;
    int file_fd = -1;
    std::string path;
    LineSplitter splitter;
  };
  void emit(int stream, const std::string& line);
  void file_failed(Stream& s, int error);
  std::string prefix_;
  Stream streams_[2];
  TailBuffer tail_;
  std::vector<std::string> log_failures_;
};

}  // namespace cohort::detail::launch
