// comm_impl(comm): the CommImpl behind a public Comm, for cohort's own layers, tests and benchmarks
// (the store, the shared-memory transport, dead peers). Not part of the public API: include/cohort/comm.h
// only names CommAccess as a friend.
#pragma once

#include "cohort/comm.h"
#include "comm/comm_impl.h"

namespace cohort::detail {

struct CommAccess {
  static CommImpl& impl(Comm& comm) { return *comm.impl_; }
};

inline CommImpl& comm_impl(Comm& comm) { return CommAccess::impl(comm); }

}  // namespace cohort::detail
