// CSVLogger (see cohort/trainer_loggers.h): Lightning's metrics.csv. Keys are the sorted union of
// every row's; when a new key appears the file is written again with the wider header, as
// Lightning's ExperimentWriter does. Numbers are written in their shortest exact form.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "cohort/error.h"
#include "cohort/trainer_loggers.h"
#include "core/safe_file.h"

namespace cohort {
namespace {

std::string shortest(double value) {
  if (std::isfinite(value) && value == std::floor(value) && std::fabs(value) < 1e15) {
    return std::to_string(static_cast<long long>(value));
  }
  char text[40];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  return text;
}

}  // namespace

namespace detail {

int next_version(const std::string& dir) {
  int next = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("version_", 0) != 0) continue;
    const std::string number = name.substr(8);
    if (!number.empty() && number.find_first_not_of("0123456789") == std::string::npos && number.size() < 9)
      next = std::max(next, std::stoi(number) + 1);
  }
  return next;
}

}  // namespace detail

CSVLogger::CSVLogger(std::string save_dir, std::string name, int version)
    : root_(save_dir + "/" + name), version_(version >= 0 ? version : detail::next_version(root_)) {}

std::string CSVLogger::log_dir() const { return root_ + "/version_" + std::to_string(version_); }

void CSVLogger::log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
  std::map<std::string, double> row = metrics;
  row["step"] = static_cast<double>(step);
  for (const auto& item : row) columns_.insert(item.first);
  rows_.push_back(std::move(row));
}

void CSVLogger::flush() {
  if (rows_.empty()) return;
  std::filesystem::create_directories(log_dir());
  const std::string path = log_dir() + "/metrics.csv";
  std::ostringstream out;
  std::string header;
  for (const auto& column : columns_) header += (header.empty() ? "" : ",") + column;
  out << header << "\n";
  for (const auto& row : rows_) {
    bool first = true;
    for (const auto& column : columns_) {
      if (!first) out << ",";
      first = false;
      const auto found = row.find(column);
      if (found != row.end()) out << shortest(found->second);
    }
    out << "\n";
  }
  detail::write_file_safely(path, out.str());  // readers never see half a file (core/safe_file.h)
}

}  // namespace cohort
