// Loggers of cohort::Trainer: metrics.csv in Lightning's CSVLogger layout and TensorBoard event files
// (scalars, written without a protobuf library: TFRecord framing with masked CRC32C around
// hand-encoded Event/Summary messages). The Trainer calls them on rank 0 only.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort {

class Logger {
 public:
  virtual ~Logger() = default;
  /// Called on rank 0 only; the directory is made then, so other ranks never touch it.
  virtual void log_metrics(const std::map<std::string, double>& metrics, int64_t step) = 0;
  /// Writes out what is buffered (after each epoch and at the end of fit/validate/test).
  virtual void flush() {}
  /// <save_dir>/<name>/version_<n>: the directory of this run's files.
  virtual std::string log_dir() const = 0;
};

/// Lightning's CSVLogger: <save_dir>/<name>/version_<n>/metrics.csv, one row per logging call, one
/// column per metric name (sorted, "epoch" and "step" among them), empty where a row has no value.
class CSVLogger : public Logger {
 public:
  /// version -1: one more than the highest version_<n> in <save_dir>/<name>.
  explicit CSVLogger(std::string save_dir, std::string name = "lightning_logs", int version = -1);
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override;
  void flush() override;
  std::string log_dir() const override;

 private:
  std::string root_;
  int version_;
  std::vector<std::map<std::string, double>> rows_;
  std::set<std::string> columns_;
};

/// TensorBoard's SummaryWriter for scalars: <log_dir>/events.out.tfevents.<time>.<host>.<pid>.0.
class TensorBoardLogger : public Logger {
 public:
  explicit TensorBoardLogger(std::string save_dir, std::string name = "lightning_logs", int version = -1);
  ~TensorBoardLogger() override;
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override;
  void flush() override;
  std::string log_dir() const override;
  /// The event file (empty until the first log_metrics).
  const std::string& file() const { return file_; }

 private:
  void open();
  std::string root_;
  int version_;
  std::string file_;
  std::FILE* out_ = nullptr;
};

namespace detail {
/// CRC-32C (Castagnoli) of `size` bytes, and TFRecord's masked form of it.
uint32_t crc32c(const void* data, size_t size);
uint32_t masked_crc32c(const void* data, size_t size);
/// One TFRecord: length, masked CRC of the length, data, masked CRC of the data.
std::string tfrecord(const std::string& payload);
/// An Event protobuf: wall_time, step and one Summary.Value {tag, simple_value} per metric, or
/// file_version when `metrics` is empty and `file_version` is given.
std::string event_bytes(double wall_time, int64_t step, const std::map<std::string, double>& metrics,
                        const std::string& file_version = "");
/// The next free version number in `dir` (version_<n> subdirectories).
int next_version(const std::string& dir);
}  // namespace detail

}  // namespace cohort
COHORT_EXPORT_END
