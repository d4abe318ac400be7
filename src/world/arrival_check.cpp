// init's way out of waiting for a rank that will never arrive (see arrival_check.h).
#include "world/arrival_check.h"

#include <utility>

namespace cohort::detail {
namespace {

// Per thread: init runs on the thread that made the check, and another thread's init is not its concern.
thread_local std::function<std::string()> t_check;

}  // namespace

ScopedArrivalCheck::ScopedArrivalCheck(std::function<std::string()> check)
    : previous_(std::exchange(t_check, std::move(check))) {}

ScopedArrivalCheck::~ScopedArrivalCheck() { t_check = std::move(previous_); }

std::string arrival_failure() { return t_check ? t_check() : std::string(); }

}  // namespace cohort::detail
