// Progress bar of rank 0 (see cohort/progress.h). Throughput and ETA come from rank 0's own clock:
// DDP keeps the ranks in lockstep, so global samples/s is this rank's rate times the world size.
#include "cohort/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <stdexcept>

#include "cohort/error.h"

namespace cohort {

namespace {

constexpr int kBarWidth = 20;
constexpr double kRedrawSeconds = 0.1;  // in-place redraws at most ten times a second

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

ProgressStyle progress_style_for(std::FILE* stream) {
  return isatty(fileno(stream)) ? ProgressStyle::kInPlace : ProgressStyle::kLines;
}

ProgressStyle progress_style_named(const std::string& name, std::FILE* stream) {
  if (name == "auto") return progress_style_for(stream);
  if (name == "bar") return ProgressStyle::kInPlace;
  if (name == "lines") return ProgressStyle::kLines;
  if (name == "off") return ProgressStyle::kOff;
  throw Error("progress style must be auto, bar, lines or off, not '" + name + "'", ErrorKind::kInvalidArgument);
}

std::string format_duration(double seconds) {
  const int64_t total = std::isfinite(seconds) ? std::max<int64_t>(0, std::llround(seconds)) : 0;
  const int64_t hours = total / 3600, minutes = total / 60 % 60, secs = total % 60;
  char text[32];
  if (hours > 0) {
    std::snprintf(text, sizeof text, "%" PRId64 ":%02" PRId64 ":%02" PRId64, hours, minutes, secs);
  } else {
    std::snprintf(text, sizeof text, "%" PRId64 ":%02" PRId64, minutes, secs);
  }
  return text;
}

std::string format_progress(const ProgressState& state) {
  const int64_t total = std::max<int64_t>(state.total, 1);
  const int filled = static_cast<int>(kBarWidth * std::min(state.step, total) / total);
  const std::string bar = std::string(filled, '#') + std::string(kBarWidth - filled, '.');
  const int digits = static_cast<int>(std::to_string(state.total).size());
  char text[256];
  std::snprintf(text, sizeof text, "%s [%s] %*" PRId64 "/%" PRId64 "  loss %.4f  %.0f samples/s  ETA %s",
                state.label.c_str(), bar.c_str(), digits, state.step, state.total, state.loss, state.samples_per_second,
                format_duration(state.eta_seconds).c_str());
  std::string line = text;
  for (const auto& [name, value] : state.extra) {
    char item[128];
    std::snprintf(item, sizeof item, "  %s %.4g", name.c_str(), value);
    line += item;
  }
  return line;
}

ProgressBar::ProgressBar(std::string label, int64_t total, ProgressStyle style, std::FILE* stream)
    : style_(style), stream_(stream), start_(std::chrono::steady_clock::now()), last_draw_(start_) {
  state_.label = std::move(label);
  state_.total = total;
}

void ProgressBar::update(int64_t step, double loss, int64_t samples, const std::map<std::string, double>& extra) {
  if (style_ == ProgressStyle::kOff) return;
  const double elapsed = seconds_since(start_);
  state_.step = step;
  state_.loss = loss;
  state_.extra = extra;
  state_.samples_per_second = elapsed > 0 ? samples / elapsed : 0;
  state_.eta_seconds = step > 0 ? elapsed / step * (state_.total - step) : 0;
  draw(/*force=*/step >= state_.total);
}

void ProgressBar::draw(bool force) {
  const std::string line = format_progress(state_);
  if (style_ == ProgressStyle::kInPlace) {
    if (!force && seconds_since(last_draw_) < kRedrawSeconds) return;
    last_draw_ = std::chrono::steady_clock::now();
    // Blanks over the tail of a longer previous line, then back to the start of the line.
    const size_t pad = last_width_ > line.size() ? last_width_ - line.size() : 0;
    std::fprintf(stream_, "\r%s%*s", line.c_str(), static_cast<int>(pad), "");
    last_width_ = line.size();
  } else {
    const int64_t decile = 10 * state_.step / std::max<int64_t>(state_.total, 1);
    if (!force && decile <= last_decile_) return;
    last_decile_ = decile;
    std::fprintf(stream_, "%s\n", line.c_str());
    last_printed_step_ = state_.step;
  }
  std::fflush(stream_);
}

void ProgressBar::finish() {
  if (style_ == ProgressStyle::kOff || finished_) return;
  finished_ = true;
  if (style_ == ProgressStyle::kInPlace) {
    draw(/*force=*/true);
    std::fprintf(stream_, "\n");
  } else if (state_.step != last_printed_step_) {
    draw(/*force=*/true);  // a run cut short by --max-steps: show where it stopped
  }
  std::fflush(stream_);
}

}  // namespace cohort
