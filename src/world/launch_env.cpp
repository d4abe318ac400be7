// Launcher detection as a pure function of an EnvMap: cohortrun/torchrun, Slurm's srun, Open MPI's mpirun,
// PMI launchers (MPICH and Intel MPI Hydra) and MVAPICH's mpirun_rsh each export rank and sizes under their
// own names. A malformed variable is a one-line cohort::Error naming it and its value, never a guess,
// because a wrong rank or size only shows up later as a job hung at its first collective.
#include "world/launch_env.h"

#include <unistd.h>

#include <cctype>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <utility>

#include "cohort/error.h"
#include "core/check.h"
#include "core/text.h"
#include "world/hostlist.h"

namespace cohort::detail {
namespace {

// Derived ports land in 20000..59999, the same on every rank of one job and spread across jobs.
constexpr int kDerivedPortBase = 20000;
constexpr int kDerivedPortSpan = 40000;
// Slurm's special steps (batch script, extern, interactive) sit above SLURM_MAX_NORMAL_STEP_ID.
constexpr unsigned long long kSlurmMaxNormalStep = 0xfffffff0ULL;
// Parsing stops here, far below overflow; ports and step ids are range-checked after.
constexpr unsigned long long kParseMax = 1000000000000ULL;

// An integer read from the environment, with the text that names it in messages ("WORLD_SIZE=4").
struct Num {
  std::string label;
  int value = 0;
};

const std::string* lookup(const EnvMap& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

unsigned long long parse_unsigned(const std::string& name, const std::string& value, unsigned long long max) {
  COHORT_CHECK_KIND(kInvalidArgument, !value.empty(), name, " is set but empty; expected a whole number");
  COHORT_CHECK_KIND(kInvalidArgument, !(value[0] == '-' && all_digits(value.substr(1))), name, "=", value,
                    " is negative");
  COHORT_CHECK_KIND(kInvalidArgument, all_digits(value), name, "=", printable(value), " is not a number");
  unsigned long long n = 0;
  for (char c : value) {
    n = n * 10 + static_cast<unsigned long long>(c - '0');
    COHORT_CHECK_KIND(kInvalidArgument, n <= max, name, "=", value, " is too large");
  }
  return n;
}

Num parse_num(const std::string& name, const std::string& value) {
  return {name + "=" + value, static_cast<int>(parse_unsigned(name, value, INT_MAX))};
}

// The first of `names` that is set, parsed.
std::optional<Num> read_num(const EnvMap& env, const std::vector<const char*>& names) {
  for (const char* name : names) {
    if (const std::string* value = lookup(env, name)) return parse_num(name, *value);
  }
  return std::nullopt;
}

void check_positive(const Num& n) { COHORT_CHECK_KIND(kInvalidArgument, n.value >= 1, n.label, " must be at least 1"); }

void check_less(const Num& a, const Num& b) {
  COHORT_CHECK_KIND(kInvalidArgument, a.value < b.value, a.label, " is not less than ", b.label);
}

// 32-bit FNV-1a: unlike std::hash it is the same on every rank, build and platform.
std::uint32_t fnv1a(const std::string& text) {
  std::uint32_t hash = 2166136261u;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 16777619u;
  }
  return hash;
}

// "NAME=value" of the first identifier set (and non-empty): all ranks of a job see the same one.
std::string job_key(const EnvMap& env, const std::vector<const char*>& names) {
  for (const char* name : names) {
    const std::string* value = lookup(env, name);
    if (value != nullptr && !value->empty()) return std::string(name) + "=" + *value;
  }
  return "";
}

// The value of job_key(): "SLURM_JOB_ID=12" -> "12".
std::string job_value(const std::string& key) { return key.substr(key.find('=') + 1); }

// A Slurm step: "<job>.<step>" (steps of one allocation running side by side are different jobs).
std::string slurm_run_id(const EnvMap& env) {
  const std::string job = job_key(env, {"SLURM_JOB_ID", "SLURM_JOBID"});
  const std::string step = job_key(env, {"SLURM_STEP_ID", "SLURM_STEPID"});
  if (job.empty()) return "";
  return "slurm-" + job_value(job) + (step.empty() ? "" : "." + job_value(step));
}

int derived_port(const std::string& key) {
  if (key.empty()) return 0;  // the caller asks for MASTER_PORT
  return kDerivedPortBase + static_cast<int>(fnv1a(key) % kDerivedPortSpan);
}

// What the launcher said about this process, before defaults fill the gaps.
struct Layout {
  Num rank, size;
  std::optional<Num> local_rank, local_size, node_rank;
};

// Validates a layout and fills what the launcher left out: an unknown local size is taken as the whole
// world (one node); a missing local rank is rank % local_size when the local size is known, else rank.
LaunchEnv finish(const char* launcher, const Layout& in) {
  check_positive(in.size);
  check_less(in.rank, in.size);
  LaunchEnv out;
  out.launcher = launcher;
  out.rank = in.rank.value;
  out.size = in.size.value;
  Num local_size = in.local_size.value_or(in.size);
  if (in.local_size) {
    check_positive(local_size);
    COHORT_CHECK_KIND(kInvalidArgument, local_size.value <= in.size.value, local_size.label, " is larger than ",
                      in.size.label);
  }
  out.local_size = local_size.value;
  out.has_local_rank = in.local_rank.has_value();
  if (in.local_rank) {
    check_less(*in.local_rank, local_size);
    out.local_rank = in.local_rank->value;
  } else {
    out.local_rank = in.local_size ? out.rank % out.local_size : out.rank;
  }
  if (in.node_rank) {
    out.node_rank = in.node_rank->value;
  } else if (in.local_size && out.size % out.local_size == 0) {
    out.node_rank = out.rank / out.local_size;  // exact for block mapping, the launchers' default
  }
  return out;
}

// A TCP port, 1..65535; `label` names it in messages.
int parse_port(const std::string& name, const std::string& digits, const std::string& label) {
  const unsigned long long port = parse_unsigned(name, digits, kParseMax);
  COHORT_CHECK_KIND(kInvalidArgument, port >= 1 && port <= 65535, label, " is out of range 1..65535");
  return static_cast<int>(port);
}

// MASTER_ADDR/MASTER_PORT, when set, win over anything a launcher implies (mpirun -x MASTER_ADDR=...).
void apply_master_overrides(const EnvMap& env, LaunchEnv& out) {
  if (const std::string* addr = lookup(env, "MASTER_ADDR")) {
    COHORT_CHECK_KIND(kInvalidArgument, !addr->empty(),
                      "MASTER_ADDR is set but empty; expected rank 0's host name or address");
    out.master_addr = *addr;
  }
  if (const std::string* port = lookup(env, "MASTER_PORT")) {
    out.master_port = parse_port("MASTER_PORT", *port, "MASTER_PORT=" + *port);
  }
}

// Without MASTER_ADDR, rank 0 is reachable at 127.0.0.1 only when the launcher says all ranks share a node.
void default_master_addr(const Layout& in, const char* how_to_export, LaunchEnv& out) {
  if (!out.master_addr.empty()) return;
  const bool one_node = out.size == 1 || (in.local_size && in.local_size->value == out.size);
  const std::string why = in.local_size ? in.local_size->label + " < " + in.size.label
                                        : "no local size given, " + in.size.label;
  COHORT_CHECK_KIND(kInvalidArgument, one_node, out.launcher, " launch may span several nodes (", why,
                    "): multi-node runs need MASTER_ADDR (and MASTER_PORT) exported to all ranks, e.g. ",
                    how_to_export);
  out.master_addr = "127.0.0.1";
}

// A launcher's rank and size variables come as a pair: one without the other is an error, not a guess.
std::optional<std::pair<Num, Num>> read_rank_and_size(const EnvMap& env, const char* rank_var, const char* size_var) {
  const std::string* rank = lookup(env, rank_var);
  const std::string* size = lookup(env, size_var);
  if (rank == nullptr && size == nullptr) return std::nullopt;
  COHORT_CHECK_KIND(kInvalidArgument, size != nullptr, rank_var, "=", printable(*rank), " is set but ", size_var,
                    " is not; launchers export both");
  COHORT_CHECK_KIND(kInvalidArgument, rank != nullptr, size_var, "=", printable(*size), " is set but ", rank_var,
                    " is not; launchers export both");
  return std::make_pair(parse_num(rank_var, *rank), parse_num(size_var, *size));
}

// ---- cohortrun / torchrun -------------------------------------------------------------------------

std::optional<LaunchEnv> detect_torchrun(const EnvMap& env) {
  const auto rank_size = read_rank_and_size(env, "RANK", "WORLD_SIZE");
  if (!rank_size) return std::nullopt;
  const Layout in{rank_size->first, rank_size->second, read_num(env, {"LOCAL_RANK"}),
                  read_num(env, {"LOCAL_WORLD_SIZE"}), read_num(env, {"GROUP_RANK"})};
  // The Trainer's self-launch (TrainerOptions.devices without a launcher) exports the same variables and
  // says so: its ranks name it, not a launcher the user never started (hostile pass 5, m4).
  const std::string* self_launch = lookup(env, "COHORT_SELF_LAUNCH");
  LaunchEnv out = finish(self_launch != nullptr && *self_launch == "1" ? "self-launch" : "cohortrun/torchrun", in);
  apply_master_overrides(env, out);  // these launchers always export both; no default here
  if (const auto restart = read_num(env, {"TORCHELASTIC_RESTART_COUNT"})) out.restart_count = restart->value;
  const std::string* agent_store = lookup(env, "TORCHELASTIC_USE_AGENT_STORE");
  out.agent_store = agent_store != nullptr && *agent_store == "True";
  const std::string* run_id = lookup(env, "TORCHELASTIC_RUN_ID");
  if (run_id != nullptr && !run_id->empty() && *run_id != "none") out.run_id = *run_id;
  else out.run_id = slurm_run_id(env);  // torchrun inside an srun step: the step names the job
  return out;
}

// ---- launcher tables ------------------------------------------------------------------------------

struct MpiFamily {
  const char* launcher;
  const char* rank_var;
  const char* size_var;
  std::vector<const char*> local_rank_vars;  // first set wins
  std::vector<const char*> local_size_vars;
  std::vector<const char*> node_rank_vars;
  std::vector<const char*> job_id_vars;  // first set names the job, for the derived port
  const char* mark;                      // set only by this launcher, on every process it starts, rank/size or not
  const char* how_to_export;
};

// Open MPI: OMPI_COMM_WORLD_NODE_RANK is a rank among processes on a node, not a node index, so it is
// not used. Job id: ORTE (1.x-4.x) exports its jobid, PRRTE (5.x) and PMIx servers the namespace; all
// ranks of one mpirun share each of them.
// PMI: Hydra (MPICH, Intel MPI) exports no job id of its own but forwards mpiexec's environment to every
// rank, so an enclosing allocation's id serves; Slurm's pmi2 and Cray PMI export PMI_JOBID. Cray PMI and
// PALS name the local variables PMI_LOCAL_RANK/PMI_LOCAL_SIZE.
// MVAPICH: mpirun_rsh exports MPIRUN_ID to all ranks; its PMI_PORT differs per node, so it is not used.
// clang-format off
const MpiFamily kMpiFamilies[] = {
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", {"OMPI_COMM_WORLD_LOCAL_RANK"},
     {"OMPI_COMM_WORLD_LOCAL_SIZE"}, {},
     {"OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid", "PMIX_NAMESPACE", "OMPI_MCA_orte_hnp_uri"},
     "OMPI_COMM_WORLD_RANK", "mpirun -x MASTER_ADDR=<rank 0's host> -x MASTER_PORT=29500 ..."},
    {"pmi", "PMI_RANK", "PMI_SIZE", {"MPI_LOCALRANKID", "PMI_LOCAL_RANK"},
     {"MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"}, {}, {"PMI_JOBID", "SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID"},
     "MPI_LOCALRANKID", "mpiexec -genv MASTER_ADDR <rank 0's host> -genv MASTER_PORT 29500 ..."},
    {"mvapich", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", {"MV2_COMM_WORLD_LOCAL_RANK"},
     {"MV2_COMM_WORLD_LOCAL_SIZE"}, {"MV2_NODE_ID"}, {"MPIRUN_ID"},
     "MV2_COMM_WORLD_RANK", "mpirun_rsh ... MASTER_ADDR=<rank 0's host> MASTER_PORT=29500 ./program"},
};
// clang-format on

// ---- Slurm ----------------------------------------------------------------------------------------

// "2(x3),1" -> {2, 2, 2, 1}: Slurm's compressed per-node task counts.
std::vector<int> expand_tasks_per_node(const std::string& name, const std::string& value) {
  const std::string bad = name + "=" + printable(value) + " is not a task count list like 2(x3),1";
  std::vector<int> counts;
  std::size_t start = 0;
  while (start <= value.size()) {
    std::size_t end = value.find(',', start);
    if (end == std::string::npos) end = value.size();
    const std::string entry = value.substr(start, end - start);
    const std::size_t paren = entry.find("(x");
    const std::string count = entry.substr(0, paren);
    std::string reps = "1";
    if (paren != std::string::npos) {
      COHORT_CHECK_KIND(kInvalidArgument, entry.back() == ')', bad);
      reps = entry.substr(paren + 2, entry.size() - paren - 3);
    }
    COHORT_CHECK_KIND(kInvalidArgument, all_digits(count) && all_digits(reps) && count.size() < 7 && reps.size() < 8,
                      bad);
    const int n = std::stoi(count);
    const std::size_t r = std::stoul(reps);
    COHORT_CHECK_KIND(kInvalidArgument, n >= 1 && r >= 1 && counts.size() + r <= kMaxHostListEntries, bad);
    counts.insert(counts.end(), r, n);
    start = end + 1;
  }
  return counts;
}

// Tasks on this node: the step's own layout first (srun sets it for every step), then the job's.
std::optional<Num> slurm_local_size(const EnvMap& env, const std::optional<Num>& node) {
  for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    const std::string* value = lookup(env, name);
    if (value == nullptr) continue;
    const std::vector<int> counts = expand_tasks_per_node(name, *value);
    const int index = node ? node->value : 0;
    const std::string list = std::string(name) + "=" + *value;
    COHORT_CHECK_KIND(kInvalidArgument, static_cast<std::size_t>(index) < counts.size(), node ? node->label : "node 0",
                      " is not less than ", counts.size(), ", the node count in ", list);
    return Num{list + " (" + std::to_string(counts[index]) + " tasks on node " + std::to_string(index) + ")",
               counts[index]};
  }
  return read_num(env, {"SLURM_NTASKS_PER_NODE"});
}

