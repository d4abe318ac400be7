// hvd::ProcessSet and hvd::add_process_set (Horovod's dynamic process sets): a set is an id into the
// context's table, where it has its own Comm (Comm::new_group) and its own controller, so each set's
// operations are negotiated among its ranks and run concurrently with other sets'.
#include <algorithm>

#include "horovod/context.h"

namespace cohort::hvd {

std::vector<int> ProcessSet::ranks() const {
  return detail::Context::get("hvd::ProcessSet::ranks").process_set_ranks(id_, "hvd::ProcessSet::ranks");
}

bool ProcessSet::included() const { return rank() >= 0; }

int ProcessSet::rank() const {
  auto& context = detail::Context::get("hvd::ProcessSet::rank");
  return context.place_in_set(id_, context.world().rank(), "hvd::ProcessSet::rank");
}

int ProcessSet::size() const { return int(ranks().size()); }

ProcessSet add_process_set(const std::vector<int>& ranks) {
  return ProcessSet(detail::Context::get("hvd::add_process_set").add_process_set(ranks));
}

}  // namespace cohort::hvd
