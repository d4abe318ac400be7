// StateSwapper (see state_swapper.h). A slot's region in the file and its buffer have the same layout:
// each tensor at an aligned offset, so one read or write moves the whole slot.
#include "zero/offload/state_swapper.h"

#include <torch/torch.h>

#include <cstring>
#include <exception>
#include <utility>

#include "cohort/error.h"
#include "core/check.h"
#include "core/log.h"

namespace cohort::detail {
namespace {

int64_t bytes_of(const torch::Tensor& t) { return t.numel() * int64_t(t.element_size()); }

// An empty tensor of `t`'s dtype: what a slot's tensors point at between lends.
void point_at_nothing(torch::Tensor& t) { t.set_(torch::empty({0}, t.options())); }

}  // namespace

StateSwapper::StateSwapper(SwapperOptions options) : options_(std::move(options)), io_(options_.aio) {
  COHORT_CHECK_KIND(kInvalidArgument, options_.buffer_count >= 1, options_.key.substr(0, options_.key.rfind('.')),
                    ".buffer_count: must be >= 1, got ", options_.buffer_count);
  file_ = std::make_unique<SwapFile>(options_.directory, options_.key, options_.what, options_.rank, 0);
}

StateSwapper::~StateSwapper() {
  try {
    io_.wait_all();  // no write may land in a buffer freed below, nor in a removed file
  } catch (const std::exception& e) {
    COHORT_WARN("offload: I/O in flight at the end failed: ", e.what());
  }
  for (auto& slot : slots_)
    for (auto& part : slot.parts)
      if (slot.state == State::kLent) point_at_nothing(part.tensor);  // never left pointing at freed memory
}

StateSwapper::Slot StateSwapper::add_slot(std::vector<torch::Tensor> tensors) {
  torch::NoGradGuard no_grad;
  SlotState slot;
  int64_t bytes = 0;
  for (auto& t : tensors) {
    COHORT_CHECK_KIND(kInvalidArgument, t.device().is_cpu() && t.is_contiguous(),
                      "offload: a swapped tensor must be contiguous and on the CPU (rank ", options_.rank, ")");
    slot.parts.push_back({t, t.sizes().vec(), bytes});
    bytes += round_up_to_alignment(bytes_of(t));
  }
  slot.bytes = round_up_to_alignment(bytes);
  slot.offset = file_->grow(slot.bytes);
  slot.buffer = take_buffer(slot.bytes);
  auto* base = static_cast<char*>(slot.buffer.data());
  for (auto& part : slot.parts) {
    std::memcpy(base + part.offset, part.tensor.data_ptr(), size_t(bytes_of(part.tensor)));
    point_at_nothing(part.tensor);
  }
  slot.ticket = io_.write(*file_, slot.offset, slot.buffer.data(), slot.bytes);
  slot.state = State::kWriting;
  slots_.push_back(std::move(slot));
  writing_.push_back(slots() - 1);
  while (buffers_held() > options_.buffer_count) finish_oldest_write();
  return slots() - 1;
}

void StateSwapper::prefetch(Slot s) {
  SlotState& slot = slots_[size_t(s)];
  if (slot.state != State::kOnFile) return;
  while (buffers_held() >= options_.buffer_count && !writing_.empty()) finish_oldest_write();
  if (buffers_held() < options_.buffer_count) start_read(slot);
}

void StateSwapper::lend(Slot s) {
  SlotState& slot = slots_[size_t(s)];
  if (slot.state == State::kLent) return;
  if (slot.state == State::kOnFile) {
    while (buffers_held() >= options_.buffer_count && !writing_.empty()) finish_oldest_write();
    start_read(slot);  // a lend is never refused: buffer_count bounds what is ahead and behind
  }
  // A slot being written still holds its values: lend the buffer again once the write is done.
  finish(slot);
  point_at_buffer(slot);
  slot.state = State::kLent;
}

void StateSwapper::lend_to_overwrite(Slot s) {
  SlotState& slot = slots_[size_t(s)];
  if (slot.state == State::kOnFile) {
    slot.buffer = take_buffer(slot.bytes);
    point_at_buffer(slot);
    slot.state = State::kLent;
    return;
  }
  lend(s);  // being read or written: its buffer is there already
}

void StateSwapper::zero(Slot s) {
  SlotState& slot = slots_[size_t(s)];
  COHORT_CHECK_KIND(kInternal, slot.state == State::kLent, "offload: slot ", s, " is zeroed while not lent");
  std::memset(slot.buffer.data(), 0, size_t(slot.bytes));
}

void StateSwapper::give_back(Slot s, bool changed) {
  SlotState& slot = slots_[size_t(s)];
  if (slot.state != State::kLent) return;
  for (auto& part : slot.parts) point_at_nothing(part.tensor);
  if (!changed) {
    release_buffer(slot);
    slot.state = State::kOnFile;
    return;
  }
  slot.ticket = io_.write(*file_, slot.offset, slot.buffer.data(), slot.bytes);
  slot.state = State::kWriting;
  writing_.push_back(s);
  while (buffers_held() > options_.buffer_count && !writing_.empty()) finish_oldest_write();
}

void StateSwapper::flush() {
  file_->check_intact();  // a cut file fails here, once a step, not at the next read
  while (!writing_.empty()) finish_oldest_write();
  for (auto& slot : slots_)
    if (slot.state == State::kReading) finish(slot);
}

int64_t StateSwapper::host_bytes() const {
  int64_t total = 0;
  for (const auto& slot : slots_) total += slot.buffer.bytes();
  return total;
}

int64_t StateSwapper::spare_bytes() const {
  int64_t total = 0;
  for (const auto& buffer : spare_) total += buffer.bytes();
  return total;
}

AlignedBuffer StateSwapper::take_buffer(int64_t bytes) {
  for (auto it = spare_.begin(); it != spare_.end(); ++it) {
    if (it->bytes() != bytes) continue;
    AlignedBuffer buffer = std::move(*it);
    spare_.erase(it);
    return buffer;
  }
  return AlignedBuffer(bytes);
}

// Kept for reuse, at most buffer_count of them (beyond that the oldest goes back to malloc).
void StateSwapper::release_buffer(SlotState& slot) {
  spare_.push_back(std::move(slot.buffer));
  slot.buffer = AlignedBuffer();
  if (int64_t(spare_.size()) > options_.buffer_count) spare_.erase(spare_.begin());
}

void StateSwapper::start_read(SlotState& slot) {
  slot.buffer = take_buffer(slot.bytes);
  slot.ticket = io_.read(*file_, slot.offset, slot.buffer.data(), slot.bytes);
  slot.state = State::kReading;
}

void StateSwapper::point_at_buffer(SlotState& slot) {
  auto* base = static_cast<char*>(slot.buffer.data());
  for (auto& part : slot.parts) {
    auto view = torch::from_blob(base + part.offset, part.sizes, part.tensor.options());
    part.tensor.set_(view);
  }
}

// Waits for the oldest write; its buffer is freed unless the slot was lent again meanwhile.
void StateSwapper::finish_oldest_write() {
  const Slot s = writing_.front();
  writing_.pop_front();
  SlotState& slot = slots_[size_t(s)];
  if (slot.state != State::kWriting) return;  // lent again: finish() waited already
  finish(slot);
  release_buffer(slot);
  slot.state = State::kOnFile;
}

// Waits for the slot's read or write in flight, if not waited for already; the buffer stays.
void StateSwapper::finish(SlotState& slot) {
  if (slot.ticket == 0) return;
  const AsyncIo::Ticket ticket = std::exchange(slot.ticket, 0);
  io_.wait(ticket);
}

int64_t StateSwapper::buffers_held() const {
  int64_t held = 0;
  for (const auto& slot : slots_) held += slot.state == State::kReading || slot.state == State::kWriting;
  return held;
}

}  // namespace cohort::detail