// Port: the step's reserved ports (srun --resv-ports, MpiParams=ports) are free on every node of the
// step; else a hash of SLURM_JOB_ID and SLURM_STEP_ID, which differ between steps running side by side.
int slurm_port(const EnvMap& env, const std::string& step) {
  if (const std::string* ports = lookup(env, "SLURM_STEP_RESV_PORTS")) {
    const std::string label = "SLURM_STEP_RESV_PORTS=" + printable(*ports);
    const std::string first = ports->substr(0, ports->find_first_of("-,"));
    COHORT_CHECK_KIND(kInvalidArgument, all_digits(first), label, " does not start with a port number");
    return parse_port("SLURM_STEP_RESV_PORTS", first, label);
  }
  const std::string job = job_key(env, {"SLURM_JOB_ID", "SLURM_JOBID"});
  return derived_port(job.empty() ? "" : job + ",SLURM_STEP_ID=" + step);
}

// Slurm counts only for a task of an srun step: the batch script (and salloc's shell) also carries
// SLURM_PROCID=0 and SLURM_NTASKS, but no SLURM_STEP_ID, or a special one. And not when an MPI launcher
// sits inside the step: mpirun, mpiexec.hydra and mpirun_rsh start their daemons with srun, so their
// ranks inherit the daemons' (or the batch script's) SLURM_PROCID, which is not the rank.
std::optional<LaunchEnv> detect_slurm(const EnvMap& env) {
  const std::string* procid = lookup(env, "SLURM_PROCID");
  const char* step_var = lookup(env, "SLURM_STEP_ID") != nullptr ? "SLURM_STEP_ID" : "SLURM_STEPID";
  const std::string* step = lookup(env, step_var);
  const bool has_size = lookup(env, "SLURM_STEP_NUM_TASKS") != nullptr || lookup(env, "SLURM_NTASKS") != nullptr;
  if (procid == nullptr || step == nullptr || !has_size) return std::nullopt;
  for (const MpiFamily& family : kMpiFamilies) {
    if (lookup(env, family.mark) != nullptr) return std::nullopt;
  }
  if (parse_unsigned(step_var, *step, kParseMax) > kSlurmMaxNormalStep) return std::nullopt;

  const std::optional<Num> node = read_num(env, {"SLURM_NODEID"});
  const Layout in{parse_num("SLURM_PROCID", *procid), *read_num(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}),
                  read_num(env, {"SLURM_LOCALID"}), slurm_local_size(env, node), node};
  LaunchEnv out = finish("slurm", in);
  for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
    const std::string* list = lookup(env, name);
    if (list == nullptr) continue;
    const std::string label = std::string(name) + "=" + printable(*list);
    const std::vector<std::string> hosts = expand_hostlist(*list, label);
    COHORT_CHECK_KIND(kInvalidArgument, !hosts.empty(), label, " is empty; expected the step's host list");
    out.master_addr = hosts.front();  // task 0 runs on the first node of the step
    break;
  }
  out.master_port = slurm_port(env, *step);
  out.run_id = slurm_run_id(env);
  apply_master_overrides(env, out);
  default_master_addr(in, "export MASTER_ADDR=$(scontrol show hostnames | head -n 1)", out);
  return out;
}

