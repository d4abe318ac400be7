// One job per checkpoint directory: the rank that commits saves holds an flock on `<dir>/.lock` from
// its first save until its process ends (the kernel releases it on any death, SIGKILL included), so a
// second job writing the same directory is refused in one line naming the holder's host and pid,
// instead of the two overwriting each other's steps and moving `latest` backwards.
#pragma once

#include <string>

namespace cohort::detail::ckpt {

/// Takes (once per process and directory) the lock of checkpoint directory `root`, which must exist.
/// Throws cohort::Error (kind invalid argument) naming the holder when another process has it.
void hold_directory_lock(const std::string& root);

}  // namespace cohort::detail::ckpt
