// Slurm-style host lists (SLURM_JOB_NODELIST, SLURM_STEP_NODELIST, --rdzv host lists): brackets with
// ranges and commas, "rack[1-2]-n[01-02]" multiplying out, a range's leading zeros kept.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace cohort::detail {

/// No host or task list may expand past this: "node[0-999999999]" is a typo, not a cluster.
inline constexpr std::size_t kMaxHostListEntries = std::size_t{1} << 20;

/// Expands `list`; `what` names it in messages (a variable, or the list itself). Throws cohort::Error.
std::vector<std::string> expand_hostlist(const std::string& list, const std::string& what);

/// Expands a Slurm host list: "node[01-04,07],gpu3" -> node01 node02 node03 node04 node07 gpu3.
std::vector<std::string> expand_nodelist(const std::string& nodelist);

}  // namespace cohort::detail