// ---- MPI launchers --------------------------------------------------------------------------------

std::optional<LaunchEnv> detect_mpi(const EnvMap& env, const MpiFamily& family) {
  const auto rank_size = read_rank_and_size(env, family.rank_var, family.size_var);
  if (!rank_size) {
    // Hydra's -pmi-port mode exports PMI_ID but no world size: fail rather than run as a world of one.
    COHORT_CHECK_KIND(kInvalidArgument, lookup(env, family.mark) == nullptr, family.mark, "=",
                      printable(*lookup(env, family.mark)), " says ", family.launcher, " started this process, but ",
                      family.rank_var, " and ", family.size_var, " are not set; export RANK and WORLD_SIZE instead");
    return std::nullopt;
  }
  const Layout in{rank_size->first, rank_size->second, read_num(env, family.local_rank_vars),
                  read_num(env, family.local_size_vars), read_num(env, family.node_rank_vars)};
  LaunchEnv out = finish(family.launcher, in);
  const std::string job = job_key(env, family.job_id_vars);
  out.master_port = derived_port(job);
  if (!job.empty()) out.run_id = std::string(family.launcher) + "-" + job_value(job);
  apply_master_overrides(env, out);
  default_master_addr(in, family.how_to_export, out);
  return out;
}

}  // namespace

LaunchEnv detect_launch_env(const EnvMap& env) {
  if (auto found = detect_torchrun(env)) return *found;
  if (auto found = detect_slurm(env)) return *found;
  for (const MpiFamily& family : kMpiFamilies) {
    if (auto found = detect_mpi(env, family)) return *found;
  }
  return LaunchEnv{};  // no launcher: a world of one, no address needed
}

EnvMap current_env() {
  EnvMap env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string text(*entry);
    const std::size_t eq = text.find('=');
    if (eq != std::string::npos) {
      env.emplace(text.substr(0, eq), text.substr(eq + 1));  // the first of duplicates wins, as in getenv
    }
  }
  return env;
}

}  // namespace cohort::detail
