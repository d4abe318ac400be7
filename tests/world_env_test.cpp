// Launcher detection tests from recorded environments: one dump per launcher family (torchrun, srun,
// mpirun of Open MPI 4 and 5, MPICH/Intel MPI Hydra, MVAPICH mpirun_rsh), the precedence between them,
// every bad-input message by exact substring, Slurm host lists, and derived ports that every rank
// computes alike. Pure functions of an EnvMap, so nothing here touches the process environment but one test.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "cohort/error.h"
#include "world/launch_env.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace world_env_test {

namespace {

using cohort::detail::detect_launch_env;
using cohort::detail::EnvMap;
using cohort::detail::expand_nodelist;
using cohort::detail::LaunchEnv;

EnvMap with(EnvMap env, const EnvMap& changes) {
  for (const auto& [name, value] : changes) env[name] = value;
  return env;
}

EnvMap without(EnvMap env, const std::vector<std::string>& names) {
  for (const auto& name : names) env.erase(name);
  return env;
}

// The message of the cohort::Error that detection throws, or a failure when it does not throw.
std::string error_of(const EnvMap& env) {
  try {
    detect_launch_env(env);
  } catch (const cohort::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no cohort::Error thrown";
  return "";
}

std::string nodelist_error(const std::string& list) {
  try {
    expand_nodelist(list);
  } catch (const cohort::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no cohort::Error thrown for " << list;
  return "";
}

const EnvMap kShell = {{"HOME", "/home/alice"}, {"PATH", "/usr/local/bin:/usr/bin:/bin"},
                       {"USER", "alice"}, {"LANG", "C.UTF-8"}, {"SHELL", "/bin/bash"}};

// torchrun --nnodes=2 --nproc_per_node=4, rank 5 (node 1, local 1).
const EnvMap kTorchrun = with(kShell, {
    {"GROUP_RANK", "1"}, {"GROUP_WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
    {"MASTER_ADDR", "node01.cluster"}, {"MASTER_PORT", "29500"}, {"RANK", "5"}, {"ROLE_NAME", "default"},
    {"ROLE_RANK", "5"}, {"ROLE_WORLD_SIZE", "8"}, {"TORCHELASTIC_MAX_RESTARTS", "0"},
    {"TORCHELASTIC_RESTART_COUNT", "0"}, {"TORCHELASTIC_RUN_ID", "job42"},
    {"TORCHELASTIC_USE_AGENT_STORE", "False"}, {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
    {"TORCHELASTIC_ERROR_FILE", "/tmp/torchelastic_x/none_y/attempt_0/5/error.json"},
    {"WORLD_SIZE", "8"}, {"OMP_NUM_THREADS", "1"}, {"CUDA_MODULE_LOADING", "LAZY"}});

// sbatch job 123456 on gpu-[001-002]; the batch script's own environment (no srun step).
const EnvMap kSlurmBatch = with(kShell, {
    {"ENVIRONMENT", "BATCH"}, {"SLURMD_NODENAME", "gpu-001"}, {"SLURM_CLUSTER_NAME", "cluster"},
    {"SLURM_CONF", "/etc/slurm/slurm.conf"}, {"SLURM_CPUS_ON_NODE", "32"}, {"SLURM_CPUS_PER_TASK", "8"},
    {"SLURM_GTIDS", "0"}, {"SLURM_JOBID", "123456"}, {"SLURM_JOB_ACCOUNT", "proj"},
    {"SLURM_JOB_CPUS_PER_NODE", "32(x2)"}, {"SLURM_JOB_GID", "1000"}, {"SLURM_JOB_ID", "123456"},
    {"SLURM_JOB_NAME", "train"}, {"SLURM_JOB_NODELIST", "gpu-[001-002]"}, {"SLURM_JOB_NUM_NODES", "2"},
    {"SLURM_JOB_PARTITION", "gpu"}, {"SLURM_JOB_QOS", "normal"}, {"SLURM_JOB_UID", "1000"},
    {"SLURM_JOB_USER", "alice"}, {"SLURM_LOCALID", "0"}, {"SLURM_NNODES", "2"}, {"SLURM_NODEID", "0"},
    {"SLURM_NODELIST", "gpu-[001-002]"}, {"SLURM_NPROCS", "8"}, {"SLURM_NTASKS", "8"},
    {"SLURM_NTASKS_PER_NODE", "4"}, {"SLURM_PRIO_PROCESS", "0"}, {"SLURM_PROCID", "0"},
    {"SLURM_SUBMIT_DIR", "/home/alice/run"}, {"SLURM_SUBMIT_HOST", "login1"},
    {"SLURM_TASKS_PER_NODE", "4(x2)"}, {"SLURM_TASK_PID", "80211"}, {"SLURM_TOPOLOGY_ADDR", "gpu-001"},
    {"SLURM_TOPOLOGY_ADDR_PATTERN", "node"}, {"SLURM_UMASK", "0022"}});

// `srun python train` inside that job: step 0, task 5 on gpu-002 (node 1, local 1).
const EnvMap kSrun = with(kSlurmBatch, {
    {"SLURMD_NODENAME", "gpu-002"}, {"SLURM_CPU_BIND", "quiet,mask_cpu:0xFF00"},
    {"SLURM_DISTRIBUTION", "block"}, {"SLURM_GTIDS", "4,5,6,7"}, {"SLURM_LAUNCH_NODE_IPADDR", "10.1.0.1"},
    {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "1"}, {"SLURM_PROCID", "5"},
    {"SLURM_SRUN_COMM_HOST", "10.1.0.1"},
    {"SLURM_SRUN_COMM_PORT", "40123"}, {"SLURM_STEPID", "0"}, {"SLURM_STEP_ID", "0"},
    {"SLURM_STEP_LAUNCHER_PORT", "40123"}, {"SLURM_STEP_NODELIST", "gpu-[001-002]"},
    {"SLURM_STEP_NUM_NODES", "2"}, {"SLURM_STEP_NUM_TASKS", "8"}, {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"},
    {"SLURM_TASK_PID", "81234"}, {"SLURM_TOPOLOGY_ADDR", "gpu-002"}, {"CUDA_VISIBLE_DEVICES", "0,1,2,3"}});

// Open MPI 4 `mpirun -np 4` on one host, rank 2.
const EnvMap kOpenMpi4 = with(kShell, {
    {"OMPI_APP_CTX_NUM_PROCS", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
    {"OMPI_COMM_WORLD_NODE_RANK", "2"}, {"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"},
    {"OMPI_FIRST_RANKS", "0"}, {"OMPI_MCA_ess", "^singleton"}, {"OMPI_MCA_ess_base_jobid", "2855403521"},
    {"OMPI_MCA_ess_base_vpid", "2"}, {"OMPI_MCA_initial_wdir", "/home/alice/run"},
    {"OMPI_MCA_orte_app_num", "0"}, {"OMPI_MCA_orte_ess_node_rank", "2"},
    {"OMPI_MCA_orte_ess_num_procs", "4"},
    {"OMPI_MCA_orte_hnp_uri", "2855403520.0;tcp://10.0.0.5,172.17.0.1:41235"}, {"OMPI_MCA_orte_launch", "1"},
    {"OMPI_MCA_orte_num_nodes", "1"}, {"OMPI_MCA_pmix", "^s1,s2,cray,isolated"}, {"OMPI_NUM_APP_CTX", "1"},
    {"OMPI_UNIVERSE_SIZE", "4"}, {"PMIX_NAMESPACE", "2855403521"}, {"PMIX_RANK", "2"},
    {"PMIX_SECURITY_MODE", "native"}, {"PMIX_SERVER_URI3", "pmix-server.81923;tcp4://127.0.0.1:37501"},
    {"PMIX_VERSION", "3.2.3"}});

// Open MPI 5 (PRRTE) `mpirun -np 8 --map-by ppr:4:node -x MASTER_ADDR -x MASTER_PORT`, rank 6.
const EnvMap kOpenMpi5 = with(kShell, {
    {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
    {"OMPI_COMM_WORLD_NODE_RANK", "2"},
    {"OMPI_COMM_WORLD_RANK", "6"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_UNIVERSE_SIZE", "8"},
    {"OMPI_MCA_orte_precondition_transports", "4d5e7a1b2c3d4e5f-6a7b8c9d0e1f2a3b"},
    {"PMIX_NAMESPACE", "prterun-node01-81923@1"}, {"PMIX_RANK", "6"}, {"PMIX_HOSTNAME", "node02"},
    {"PRTE_MCA_prte_base_jobid", "1"}, {"MASTER_ADDR", "node01"}, {"MASTER_PORT", "29500"}});

// MPICH 4 `mpiexec -n 4` (Hydra) on one host, rank 1.
const EnvMap kHydra = with(kShell, {
    {"PMI_RANK", "1"}, {"PMI_SIZE", "4"}, {"PMI_FD", "9"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "4"},
    {"MPIR_CVAR_CH3_INTERFACE_HOSTNAME", "ws1"}, {"GFORTRAN_UNBUFFERED_PRECONNECTED", "y"}});

// Intel MPI `mpirun -n 4 -ppn 2` inside the sbatch job: Hydra forwards the batch script's SLURM_*
// (SLURM_PROCID=0 on every rank) and the proxies' srun step adds SLURM_STEP_ID. Rank 3 on node 2.
const EnvMap kIntelMpiInSlurm = with(kSlurmBatch, {
    {"SLURM_STEP_ID", "0"}, {"SLURM_STEPID", "0"}, {"PMI_RANK", "3"}, {"PMI_SIZE", "4"}, {"PMI_FD", "6"},
    {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}, {"I_MPI_ROOT", "/opt/intel/oneapi/mpi/2021.10.0"},
    {"I_MPI_HYDRA_BOOTSTRAP", "slurm"}, {"MASTER_ADDR", "gpu-001"}});

// MVAPICH2 `mpirun_rsh -np 4 node01 node01 node02 node02 MASTER_ADDR=node01 ./train`, rank 3.
const EnvMap kMvapich = with(kShell, {
    {"MPIRUN_ID", "31337"}, {"MPIRUN_MPD", "0"}, {"MPIRUN_NPROCS", "4"}, {"MPIRUN_RSH_LAUNCH", "1"},
    {"MV2_COMM_WORLD_LOCAL_RANK", "1"}, {"MV2_COMM_WORLD_LOCAL_SIZE", "2"}, {"MV2_COMM_WORLD_RANK", "3"},
    {"MV2_COMM_WORLD_SIZE", "4"}, {"MV2_NODE_ID", "1"}, {"MV2_NUM_NODES_IN_JOB", "2"}, {"PMI_ID", "3"},
    {"PMI_PORT", "node02:45678"}, {"MASTER_ADDR", "node01"}});

void expect_env(const LaunchEnv& got, const LaunchEnv& want) {
  EXPECT_EQ(got.launcher, want.launcher);
  EXPECT_EQ(got.rank, want.rank);
  EXPECT_EQ(got.size, want.size);
  EXPECT_EQ(got.local_rank, want.local_rank);
  EXPECT_EQ(got.local_size, want.local_size);
  EXPECT_EQ(got.node_rank, want.node_rank);
  EXPECT_EQ(got.has_local_rank, want.has_local_rank);
  EXPECT_EQ(got.master_addr, want.master_addr);
  EXPECT_EQ(got.master_port, want.master_port);
}

LaunchEnv make(const char* launcher, int rank, int size, int local_rank, int local_size, int node_rank,
               const char* addr, int port, bool has_local_rank = true) {
  LaunchEnv e;
  e.launcher = launcher;
  e.rank = rank;
  e.size = size;
  e.local_rank = local_rank;
  e.local_size = local_size;
  e.node_rank = node_rank;
  e.has_local_rank = has_local_rank;
  e.master_addr = addr;
  e.master_port = port;
  return e;
}

TEST(WorldEnv, NoLauncherIsAWorldOfOne) {
  expect_env(detect_launch_env({}), make("none", 0, 1, 0, 1, 0, "", 0, false));
  expect_env(detect_launch_env(kShell), make("none", 0, 1, 0, 1, 0, "", 0, false));
  // A lone process ignores MASTER_* even when malformed: it opens no socket.
  expect_env(detect_launch_env(with(kShell, {{"MASTER_PORT", "junk"}})), LaunchEnv{});
}

TEST(WorldEnv, Torchrun) {
  expect_env(detect_launch_env(kTorchrun),
             make("cohortrun/torchrun", 5, 8, 1, 4, 1, "node01.cluster", 29500));
}

TEST(WorldEnv, TorchrunDefaultsWhenLocalVariablesAreMissing) {
  // LOCAL_WORLD_SIZE given: local rank and node follow from it.
  EnvMap env = without(kTorchrun, {"LOCAL_RANK", "GROUP_RANK"});
  expect_env(detect_launch_env(env),
             make("cohortrun/torchrun", 5, 8, 1, 4, 1, "node01.cluster", 29500, false));
  // Nothing local given: one node holding the whole world; no address is invented.
  env = {{"RANK", "2"}, {"WORLD_SIZE", "3"}};
  expect_env(detect_launch_env(env), make("cohortrun/torchrun", 2, 3, 2, 3, 0, "", 0, false));
}

TEST(WorldEnv, SlurmStep) {
  expect_env(detect_launch_env(kSrun), make("slurm", 5, 8, 1, 4, 1, "gpu-001", 33435));
}

TEST(WorldEnv, SlurmUnevenTasksPerNode) {
  // srun -n 7 over 4 nodes: 2+2+2+1; task 6 alone on the last node.
  EnvMap env = with(kSrun, {{"SLURM_STEP_TASKS_PER_NODE", "2(x3),1"}, {"SLURM_TASKS_PER_NODE", "2(x3),1"},
                            {"SLURM_STEP_NUM_TASKS", "7"}, {"SLURM_NTASKS", "7"}, {"SLURM_PROCID", "6"},
                            {"SLURM_NODEID", "3"}, {"SLURM_LOCALID", "0"},
                            {"SLURM_STEP_NODELIST", "node[01-03,07]"}});
  expect_env(detect_launch_env(env), make("slurm", 6, 7, 0, 1, 3, "node01", 33435));
  // Only SLURM_NTASKS_PER_NODE, only SLURM_NTASKS, and the obsolete SLURM_NODELIST still work.
  env = without(kSrun, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_STEP_NUM_TASKS",
                        "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"});
  expect_env(detect_launch_env(env), make("slurm", 5, 8, 1, 4, 1, "gpu-001", 33435));
}

TEST(WorldEnv, SlurmShellsThatAreNotLaunchesAreAWorldOfOne) {
  EXPECT_EQ(detect_launch_env(kSlurmBatch).launcher, "none");  // SLURM_PROCID=0, SLURM_NTASKS=8, no step
  EXPECT_EQ(detect_launch_env(with(kShell, {{"SLURM_JOB_ID", "123456"}})).launcher, "none");
  // Special steps: the batch script (0xfffffffe), extern (0xfffffffc), interactive (0xfffffffa).
  for (const char* step : {"4294967294", "4294967292", "4294967290"}) {
    EXPECT_EQ(detect_launch_env(with(kSlurmBatch, {{"SLURM_STEP_ID", step}})).launcher, "none") << step;
  }
}

TEST(WorldEnv, SlurmReservedPortsAndOverrides) {
  EXPECT_EQ(detect_launch_env(with(kSrun, {{"SLURM_STEP_RESV_PORTS", "12000-12003"}})).master_port, 12000);
  LaunchEnv e = detect_launch_env(with(kSrun, {{"MASTER_ADDR", "10.1.0.9"}, {"MASTER_PORT", "29400"}}));
  EXPECT_EQ(e.master_addr, "10.1.0.9");
  EXPECT_EQ(e.master_port, 29400);
  // A step without any host list: fine on one node, an error naming the fix on several.
  EnvMap bare = without(kSrun, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"});
  EXPECT_NE(error_of(bare).find("slurm launch may span several nodes"), std::string::npos);
  bare = with(bare, {{"SLURM_STEP_TASKS_PER_NODE", "8"}, {"SLURM_NODEID", "0"}});
  EXPECT_EQ(detect_launch_env(bare).master_addr, "127.0.0.1");
}

TEST(WorldEnv, OpenMpi4SingleNode) {
  expect_env(detect_launch_env(kOpenMpi4), make("openmpi", 2, 4, 2, 4, 0, "127.0.0.1", 24481));
}

TEST(WorldEnv, OpenMpi5MultiNode) {
  // OMPI_COMM_WORLD_NODE_RANK=2 is a per-node rank; the node is rank / local size.
  expect_env(detect_launch_env(kOpenMpi5), make("openmpi", 6, 8, 2, 4, 1, "node01", 29500));
  // Without MASTER_PORT the PMIx namespace names the job.
  EXPECT_EQ(detect_launch_env(without(kOpenMpi5, {"MASTER_PORT"})).master_port, 54591);
  EXPECT_EQ(error_of(without(kOpenMpi5, {"MASTER_ADDR"})),
            "openmpi launch may span several nodes (OMPI_COMM_WORLD_LOCAL_SIZE=4 < OMPI_COMM_WORLD_SIZE=8): "
            "multi-node runs need MASTER_ADDR (and MASTER_PORT) exported to all ranks, e.g. "
            "mpirun -x MASTER_ADDR=<rank 0's host> -x MASTER_PORT=29500 ...");
  // Uneven nodes (8 ranks, 3 here): the node cannot be told from the environment.
  EXPECT_EQ(detect_launch_env(with(kOpenMpi5, {{"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}})).node_rank, 0);
}

TEST(WorldEnv, OpenMpiInsideSlurmUsesMpiRanks) {
  // A remote rank of mpirun in an allocation: its orted was started by `srun --ntasks-per-node=1`.
  EnvMap env = with(kOpenMpi5, {{"SLURM_JOB_ID", "123456"}, {"SLURM_STEP_ID", "1"}, {"SLURM_PROCID", "1"},
                                {"SLURM_NTASKS", "2"}, {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_NODEID", "1"},
                                {"SLURM_LOCALID", "0"}, {"SLURM_STEP_NODELIST", "node[01-02]"}});
  expect_env(detect_launch_env(env), make("openmpi", 6, 8, 2, 4, 1, "node01", 29500));
}

TEST(WorldEnv, HydraSingleNode) {
  // Hydra exports no job id: no port is derived, the caller asks for MASTER_PORT.
  expect_env(detect_launch_env(kHydra), make("pmi", 1, 4, 1, 4, 0, "127.0.0.1", 0));
  EXPECT_EQ(detect_launch_env(with(kHydra, {{"MASTER_PORT", "29501"}})).master_port, 29501);
}

TEST(WorldEnv, IntelMpiInsideSlurm) {
  expect_env(detect_launch_env(kIntelMpiInSlurm), make("pmi", 3, 4, 1, 2, 1, "gpu-001", 49900));
}

TEST(WorldEnv, HydraPmiPortModeIsAnError) {
  EnvMap env = with(without(kHydra, {"PMI_RANK", "PMI_SIZE", "PMI_FD"}),
                    {{"PMI_PORT", "ws1:40000"}, {"PMI_ID", "1"}});
  EXPECT_EQ(error_of(env),
            "MPI_LOCALRANKID=1 says pmi started this process, but PMI_RANK and PMI_SIZE are not set; "
            "export RANK and WORLD_SIZE instead");
}

TEST(WorldEnv, Mvapich) {
  expect_env(detect_launch_env(kMvapich), make("mvapich", 3, 4, 1, 2, 1, "node01", 54962));
}

TEST(WorldEnv, PrecedenceFirstMatchWins) {
  // torchrun (or cohortrun) started inside a Slurm step and under mpirun: its variables win.
  EXPECT_EQ(detect_launch_env(with(kSrun, kTorchrun)).launcher, "cohortrun/torchrun");
  EXPECT_EQ(detect_launch_env(with(kOpenMpi4, kTorchrun)).launcher, "cohortrun/torchrun");
  // srun --mpi=pmi2 sets PMI_RANK itself: still a Slurm launch.
  EnvMap pmi2 =
      with(kSrun, {{"PMI_RANK", "5"}, {"PMI_SIZE", "8"}, {"PMI_FD", "11"}, {"PMI_JOBID", "123456.0"}});
  EXPECT_EQ(detect_launch_env(pmi2).launcher, "slurm");
  // Open MPI before PMI before MVAPICH when several are present.
  EXPECT_EQ(detect_launch_env(with(kHydra, kOpenMpi4)).launcher, "openmpi");
  EXPECT_EQ(detect_launch_env(with(kMvapich, kHydra)).launcher, "pmi");
}

TEST(WorldEnv, BadInputNamesTheVariableAndValue) {
  const EnvMap tr = {{"RANK", "0"}, {"WORLD_SIZE", "4"}};
  const std::vector<std::pair<EnvMap, std::string>> cases = {
      {{{"RANK", "0"}}, "RANK=0 is set but WORLD_SIZE is not; launchers export both"},
      {{{"WORLD_SIZE", "2"}}, "WORLD_SIZE=2 is set but RANK is not"},
      {with(tr, {{"WORLD_SIZE", "abc"}}), "WORLD_SIZE=abc is not a number"},
      {with(tr, {{"RANK", "3x"}}), "RANK=3x is not a number"},
      {with(tr, {{"RANK", " 1"}}), "RANK= 1 is not a number"},
      {with(tr, {{"RANK", "1\n"}}), "RANK=1\\x0a is not a number"},
      {with(tr, {{"RANK", "-1"}}), "RANK=-1 is negative"},
      {with(tr, {{"RANK", ""}}), "RANK is set but empty; expected a whole number"},
      {with(tr, {{"RANK", "99999999999"}}), "RANK=99999999999 is too large"},
      {with(tr, {{"RANK", "4"}}), "RANK=4 is not less than WORLD_SIZE=4"},
      {with(tr, {{"WORLD_SIZE", "0"}}), "WORLD_SIZE=0 must be at least 1"},
      {with(tr, {{"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}),
       "LOCAL_RANK=2 is not less than LOCAL_WORLD_SIZE=2"},
      {with(tr, {{"LOCAL_RANK", "4"}}), "LOCAL_RANK=4 is not less than WORLD_SIZE=4"},
      {with(tr, {{"LOCAL_WORLD_SIZE", "0"}}), "LOCAL_WORLD_SIZE=0 must be at least 1"},
      {with(tr, {{"LOCAL_WORLD_SIZE", "8"}}), "LOCAL_WORLD_SIZE=8 is larger than WORLD_SIZE=4"},
      {with(tr, {{"GROUP_RANK", "-2"}}), "GROUP_RANK=-2 is negative"},
      {with(tr, {{"MASTER_PORT", "70000"}}), "MASTER_PORT=70000 is out of range 1..65535"},
      {with(tr, {{"MASTER_PORT", "0"}}), "MASTER_PORT=0 is out of range 1..65535"},
      {with(tr, {{"MASTER_PORT", "29500x"}}), "MASTER_PORT=29500x is not a number"},
      {with(tr, {{"MASTER_ADDR", ""}}), "MASTER_ADDR is set but empty"},
      {with(kSrun, {{"SLURM_PROCID", "8"}}), "SLURM_PROCID=8 is not less than SLURM_STEP_NUM_TASKS=8"},
      {with(kSrun, {{"SLURM_LOCALID", "4"}}),
       "SLURM_LOCALID=4 is not less than SLURM_STEP_TASKS_PER_NODE=4(x2) (4 tasks on node 1)"},
      {with(kSrun, {{"SLURM_NODEID", "2"}}),
       "SLURM_NODEID=2 is not less than 2, the node count in SLURM_STEP_TASKS_PER_NODE=4(x2)"},
      {with(kSrun, {{"SLURM_STEP_TASKS_PER_NODE", "4(x2"}}),
       "SLURM_STEP_TASKS_PER_NODE=4(x2 is not a task count list like 2(x3),1"},
      {with(kSrun, {{"SLURM_STEP_TASKS_PER_NODE", "4,,4"}}), "SLURM_STEP_TASKS_PER_NODE=4,,4 is not a task"},
      {with(kSrun, {{"SLURM_STEP_NODELIST", "gpu-[001-002"}}),
       "SLURM_STEP_NODELIST=gpu-[001-002: unclosed '['"},
      {with(kSrun, {{"SLURM_STEP_NODELIST", ""}}), "SLURM_STEP_NODELIST= is empty"},
      {with(kSrun, {{"SLURM_STEP_RESV_PORTS", "70000-70003"}}),
       "SLURM_STEP_RESV_PORTS=70000-70003 is out of range 1..65535"},
      {with(kSrun, {{"SLURM_STEP_ID", "abc"}}), "SLURM_STEP_ID=abc is not a number"},
      {with(kSrun, {{"SLURM_STEP_NUM_TASKS", "0"}}), "SLURM_STEP_NUM_TASKS=0 must be at least 1"},
      {without(kOpenMpi4, {"OMPI_COMM_WORLD_SIZE"}),
       "OMPI_COMM_WORLD_RANK=2 is set but OMPI_COMM_WORLD_SIZE is not; launchers export both"},
      {with(kOpenMpi4, {{"OMPI_COMM_WORLD_LOCAL_RANK", "4"}}),
       "OMPI_COMM_WORLD_LOCAL_RANK=4 is not less than OMPI_COMM_WORLD_LOCAL_SIZE=4"},
      {with(kHydra, {{"PMI_SIZE", "-4"}}), "PMI_SIZE=-4 is negative"},
      {with(kHydra, {{"MPI_LOCALNRANKS", "2"}}),
       "pmi launch may span several nodes (MPI_LOCALNRANKS=2 < PMI_SIZE=4): multi-node runs need MASTER_ADDR "
       "(and MASTER_PORT) exported to all ranks, e.g. mpiexec -genv MASTER_ADDR <rank 0's host>"},
      {without(kHydra, {"MPI_LOCALRANKID", "MPI_LOCALNRANKS"}),
       "pmi launch may span several nodes (no local size given, PMI_SIZE=4)"},
      {with(kMvapich, {{"MV2_COMM_WORLD_SIZE", "0"}}), "MV2_COMM_WORLD_SIZE=0 must be at least 1"},
      {without(kMvapich, {"MASTER_ADDR"}),
       "e.g. mpirun_rsh ... MASTER_ADDR=<rank 0's host> MASTER_PORT=29500"},
  };
  for (const auto& [env, expected] : cases) {
    const std::string message = error_of(env);
    EXPECT_NE(message.find(expected), std::string::npos)
        << "expected: " << expected << "\n     got: " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(WorldEnv, ExpandNodelist) {
  using V = std::vector<std::string>;
  EXPECT_EQ(expand_nodelist("node[01-04,07]"), (V{"node01", "node02", "node03", "node04", "node07"}));
  EXPECT_EQ(expand_nodelist("a[1-2],b3"), (V{"a1", "a2", "b3"}));
  EXPECT_EQ(expand_nodelist("gpu-[001-003]-x"), (V{"gpu-001-x", "gpu-002-x", "gpu-003-x"}));
  EXPECT_EQ(expand_nodelist("rack[1-2]-n[01-02]"), (V{"rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"}));
  EXPECT_EQ(expand_nodelist("n[8-10]"), (V{"n8", "n9", "n10"}));
  EXPECT_EQ(expand_nodelist("n[098-101]"), (V{"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(expand_nodelist("a,b[1,3],c"), (V{"a", "b1", "b3", "c"}));
  EXPECT_EQ(expand_nodelist("n[5]"), (V{"n5"}));
  EXPECT_EQ(expand_nodelist("login1.cluster.org"), (V{"login1.cluster.org"}));
  EXPECT_EQ(expand_nodelist(""), V{});
  EXPECT_EQ(expand_nodelist("node[0-9999]").size(), 10000u);
}

TEST(WorldEnv, MalformedNodelistNamesIt) {
  EXPECT_EQ(nodelist_error("node[01-04"), "nodelist \"node[01-04\": unclosed '['");
  EXPECT_EQ(nodelist_error("node[4-1]"), "nodelist \"node[4-1]\": reversed range 4-1 in [4-1]");
  EXPECT_EQ(nodelist_error("node01-04]"), "nodelist \"node01-04]\": ']' without a matching '['");
  EXPECT_EQ(nodelist_error("n[1-2[3]]"), "nodelist \"n[1-2[3]]\": '[' inside brackets");
  EXPECT_EQ(nodelist_error("n[]"), "nodelist \"n[]\": empty brackets []");
  EXPECT_EQ(nodelist_error("n[a-b]"), "nodelist \"n[a-b]\": \"a-b\" in [a-b] is not a number or a range N-M");
  EXPECT_EQ(nodelist_error("n[1-2-3]"),
            "nodelist \"n[1-2-3]\": \"1-2-3\" in [1-2-3] is not a number or a range N-M");
  EXPECT_EQ(nodelist_error("n[1,]"), "nodelist \"n[1,]\": \"\" in [1,] is not a number or a range N-M");
  EXPECT_EQ(nodelist_error("a,,b"), "nodelist \"a,,b\": empty host name");
  EXPECT_EQ(nodelist_error("a,"), "nodelist \"a,\": empty host name");
  EXPECT_EQ(nodelist_error("n[0-99999999]"),
            "nodelist \"n[0-99999999]\": expands to more than 1048576 hosts");
  EXPECT_EQ(nodelist_error("x[0-2047]y[0-1023]"),
            "nodelist \"x[0-2047]y[0-1023]\": expands to more than 1048576 hosts");
}

TEST(WorldEnv, DerivedPortIsTheSameOnEveryRankAndInRange) {
  // Golden values: FNV-1a of "NAME=value", so a port never changes between builds or machines.
  EXPECT_EQ(detect_launch_env(kSrun).master_port, 33435);
  EXPECT_EQ(detect_launch_env(with(kSrun, {{"SLURM_STEP_ID", "1"}})).master_port, 55816);
  // Every rank of the step computes the same port.
  for (int rank = 0; rank < 8; ++rank) {
    EnvMap env = with(kSrun, {{"SLURM_PROCID", std::to_string(rank)},
                              {"SLURM_LOCALID", std::to_string(rank % 4)},
                              {"SLURM_NODEID", std::to_string(rank / 4)}});
    EXPECT_EQ(detect_launch_env(env).master_port, 33435) << rank;
  }
  // Across many jobs: always in 20000..59999, and spread out.
  std::set<int> seen;
  for (int job = 1; job <= 2000; ++job) {
    const int port = detect_launch_env(with(kSrun, {{"SLURM_JOB_ID", std::to_string(job)}})).master_port;
    EXPECT_GE(port, 20000);
    EXPECT_LE(port, 59999);
    seen.insert(port);
  }
  EXPECT_GT(seen.size(), 1900u);
  // Open MPI 4 names its job in OMPI_MCA_ess_base_jobid, MVAPICH in MPIRUN_ID.
  EXPECT_EQ(detect_launch_env(kOpenMpi4).master_port, 24481);
  EXPECT_EQ(detect_launch_env(kMvapich).master_port, 54962);
  // No identifier at all: 0, and the caller asks for MASTER_PORT.
  EXPECT_EQ(detect_launch_env(without(kSrun, {"SLURM_JOB_ID", "SLURM_JOBID"})).master_port, 0);
}

TEST(WorldEnv, CurrentEnvReadsTheProcessEnvironment) {
  ASSERT_EQ(setenv("COHORT_WORLD_ENV_TEST", "a=b", 1), 0);
  const EnvMap env = cohort::detail::current_env();
  unsetenv("COHORT_WORLD_ENV_TEST");
  ASSERT_EQ(env.count("COHORT_WORLD_ENV_TEST"), 1u);
  EXPECT_EQ(env.at("COHORT_WORLD_ENV_TEST"), "a=b");
}

}  // namespace

}  // namespace world_env_test
