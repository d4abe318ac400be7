// cohort::init(): launcher detection, device choice, rendezvous and the world's Comm. The world lives
// for the whole process (like torch.distributed's default group) so DDP and friends can find it.
#include "cohort/world.h"

#include <torch/cuda.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <cmath>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "cohort/comm.h"
#include "cohort/number.h"
#include "comm/comm_impl.h"
#include "compat/torch_facts.h"
#include "core/check.h"
#include "core/job_secret.h"
#include "core/log.h"
#include "core/socket.h"
#include "world/descriptor_budget.h"
#include "world/launch_env.h"
#include "world/malloc_policy.h"
#include "world/rendezvous.h"
#include "world/timeline.h"

namespace cohort {
namespace {

std::mutex g_world_mutex;
std::optional<World> g_world;

std::chrono::milliseconds resolve_timeout(const InitOptions& options) {
  if (options.timeout().count() > 0) return options.timeout();
  // A millisecond up to a day: below, nothing completes; above, a hang goes unreported for days.
  const double seconds = env_real({"COHORT_TIMEOUT", 0.001, 86400, "a number of seconds"}, 300);
  return std::chrono::milliseconds(std::llround(seconds * 1000));
}

// COHORT_SHM=0 keeps CPU collectives on Gloo even when every rank is on this host.
bool shm_enabled() {
  return env_integer({"COHORT_SHM", 0, 1, "a switch (0: Gloo only, 1: shared memory, the default)"}, 1) == 1;
}

// COHORT_HIERARCHICAL=0 keeps CPU collectives across hosts on flat Gloo (docs/design/transports.md).
bool hierarchical_enabled() {
  return env_integer(
             {"COHORT_HIERARCHICAL", 0, 1, "a switch (0: flat Gloo across hosts, 1: hierarchical, the default)"}, 1) ==
         1;
}

// COHORT_TCP_CONGESTION=NAME: the TCP congestion control of cohort's links between hosts (unset: the
// system's). Tried here on a socket of this process, so a name the kernel refuses fails every rank at
// init with the same line, before any rank waits for another.
std::string tcp_congestion() {
  const char* setting = std::getenv("COHORT_TCP_CONGESTION");
  if (setting == nullptr || *setting == '\0') return "";
  const std::string why = detail::net::congestion_control_refused(setting);
  if (!why.empty()) throw Error(detail::str("COHORT_TCP_CONGESTION=", setting, ": ", why), ErrorKind::kInvalidArgument);
  return setting;
}

// COHORT_TEST_HOSTS_SPLIT=N (tests only): one host's ranks grouped as if on N hosts.
int test_hosts_split() { return int(env_integer({"COHORT_TEST_HOSTS_SPLIT", 0, 4096, "a number of hosts"}, 0)); }

// COHORT_SHM_BYTES: the shared-memory transport's chunk, in bytes per rank (rounded up to 4 KiB).
size_t shm_slot_bytes() {
  // 512 KiB: the measured best of 128 KiB..2 MiB.
  return size_t(env_integer({"COHORT_SHM_BYTES", 1, int64_t(1) << 30, "a number of bytes"}, int64_t(512) << 10));
}

bool use_nccl(Backend backend) {
  switch (backend) {
    case Backend::kGloo: return false;
    case Backend::kNccl:
      COHORT_CHECK_KIND(kInvalidArgument, detail::nccl_available() && torch::cuda::is_available(),
                        "backend nccl requested but no CUDA device is available (",
                        detail::nccl_available() ? "torch::cuda::is_available() is false" : "LibTorch has no CUDA",
                        "): use Backend::kGloo");
      return true;
    case Backend::kAuto: return detail::nccl_available() && torch::cuda::is_available();
  }
  return false;
}

// c10d and Gloo throw their own exceptions (a store connection that closed is a std::system_error
// "Connection reset by peer"); each becomes an Error saying which step of joining failed, and where.
template <class Step>
auto joining(const std::string& step, const std::string& endpoint, Step&& run) -> decltype(run()) {
  try {
    return run();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    const std::string what = e.what();
    throw Error("joining the world at " + endpoint + " failed while " + step + ": " + what.substr(0, what.find('\n')),
                ErrorKind::kIO);
  }
}

// The rendezvous of a world of several ranks: the store in `config` (connected, every rank arrived)
// and the address peers reach this rank at. Returns where the world meets ("HOST:PORT"), for errors.
std::string meet(const detail::LaunchEnv& launch, const InitOptions& options, detail::CommConfig& config) {
  COHORT_CHECK_KIND(kInvalidArgument, !launch.master_addr.empty(), "no master address for a world of ", launch.size,
                    " (launcher: ", launch.launcher, "): export MASTER_ADDR (and MASTER_PORT) to every rank");
  COHORT_CHECK_KIND(kInvalidArgument, options.store() || launch.master_port != 0, "no master port for a world of ",
                    launch.size, " (launcher: ", launch.launcher, " exports none): export MASTER_PORT to every rank");
  COHORT_CHECK_KIND(kInvalidArgument, options.store() || (launch.master_port >= 1 && launch.master_port <= 65535),
                    "master port ", launch.master_port, " is out of range 1..65535");
  // torchrun's static rendezvous hosts the store itself and says so (agent_store).
  detail::RendezvousConfig rdzv;
  rdzv.master_addr = launch.master_addr;
  rdzv.master_port = launch.master_port;
  rdzv.rank = launch.rank;
  rdzv.size = launch.size;
  rdzv.timeout = config.timeout;
  rdzv.rank0_hosts = !launch.agent_store;
  rdzv.run_id = launch.run_id;
  // The secret every connection to the store and between ranks proves (docs/security.md).
  const auto secret = detail::job_secret(detail::current_env(), launch.run_id, launch.master_port);
  rdzv.secret = secret.value;
  rdzv.secret_source = secret.source;
  if (!secret.strong())
    COHORT_INFO("the job's secret is derived from ", secret.source,
                " (weak): launch with cohortrun, or export a "
                "random COHORT_JOB_SECRET to every rank");
  config.run_id = launch.run_id;
  config.secret = secret.value;
  const std::string endpoint = launch.master_addr + ":" + std::to_string(launch.master_port);
  config.store = options.store() ? options.store() : joining("connecting to the rendezvous store", endpoint, [&] {
    return detail::connect_store(rdzv);
  });
  // Only a store that outlives an attempt needs one prefix per attempt: rank 0's own store (cohortrun,
  // no agent store) is new with each attempt, and so is torchrun 2.x's agent store (hostile pass 16, S-2:
  // nodes whose restart counts differed never met).
  if (launch.restart_count && launch.agent_store && detail::kAgentStoreOutlivesAttempts)
    config.store = c10::make_intrusive<c10d::PrefixStore>("cohort-attempt-" + std::to_string(*launch.restart_count),
                                                          config.store);
  joining("waiting for every rank to arrive", endpoint, [&] { detail::wait_for_all_ranks(*config.store, rdzv); });
  config.local_address = detail::local_address_towards(launch.master_addr, launch.master_port);
  COHORT_INFO("joined a world of ", launch.size, " via ", launch.launcher, " at ", endpoint,
              " (this host: ", config.local_address, ")");
  return endpoint;
}

}  // namespace

Comm& World::comm() const {
  COHORT_CHECK_KIND(kInvalidArgument, comm_, "this World has no Comm: get the world from cohort::init()");
  return *comm_;
}

std::shared_ptr<Comm> World::new_group(const std::vector<int>& ranks, const GroupOptions& options) const {
  return comm().new_group(ranks, options);
}

Mesh World::node_mesh() const {
  COHORT_CHECK_KIND(kInvalidArgument, size_ % local_size_ == 0, "node_mesh: the world of ", size_,
                    " is not a whole number of nodes of ", local_size_,
                    " ranks (LOCAL_WORLD_SIZE); build a Mesh from explicit coordinates instead");
  return Mesh::at_coordinates(comm(), {{"node", size_ / local_size_}, {"local", local_size_}},
                              {node_rank_, local_rank_});
}

World init(const InitOptions& options) {
  std::lock_guard<std::mutex> lock(g_world_mutex);
  if (g_world) return *g_world;

  // Options win over the environment; they go in before detection so that, e.g., a multi-node
  // mpirun with the master address set in code is not rejected for lacking MASTER_ADDR.
  auto env = detail::current_env();
  if (!options.master_addr().empty()) env["MASTER_ADDR"] = options.master_addr();
  if (options.master_port() != 0) env["MASTER_PORT"] = std::to_string(options.master_port());
  auto launch = detail::detect_launch_env(env);
  if (options.rank() >= 0) launch.rank = options.rank();
  if (options.world_size() > 0) launch.size = options.world_size();
  if (!options.master_addr().empty()) launch.master_addr = options.master_addr();
  if (options.master_port() != 0) launch.master_port = options.master_port();
  COHORT_CHECK_KIND(kInvalidArgument, launch.rank >= 0 && launch.rank < launch.size, "rank ", launch.rank,
                    " is not less than the world size ", launch.size);
  if (launch.size > 1) detail::set_rank_identity(launch.rank, launch.size);  // a lone process needs no prefix
  // Before the first step allocates; outside the log macro, which skips its arguments below "info".
  const auto malloc_policy = detail::apply_malloc_policy();
  COHORT_INFO(malloc_policy.reason);

  World world;
  world.rank_ = launch.rank;
  world.size_ = launch.size;
  world.local_rank_ = launch.local_rank;
  world.local_size_ = launch.local_size;
  world.node_rank_ = launch.node_rank;
  world.launcher_ = launch.launcher;
  const auto timeout = resolve_timeout(options);
  const bool nccl = use_nccl(options.backend());
  if (nccl) {
    const int devices = int(torch::cuda::device_count());
    COHORT_CHECK_KIND(kInvalidArgument, launch.local_rank < devices, "LOCAL_RANK=", launch.local_rank,
                      " has no CUDA device: ", devices, " visible (check CUDA_VISIBLE_DEVICES and --nproc-per-node)");
    world.device_ = torch::Device(torch::kCUDA, launch.local_rank);
    // Before the NCCL group exists: its communicator, streams and our allocations all land on this
    // GPU instead of cuda:0 (where every rank would otherwise crowd).
    detail::set_cuda_device(launch.local_rank);
  }

  detail::CommConfig config;
  config.rank = launch.rank;
  config.size = launch.size;
  config.timeout = timeout;
  config.use_nccl = nccl;
  config.shm = shm_enabled();
  config.shm_slot_bytes = shm_slot_bytes();
  config.hierarchical = hierarchical_enabled();
  config.test_hosts_split = test_hosts_split();
  config.tcp_congestion = tcp_congestion();
  // Before any connection: a rank short of descriptors would fail half-connected (issue 43).
  const auto descriptors = detail::ensure_descriptors(launch.size, launch.local_size);
  if (descriptors.raised)
    COHORT_INFO("raised RLIMIT_NOFILE's soft limit from ", descriptors.soft, " to its hard limit ", descriptors.hard,
                " (this rank's world needs about ", descriptors.need, " descriptors, groups more)");
  std::string endpoint = "this process";  // where the world meets, for errors
  if (launch.size > 1 || options.store()) {
    world.master_addr_ = launch.master_addr;
    world.master_port_ = launch.master_port;
    endpoint = meet(launch, options, config);
  }
  world.comm_ = joining("connecting the ranks to each other", endpoint,
                        [&] { return std::make_shared<Comm>(std::make_unique<detail::CommImpl>(config)); });
  detail::timeline_start(*world.comm_);
  g_world = world;
  static std::once_flag at_exit;
  // Registered after LibTorch and CUDA initialised, so it runs before their static teardown.
  std::call_once(at_exit, [] { std::atexit([] { shutdown(); }); });
  return world;
}

void shutdown() {
  std::shared_ptr<Comm> comm;
  {
    std::lock_guard<std::mutex> lock(g_world_mutex);
    if (!g_world) return;
    comm = g_world->comm_ptr();
    g_world.reset();
  }
  detail::timeline_finish(*comm);
  comm.reset();  // outside the lock: a Comm's teardown joins its threads
}

World& current_world() {
  std::lock_guard<std::mutex> lock(g_world_mutex);
  COHORT_CHECK_KIND(kInvalidArgument, g_world, "cohort::init() has not been called in this process");
  return *g_world;
}

}  // namespace cohort

namespace cohort {

bool is_initialized() {
  std::lock_guard<std::mutex> lock(g_world_mutex);
  return g_world.has_value();
}

}  // namespace cohort
