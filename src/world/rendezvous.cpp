// The rendezvous store with errors that say where and who (see rendezvous.h).
#include "world/rendezvous.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "cohort/error.h"
#include "comm/control_plane.h"
#include "core/check.h"
#include "core/job_secret.h"
#include "core/log.h"
#include "core/socket.h"
#include "world/arrival_check.h"
#include "world/job_identity.h"
#include "world/store_client.h"
#include "world/store_server.h"

namespace cohort::detail {
namespace {

// How long a rank 0 that finds its port taken waits to learn whose store holds it.
constexpr std::chrono::milliseconds kProbeTimeout{2000};

std::string endpoint_of(const RendezvousConfig& config) {
  return config.master_addr + ":" + std::to_string(config.master_port);
}

// MASTER_ADDR must resolve: c10d would retry an unknown name until the timeout, logging each try.
void check_resolves(const RendezvousConfig& config) {
  const std::string why = net::resolve_error(config.master_addr);
  COHORT_CHECK_KIND(kInvalidArgument, why.empty(), "MASTER_ADDR=", config.master_addr, " does not resolve (", why,
                    "): rank ", config.rank, " cannot find the rendezvous; export rank 0's host name or address");
}

bool master_accepts(const RendezvousConfig& config) {
  return net::can_connect({config.master_addr, config.master_port}, std::chrono::milliseconds(1000));
}

[[noreturn]] void throw_port_in_use(const RendezvousConfig& config) {
  const auto holder = job_listening_at(config.master_addr, config.master_port, kProbeTimeout);
  // Two jobs without run ids: "by a job without a run id (this is a job without a run id)" did not read.
  const std::string by = !holder ? ""
                         : *holder == config.run_id
                             ? " by another " + job_label(*holder).substr(2)
                             : " by " + job_label(*holder) + " (this is " + job_label(config.run_id) + ")";
  const std::string message = "MASTER_PORT=" + std::to_string(config.master_port) + " is already in use on rank 0 (" +
                              config.master_addr + ")" + by +
                              ": choose another port, or launch with cohortrun --standalone which picks a free one";
  // Its holder ended while we asked (another job's rank 0 that finished): the port may be ours now.
  if (!holder && !master_accepts(config)) throw JobUnanswered(message);
  throw Error(message, ErrorKind::kInvalidArgument);
}

[[noreturn]] void throw_unreachable(const RendezvousConfig& config, const std::string& why) {
  throw Error("cannot reach the master at " + endpoint_of(config) + " within " +
                  std::to_string(config.timeout.count()) +
                  " ms (rank 0 hosts the rendezvous store there): is rank 0 "
                  "running, and is MASTER_ADDR=" +
                  config.master_addr + " reachable from this host? (" + why + ")",
              ErrorKind::kTimeout, {0});
}

// Until something listens at MASTER_ADDR:MASTER_PORT (probing quietly: c10d's retries log a line each).
void wait_for_listener(const RendezvousConfig& config, std::chrono::steady_clock::time_point deadline) {
  while (!master_accepts(config)) {
    if (std::chrono::steady_clock::now() > deadline) throw_unreachable(config, "nothing accepted a connection");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// A c10d TCPStore client of torchrun's agent store (the one store cohort does not host).
c10::intrusive_ptr<c10d::Store> open_agent_store(const RendezvousConfig& config, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = uint16_t(config.master_port);
  options.isServer = false;
  options.numWorkers = c10::nullopt;
  options.waitWorkers = false;
  options.timeout = timeout;
  try {
    return c10::make_intrusive<c10d::TCPStore>(config.master_addr, options);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    throw_unreachable(config, what.substr(0, what.find('\n')));
  }
}

// The store itself: rank 0 hosts it, the others connect once something listens there, all by
// `deadline` (the rendezvous's, so a reconnection does not start COHORT_TIMEOUT over).
c10::intrusive_ptr<c10d::Store> open_store(const RendezvousConfig& config,
                                           std::chrono::steady_clock::time_point deadline) {
  const auto timeout = std::max(std::chrono::milliseconds(100), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                    deadline - std::chrono::steady_clock::now()));
  const bool hosts = config.rank == 0 && config.rank0_hosts;
  if (!hosts) wait_for_listener(config, deadline);
  if (!config.rank0_hosts) return open_agent_store(config, timeout);
  const JobSecret secret = config.secret.empty() ? job_secret({}, config.run_id, config.master_port)
                                                 : JobSecret{config.secret, config.secret_source};
  StoreClientOptions client{config.master_addr, config.master_port, secret.value, secret.source, timeout};
  std::shared_ptr<StoreServer> server;
  if (hosts) {
    if (net::port_in_use(config.master_port)) throw_port_in_use(config);
    StoreServerOptions options;
    options.bind_address = store_bind_address(config.master_addr, config.master_port);
    options.port = config.master_port;
    options.secret = secret.value;
    options.run_id = config.run_id;
    try {
      server = std::make_shared<StoreServer>(options);
    } catch (const Error& e) {
      if (std::string(e.what()).find("in use") != std::string::npos) throw_port_in_use(config);
      throw;
    }
    if (!options.bind_address.empty()) client.host = options.bind_address;
    COHORT_DEBUG("rendezvous store listening at ", server->where(), " (secret from ", secret.source, ")");
  }
  try {
    return c10::make_intrusive<CohortStore>(client, server);
  } catch (const Error& e) {
    if (hosts) throw;
    const std::string what = e.what();
    // Another job's store would not prove our secret: say whose it is when it says so.
    if (what.find("did not prove") != std::string::npos || what.find("refused this rank") != std::string::npos) throw;
    throw_unreachable(config, what);
  }
}

}  // namespace

c10::intrusive_ptr<c10d::Store> connect_store(const RendezvousConfig& config) {
  // Before anything else is written: a rank of another job must not announce itself here.
  JobCheck job{config.run_id, JobCheck::Role::kCompare, config.master_addr, config.master_port, config.timeout};
  if (!config.rank0_hosts) job.role = JobCheck::Role::kFirstPublishes;
  else if (config.rank == 0) job.role = JobCheck::Role::kPublish;
  check_resolves(config);
  const auto deadline = std::chrono::steady_clock::now() + config.timeout;
  for (;;) {
    try {
      // Whose store it is, asked before c10d's client connects to it (store_probe.h says why).
      if (job.role == JobCheck::Role::kCompare) {
        wait_for_listener(config, deadline);
        check_listening_job(job);
      }
      auto store = open_store(config, deadline);
      if (job.role != JobCheck::Role::kCompare) check_same_job(*store, job);
      store->setTimeout(config.timeout);  // every later wait on the store gets the whole COHORT_TIMEOUT
      return store;
    } catch (const JobUnanswered&) {
      // The store went away before it said whose it was, or nothing listens yet: another job's rank 0
      // that has ended (this job's own rank 0 may hold the port by now), or ours not started. Ask
      // again until the deadline.
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                              std::chrono::steady_clock::now());
      if (left < std::chrono::milliseconds(100)) throw;
      job.timeout = left;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

// Hostile pass 7: WORLD_SIZE=100000 made a rendezvous timeout's line of 689 KB.
std::string rank_runs(const std::vector<bool>& arrived, bool which) {
  std::string out;
  int runs = 0, left = 0;
  for (int r = 0; r < int(arrived.size());) {
    if (arrived[r] != which) {
      ++r;
      continue;
    }
    int end = r;
    while (end + 1 < int(arrived.size()) && arrived[end + 1] == which) ++end;
    if (++runs <= 20) out += (out.empty() ? "" : ", ") + std::to_string(r) + (end > r ? "-" + std::to_string(end) : "");
    else left += end - r + 1;
    r = end + 1;
  }
  return left > 0 ? out + " and " + std::to_string(left) + " more" : out;
}

namespace {

std::vector<int> missing_ranks(const std::vector<bool>& arrived) {
  std::vector<int> missing;
  for (int r = 0; r < int(arrived.size()); ++r)
    if (!arrived[r]) missing.push_back(r);
  return missing;
}

// "1 of 2 ranks arrived (ranks 0); missing: ranks 1".
std::string arrival_text(const std::vector<bool>& arrived, int count) {
  return std::to_string(count) + " of " + std::to_string(arrived.size()) + " ranks arrived (ranks " +
         rank_runs(arrived, true) + "); missing: ranks " + rank_runs(arrived, false);
}

}  // namespace

void wait_for_all_ranks(c10d::Store& store, const RendezvousConfig& config) {
  store.set("cohort/arrived/" + std::to_string(config.rank), std::vector<uint8_t>{1});
  const auto deadline = std::chrono::steady_clock::now() + config.timeout;
  std::vector<bool> arrived(config.size, false);
  int count = 0;
  for (;;) {
    for (int r = 0; r < config.size; ++r) {
      if (arrived[r]) continue;
      if (store.check({"cohort/arrived/" + std::to_string(r)})) {
        arrived[r] = true;
        ++count;
      }
    }
    if (count == config.size) return;
    // A launcher in this process may know that a missing rank's process has ended.
    if (const std::string gone = arrival_failure(); !gone.empty()) {
      throw Error("rendezvous at " + config.master_addr + ":" + std::to_string(config.master_port) + ": " + gone +
                      " (" + arrival_text(arrived, count) + ")",
                  ErrorKind::kPeerDied, missing_ranks(arrived));
    }
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(count + 1 == config.size ? 5 : 50));
  }
  throw Error("rendezvous at " + config.master_addr + ":" + std::to_string(config.master_port) + " timed out after " +
                  std::to_string(config.timeout.count()) + " ms: " + arrival_text(arrived, count),
              ErrorKind::kTimeout, missing_ranks(arrived));
}

std::string store_bind_address(const std::string& master_addr, int master_port) {
  const char* setting = std::getenv("COHORT_STORE_BIND");
  const std::string bind = setting == nullptr ? "" : setting;
  if (bind == "any") return "";
  if (!bind.empty() && bind != "auto") return bind;
  std::string unresolved;  // then local_address_towards names it
  for (const std::string& address : net::addresses_of(master_addr, unresolved))
    if (net::is_local_host(address)) return address;
  return local_address_towards(master_addr, master_port);
}

std::string local_address_towards(const std::string& master_addr, int master_port) {
  const auto address = net::local_address_towards({master_addr, master_port});
  COHORT_CHECK_KIND(kInvalidArgument, address.has_value(), "MASTER_ADDR=", master_addr,
                    " does not resolve to an IPv4 address");
  return *address;
}

}  // namespace cohort::detail
