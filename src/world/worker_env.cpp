// Worker environment (see worker_env.h). The variable set mirrors torchrun's LocalElasticAgent:
// TORCHELASTIC_USE_AGENT_STORE is False because workers host their own store at MASTER_PORT (torchrun
// 2.x's agent hosts it and says True). TORCHELASTIC_SIGNALS_TO_HANDLE names the signals cohortrun
// forwards to its workers (signals.cpp), torchrun 2.x's default set.
#include "world/worker_env.h"

#include <unistd.h>  // environ (declared by glibc with _GNU_SOURCE, which g++ defines)

#include "cohort/error.h"
#include "compat/torch_facts.h"

namespace cohort::detail::launch {
namespace {

constexpr const char* kNcclAsyncVar = kNcclAsyncErrorVariable;  // renamed in 2.2 (compat/)

}  // namespace

RankSpan assign_worker_ranks(const std::vector<int>& local_sizes, int node_rank) {
  if (node_rank < 0 || node_rank >= static_cast<int>(local_sizes.size())) {
    throw Error("node rank " + std::to_string(node_rank) + " not in 0.." + std::to_string(local_sizes.size()),
                ErrorKind::kInternal);
  }
  RankSpan span;
  for (int i = 0; i < static_cast<int>(local_sizes.size()); ++i) {
    if (i == node_rank) span.base = span.world_size;
    span.world_size += local_sizes[i];
  }
  return span;
}

EnvVars build_worker_env(const EnvVars& base, const GroupLayout& layout, int local_rank,
                         const std::string& error_file) {
  EnvVars env = base;
  const int rank = layout.rank_base + local_rank;
  env["LOCAL_RANK"] = std::to_string(local_rank);
  env["RANK"] = std::to_string(rank);
  env["GROUP_RANK"] = std::to_string(layout.group_rank);
  env["ROLE_RANK"] = std::to_string(rank);  // one role: role ranks are global ranks
  env["ROLE_NAME"] = layout.role;
  env["LOCAL_WORLD_SIZE"] = std::to_string(layout.local_world_size);
  env["WORLD_SIZE"] = std::to_string(layout.world_size);
  env["GROUP_WORLD_SIZE"] = std::to_string(layout.group_world_size);
  env["ROLE_WORLD_SIZE"] = std::to_string(layout.world_size);
  env["MASTER_ADDR"] = layout.master_addr;
  env["MASTER_PORT"] = std::to_string(layout.master_port);
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(layout.restart_count);
  env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(layout.max_restarts);
  env["TORCHELASTIC_RUN_ID"] = layout.run_id;
  if (!layout.secret.empty()) env["COHORT_JOB_SECRET"] = layout.secret;  // docs/security.md
  if (!layout.launch_id.empty()) env["COHORT_LAUNCH_ID"] = layout.launch_id;
  env["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  env["TORCHELASTIC_ERROR_FILE"] = error_file;
  env["TORCHELASTIC_SIGNALS_TO_HANDLE"] = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";
  if (!base.count(kNcclAsyncVar)) env[kNcclAsyncVar] = "1";
  if (!base.count("OMP_NUM_THREADS") && layout.local_world_size > 1) env["OMP_NUM_THREADS"] = "1";
  return env;
}

std::vector<std::string> launcher_variable_names() {
  return {"LOCAL_RANK",
          "RANK",
          "GROUP_RANK",
          "ROLE_RANK",
          "ROLE_NAME",
          "LOCAL_WORLD_SIZE",
          "WORLD_SIZE",
          "GROUP_WORLD_SIZE",
          "ROLE_WORLD_SIZE",
          "MASTER_ADDR",
          "MASTER_PORT",
          "TORCHELASTIC_RESTART_COUNT",
          "TORCHELASTIC_MAX_RESTARTS",
          "TORCHELASTIC_RUN_ID",
          "TORCHELASTIC_USE_AGENT_STORE",
          "TORCHELASTIC_ERROR_FILE",
          "TORCHELASTIC_SIGNALS_TO_HANDLE",
          kNcclAsyncVar};
}

std::vector<std::string> to_envp(const EnvVars& env) {
  std::vector<std::string> envp;
  envp.reserve(env.size());
  for (const auto& [key, value] : env) envp.push_back(key + "=" + value);
  return envp;
}

EnvVars process_env() {
  EnvVars env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string item(*entry);
    const auto eq = item.find('=');
    if (eq != std::string::npos) env.emplace(item.substr(0, eq), item.substr(eq + 1));
  }
  return env;
}

}  // namespace cohort::detail::launch
