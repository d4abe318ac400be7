// Thread-local op labels (see op_label.h): a label follows the caller's thread, so an autograd hook
// naming its gradient never names a collective another thread issues meanwhile.
#include "comm/op_label.h"

#include <utility>

namespace cohort::detail {
namespace {

thread_local std::string current_label;

}  // namespace

OpLabelScope::OpLabelScope(std::string label) : previous_(std::exchange(current_label, std::move(label))) {}

OpLabelScope::~OpLabelScope() { current_label = std::move(previous_); }

const std::string& current_op_label() { return current_label; }

}  // namespace cohort::detail
