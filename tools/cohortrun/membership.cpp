// Rendezvous round rules (see membership.h). The outcome record is "kind|node|description".
#include "cohortrun/membership.h"

#include <stdexcept>

namespace cohort::detail::launch {

int close_count(int arrived, const NodeRange& range, bool last_call_over) {
  if (arrived >= range.max) return range.max;
  if (arrived >= range.min && last_call_over) return arrived;
  return 0;
}

Outcome::Kind decision_after_failure(int failure_restarts, int max_restarts) {
  return failure_restarts < max_restarts ? Outcome::Kind::kRestart : Outcome::Kind::kFail;
}

bool should_rescale(int waiting, int node_count, const NodeRange& range, int done) {
  return waiting > 0 && node_count < range.max && done == 0;
}

const char* outcome_kind_name(Outcome::Kind kind) {
  switch (kind) {
    case Outcome::Kind::kRestart: return "restart";
    case Outcome::Kind::kFail: return "fail";
    case Outcome::Kind::kStop: return "stop";
    case Outcome::Kind::kRescale: return "rescale";
  }
  return "fail";
}

std::string encode_outcome(const Outcome& outcome) {
  return std::string(outcome_kind_name(outcome.kind)) + "|" + std::to_string(outcome.node) + "|" + outcome.description;
}

Outcome decode_outcome(const std::string& text) {
  const auto first = text.find('|');
  const auto second = first == std::string::npos ? first : text.find('|', first + 1);
  if (second == std::string::npos) throw std::invalid_argument("bad outcome record: " + text);
  Outcome outcome;
  const std::string kind = text.substr(0, first);
  if (kind == "restart") outcome.kind = Outcome::Kind::kRestart;
  else if (kind == "fail") outcome.kind = Outcome::Kind::kFail;
  else if (kind == "stop") outcome.kind = Outcome::Kind::kStop;
  else if (kind == "rescale") outcome.kind = Outcome::Kind::kRescale;
  else throw std::invalid_argument("bad outcome record: " + text);
  try {
    outcome.node = std::stoi(text.substr(first + 1, second - first - 1));
  } catch (const std::exception&) {
    throw std::invalid_argument("bad outcome record: " + text);
  }
  outcome.description = text.substr(second + 1);
  return outcome;
}

}  // namespace cohort::detail::launch
