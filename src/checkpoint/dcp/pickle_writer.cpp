#include "checkpoint/dcp/pickle_writer.h"

#include <cstring>
#include <limits>

#include "cohort/error.h"

namespace cohort::detail::dcp {

namespace {

void little_endian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

PickleWriter::PickleWriter() { out_ = "\x80\x02"; }

void PickleWriter::global(const std::string& module, const std::string& name) {
  COHORT_CHECK_KIND(kInternal, module.find('\n') == std::string::npos && name.find('\n') == std::string::npos,
                    "a pickle global's name holds a newline: ", module, ".", name);
  out_ += 'c' + module + '\n' + name + '\n';
}

void PickleWriter::text(const std::string& value) {
  COHORT_CHECK_KIND(kInvalidArgument, value.size() <= std::numeric_limits<uint32_t>::max(), "a string of ",
                    value.size(), " bytes is too long for a pickle");
  out_ += 'X';  // BINUNICODE: a 4-byte length, UTF-8
  little_endian(out_, value.size(), 4);
  out_ += value;
}

void PickleWriter::integer(int64_t value) {
  if (value >= std::numeric_limits<int32_t>::min() && value <= std::numeric_limits<int32_t>::max()) {
    out_ += 'J';  // BININT: 4 bytes, signed
    little_endian(out_, static_cast<uint32_t>(static_cast<int32_t>(value)), 4);
    return;
  }
  out_ += "\x8a\x08";  // LONG1 of 8 bytes, two's complement
  little_endian(out_, static_cast<uint64_t>(value), 8);
}

void PickleWriter::real(double value) {
  out_ += 'G';  // BINFLOAT: big-endian IEEE 754
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

void PickleWriter::boolean(bool value) { out_ += value ? '\x88' : '\x89'; }
void PickleWriter::none() { out_ += 'N'; }
void PickleWriter::mark() { out_ += '('; }
void PickleWriter::tuple() { out_ += 't'; }
void PickleWriter::empty_tuple() { out_ += ')'; }
void PickleWriter::empty_dict() { out_ += '}'; }
void PickleWriter::set_item() { out_ += 's'; }
void PickleWriter::empty_list() { out_ += ']'; }
void PickleWriter::append() { out_ += 'a'; }
void PickleWriter::new_object() { out_ += '\x81'; }
void PickleWriter::reduce() { out_ += 'R'; }
void PickleWriter::build() { out_ += 'b'; }
void PickleWriter::persistent_id() { out_ += 'Q'; }

void PickleWriter::int_tuple(const std::vector<int64_t>& values) {
  mark();
  for (int64_t v : values) integer(v);
  tuple();
}

void PickleWriter::torch_size(const std::vector<int64_t>& values) {
  global("torch", "Size");
  mark();
  int_tuple(values);
  tuple();
  reduce();
}

void PickleWriter::instance(const std::string& module, const std::string& name) {
  global(module, name);
  empty_tuple();
  new_object();
}

std::string PickleWriter::finish() {
  out_ += '.';
  return std::move(out_);
}

}  // namespace cohort::detail::dcp
