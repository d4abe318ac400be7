// CommFailure: a Comm's error on its way to the caller: the final text and what kind of failure it is
// (cohort::ErrorKind) with the world ranks involved. It travels from where the kind is known (a dead
// peer, a timeout, a desync) through the poisoned Comm to every later throw, so all carry one kind.
#pragma once

#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "cohort/error.h"

namespace cohort::detail {

struct CommFailure {
  std::string message;  // empty while there is no failure
  ErrorKind kind = ErrorKind::kOther;
  std::vector<int> ranks;  // world ranks

  CommFailure() = default;
  // Implicit from text: a failure whose kind is not known where it is raised is kOther.
  CommFailure(std::string text, ErrorKind error_kind = ErrorKind::kOther, std::vector<int> world_ranks = {})
      : message(std::move(text)), kind(error_kind), ranks(std::move(world_ranks)) {}

  bool empty() const { return message.empty(); }
  Error error() const { return Error(message, kind, ranks); }
};

/// The failure `text` that `cause` led to: of the cause's kind and ranks when it is a cohort::Error (an
/// argument check in a transport stays an invalid argument), else of no known kind (kOther).
inline CommFailure failure_from(std::string text, const std::exception& cause) {
  if (const auto* error = dynamic_cast<const Error*>(&cause)) return {std::move(text), error->kind(), error->ranks()};
  return CommFailure(std::move(text));
}

}  // namespace cohort::detail
