// Leftover shared-memory segments of dead jobs. Rank 0 names its segment /cohort-<pid>-<magic> and
// holds an flock on it until every rank has mapped it and the name is unlinked (shm_transport.cpp);
// a rank 0 killed in between (kill -9 during set-up) leaves the name in /dev/shm, where it would
// accumulate. The next job's rank 0 removes such names, and only those: cohort's name pattern, owned
// by this user, the pid in the name gone and the lock free (a live job keeps its lock, also when its
// pid is in another pid namespace that shares /dev/shm).
#pragma once

#include <string>
#include <vector>

namespace cohort::detail {

/// Takes the owner's lock on an open segment (flock, exclusive, non-blocking); false when held.
bool lock_shm_segment(int fd);

/// Removes the stale segments described above; returns their names ("/cohort-...").
std::vector<std::string> remove_stale_shm_segments();

}  // namespace cohort::detail
