// The directory side of a save (save.cpp's phases 1 and 3, on the rank that commits): a fresh
// temporary without the leftovers of crashed saves, the finished step put in place and `latest` pointed
// at it (a step saved again swapped with its old copy in one rename, a failure rolled back), and the
// retention of older steps.
#pragma once

#include <filesystem>

namespace cohort::detail::ckpt {

/// Removes from `root` (whose lock this process holds) what crashed saves left: temporaries
/// (`.step-N.tmp`, a pointer's or a file's `.*.tmp`) and a replaced step's old copy, except one a load
/// may take (its step missing and `latest` naming it). A path that cannot be removed is warned about.
void remove_leftovers(const std::filesystem::path& root);

/// Phase 1: `root` made and locked for this job (dir_lock.h), leftovers of crashed saves removed, `tmp`
/// made fresh in it (refused when something is there again).
void make_fresh_tmp(const std::filesystem::path& root, const std::filesystem::path& tmp);

/// Phase 3: `tmp` (complete, its manifest written) becomes `final_dir`, then `latest` names it, then
/// steps older than keep_last go. Throws, having put back what was there, when a step of it fails.
void commit(const std::filesystem::path& root, const std::filesystem::path& tmp, const std::filesystem::path& final_dir,
            int keep_last);

}  // namespace cohort::detail::ckpt
