// TensorBoardLogger (see cohort/trainer_loggers.h). An event file is a sequence of TFRecords, each
// framing one serialized tensorflow.Event: the first says file_version "brain.Event:2", the others
// carry wall_time, step and a Summary of {tag, simple_value} scalars. The protobuf wire format of
// those few fields is written here directly (varints, fixed64 double, fixed32 float, length-delimited).
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>

#include "cohort/error.h"
#include "cohort/trainer_loggers.h"
#include "core/check.h"

namespace cohort {
namespace detail {
namespace {

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

template <typename T>
void put_fixed(std::string& out, T value) {  // little-endian, as protobuf and TFRecord want
  unsigned char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(reinterpret_cast<const char*>(bytes), sizeof(T));
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | 2);
  put_varint(out, bytes.size());
  out += bytes;
}

const uint32_t* crc32c_table() {
  static const auto table = [] {
    static uint32_t values[256];
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t crc = i;
      for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
      values[i] = crc;
    }
    return values;
  }();
  return table;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  const uint32_t* table = crc32c_table();
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ bytes[i]) & 0xff] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfrecord(const std::string& payload) {
  std::string out;
  std::string length;
  put_fixed<uint64_t>(length, payload.size());
  out += length;
  put_fixed<uint32_t>(out, masked_crc32c(length.data(), length.size()));
  out += payload;
  put_fixed<uint32_t>(out, masked_crc32c(payload.data(), payload.size()));
  return out;
}

std::string event_bytes(double wall_time, int64_t step, const std::map<std::string, double>& metrics,
                        const std::string& file_version) {
  std::string event;
  put_varint(event, (1 << 3) | 1);  // wall_time: double
  put_fixed<double>(event, wall_time);
  put_varint(event, 2 << 3);  // step: int64 varint
  put_varint(event, static_cast<uint64_t>(step));
  if (!file_version.empty()) put_bytes(event, 3, file_version);
  if (metrics.empty()) return event;
  std::string summary;
  for (const auto& [tag, value] : metrics) {
    std::string item;
    put_bytes(item, 1, tag);
    put_varint(item, (2 << 3) | 5);  // simple_value: float
    put_fixed<float>(item, static_cast<float>(value));
    put_bytes(summary, 1, item);
  }
  put_bytes(event, 5, summary);
  return event;
}

}  // namespace detail

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

TensorBoardLogger::TensorBoardLogger(std::string save_dir, std::string name, int version)
    : root_(save_dir + "/" + name), version_(version >= 0 ? version : detail::next_version(root_)) {}

TensorBoardLogger::~TensorBoardLogger() {
  if (out_ != nullptr) std::fclose(out_);
}

std::string TensorBoardLogger::log_dir() const { return root_ + "/version_" + std::to_string(version_); }

void TensorBoardLogger::open() {
  std::filesystem::create_directories(log_dir());
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  const double now = now_seconds();
  file_ = log_dir() + "/events.out.tfevents." + std::to_string(static_cast<long long>(now)) + "." + host + "." +
          std::to_string(::getpid()) + ".0";
  out_ = std::fopen(file_.c_str(), "wb");
  COHORT_CHECK_KIND(kIO, out_ != nullptr, "TensorBoardLogger: cannot create ", file_);
  const std::string record = detail::tfrecord(detail::event_bytes(now, 0, {}, "brain.Event:2"));
  std::fwrite(record.data(), 1, record.size(), out_);
}

void TensorBoardLogger::log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
  if (out_ == nullptr) open();
  const std::string record = detail::tfrecord(detail::event_bytes(now_seconds(), step, metrics));
  COHORT_CHECK_KIND(kIO, std::fwrite(record.data(), 1, record.size(), out_) == record.size(),
                    "TensorBoardLogger: writing ", file_, " failed");
}

void TensorBoardLogger::flush() {
  if (out_ != nullptr) std::fflush(out_);
}

}  // namespace cohort
