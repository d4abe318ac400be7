// Actions and schedules as text in torch.distributed.pipelining's notation: an action is
// [stage][type][microbatch] ("2F0", "1SEND_F3"), a schedule one CSV row per rank (its _dump_csv and
// _load_csv). Parsing is strict: the whole text must be one action.
#include <cctype>
#include <sstream>

#include "cohort/error.h"
#include "cohort/pipeline_schedule.h"
#include "core/check.h"
#include "core/text.h"

namespace cohort {
namespace pipeline {
namespace {

struct KindName {
  ActionKind kind;
  const char* name;
};
// Longest names first so "SEND_F" is not read as something shorter.
constexpr KindName kKindNames[] = {
    {ActionKind::kSendForward, "SEND_F"},  {ActionKind::kRecvForward, "RECV_F"}, {ActionKind::kSendBackward, "SEND_B"},
    {ActionKind::kRecvBackward, "RECV_B"}, {ActionKind::kForward, "F"},          {ActionKind::kBackward, "B"},
};
// torch's types that cohort does not run, named in the error rather than called malformed.
constexpr const char* kTorchOnlyKinds[] = {"UNSHARD", "RESHARD", "REDUCE_GRAD", "OVERLAP_F_B", "I", "W"};
// Stage-level markers in torch's compute_comms CSV (FSDP unshard/reshard, the gradient reduction
// after the last backward) that cohort's runtime does on its own: from_csv skips them.
constexpr const char* kSkippedMarkers[] = {"UNSHARD", "RESHARD", "REDUCE_GRAD"};

const char* kind_name(ActionKind kind) {
  for (const auto& entry : kKindNames)
    if (entry.kind == kind) return entry.name;
  return "?";
}

[[noreturn]] void bad_action(const std::string& text, const std::string& why) {
  throw Error("pipeline action '" + cohort::detail::printable(text) + "' " + why, ErrorKind::kInvalidArgument);
}

size_t digits_from(const std::string& text, size_t at) {
  size_t end = at;
  while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
  return end;
}

int parse_count(const std::string& text, const std::string& digits) {
  if (digits.size() > 9) bad_action(text, "has a number too large for a stage or microbatch: " + digits);
  return std::stoi(digits);
}

std::string strip(const std::string& text) {
  size_t begin = text.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t\r") - begin + 1);
}

bool is_skipped_marker(const std::string& cell) {
  size_t type_at = digits_from(cell, 0);
  if (type_at == 0) return false;
  for (const char* marker : kSkippedMarkers)
    if (cell.compare(type_at, std::string::npos, marker) == 0) return true;
  return false;
}

}  // namespace

bool operator==(const Action& a, const Action& b) {
  return a.stage == b.stage && a.kind == b.kind && a.microbatch == b.microbatch;
}

std::string to_string(const Action& action) {
  return std::to_string(action.stage) + kind_name(action.kind) + std::to_string(action.microbatch);
}

Action parse_action(const std::string& text) {
  const char* form = "is not [stage][F|B|SEND_F|RECV_F|SEND_B|RECV_B][microbatch], e.g. 2F0 or 1SEND_F3";
  size_t type_at = digits_from(text, 0);
  if (type_at == 0) bad_action(text, form);
  for (const auto& entry : kKindNames) {
    std::string name = entry.name;
    if (text.compare(type_at, name.size(), name) != 0) continue;
    size_t mb_at = type_at + name.size();
    size_t end = digits_from(text, mb_at);
    if (end == mb_at || end != text.size()) continue;  // "1SEND_F" is not "1S" + ...; try the rest
    return Action{parse_count(text, text.substr(0, type_at)), entry.kind, parse_count(text, text.substr(mb_at))};
  }
  size_t type_end = type_at;
  while (type_end < text.size() && !std::isdigit(static_cast<unsigned char>(text[type_end]))) ++type_end;
  std::string type = text.substr(type_at, type_end - type_at);
  for (const char* torch_only : kTorchOnlyKinds)
    if (type == torch_only)
      bad_action(text,
                 "uses torch's " + type + ", which cohort does not run (it runs F, B, SEND_F, RECV_F, SEND_B, RECV_B)");
  bad_action(text, form);
}

std::string to_csv(const Schedule& schedule) {
  std::string out;
  for (const auto& row : schedule.actions) {
    for (size_t i = 0; i < row.size(); ++i) out += (i ? "," : "") + to_string(row[i]);
    out += "\n";
  }
  return out;
}

Schedule from_csv(const std::string& text, const std::string& name) {
  Schedule schedule;
  schedule.name = name;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::vector<Action> row;
    std::istringstream cells(line);
    std::string cell;
    while (std::getline(cells, cell, ',')) {
      cell = strip(cell);
      if (cell.empty() || is_skipped_marker(cell)) continue;  // torch writes idle steps as empty cells
      try {
        row.push_back(parse_action(cell));
      } catch (const Error& error) {
        std::string why = error.what();
        why.erase(0, why.find("pipeline action"));  // without a rank prefix: this Error adds its own
        throw Error("from_csv: row " + std::to_string(schedule.actions.size()) + " (rank " +
                        std::to_string(schedule.actions.size()) + "): " + why,
                    ErrorKind::kInvalidArgument);
      }
      schedule.stages = std::max(schedule.stages, row.back().stage + 1);
      schedule.microbatches = std::max(schedule.microbatches, row.back().microbatch + 1);
    }
    schedule.actions.push_back(std::move(row));
  }
  schedule.ranks = static_cast<int>(schedule.actions.size());
  COHORT_CHECK_KIND(kInvalidArgument, schedule.ranks > 0,
                    "from_csv: the text has no rows (one row of actions per rank expected)");
  return schedule;
}

}  // namespace pipeline
}  // namespace cohort
