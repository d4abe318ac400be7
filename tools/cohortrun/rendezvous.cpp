// The rendezvous (protocol in rendezvous.h): a local one for single-node jobs, which needs no store,
// and one on cohort's store (world/store_server.h: bound to the endpoint's address, every connection
// proving the agents' secret) for several nodes. Both hand the workers the job's secret. All waiting is polling with a short sleep so a termination
// signal interrupts it, and every store error becomes one RendezvousError line.
#include "cohortrun/rendezvous.h"

#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "cohortrun/signals.h"
#include "core/job_secret.h"
#include "world/net.h"
#include "world/rendezvous.h"
#include "world/store_client.h"
#include "world/store_server.h"
#include "world/worker_env.h"

namespace cohort::detail::launch {
namespace {

using Clock = std::chrono::steady_clock;

// Where node 0 publishes its job's run id and its workers' secret (outside every cohortrun/<rdzv-id>/ prefix).
constexpr const char* kJobKey = "cohortrun-job";
constexpr const char* kSecretKey = "cohortrun-worker-secret";

// The workers' secret (core/job_secret.h): the user's COHORT_JOB_SECRET, else a fresh random one.
std::string workers_secret() {
  const char* given = std::getenv("COHORT_JOB_SECRET");
  return given != nullptr && *given != '\0' ? given : new_job_secret();
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string seconds_text(double seconds) {
  std::string text = std::to_string(seconds);
  text.erase(text.find_last_not_of('0') + 1);
  if (!text.empty() && text.back() == '.') text.pop_back();
  return text + "s";
}

// Sleeps a little; throws Interrupted when a termination signal arrived.
void pause_or_interrupt() {
  if (termination_signal() != 0) throw Interrupted(termination_signal());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (termination_signal() != 0) throw Interrupted(termination_signal());
}

class LocalRendezvous : public Rendezvous {
 public:
  explicit LocalRendezvous(const LaunchOptions& options) : options_(options), secret_(workers_secret()) {}

  RoundInfo join(int) override {
    RoundInfo info;
    info.world_size = options_.nproc;
    if (options_.rdzv_backend == "static") {  // torchrun: workers use MASTER_ADDR:MASTER_PORT
      info.master_addr = options_.master_addr;
      info.master_port = options_.master_port;
    } else {  // c10d or --standalone: a free port, fresh each round
      info.master_addr = "127.0.0.1";
      info.master_port = pick_free_port();
    }
    info.run_id = options_.run_id;
    info.secret = secret_;
    return info;
  }
  std::optional<Outcome> outcome(int) override { return std::nullopt; }
  Outcome publish(int, const Outcome& mine) override { return mine; }
  void report_done(int) override {}
  bool all_done(int) override { return true; }
  void leave(int) override {}
  std::string where() const override { return "this node"; }

 private:
  const LaunchOptions& options_;
  std::string secret_;
};

class StoreRendezvous : public Rendezvous {
 public:
  explicit StoreRendezvous(const LaunchOptions& options) : options_(options) {
    prefix_ = "cohortrun/" + options.rdzv_id + "/";
    const bool try_host = options.rdzv_backend == "static" ? options.node_rank == 0
                                                           : is_local_host(options.endpoint.host);
    if (try_host) host_store();
    if (!store_) connect_store();
    agree_on_job();
  }

  RoundInfo join(int round) override {
    const std::string rp = round_prefix(round);
    RoundInfo info;
    int arrival = 0;
    if (is_host_) {
      if (options_.rdzv_backend == "static") guarded([&] { return store_->add(rp + "rank/0", 1); });
      info.node_count = host_close_round(rp);
    } else {
      if (options_.rdzv_backend == "static") {
        const auto claims = guarded([&] {
          return store_->add(rp + "rank/" + std::to_string(options_.node_rank), 1);
        });
        if (claims > 1) {
          throw RendezvousError("two nodes joined " + where() + " with --node-rank=" +
                                std::to_string(options_.node_rank));
        }
        guarded([&] { return store_->add(rp + "joined", 1); });
        arrival = options_.node_rank;
      } else {
        arrival = static_cast<int>(guarded([&] { return store_->add(rp + "joined", 1); }));
        if (arrival >= options_.nnodes.max) {
          throw RendezvousError("more nodes than --nnodes=" + std::to_string(options_.nnodes.max) +
                                " joined " + where());
        }
      }
      info.node_count = wait_for_close(rp);
      if (!is_member(arrival, info.node_count)) {
        throw RendezvousError("this node came after " + where() + " closed with " +
                              std::to_string(info.node_count) +
                              (info.node_count == 1 ? " node" : " nodes") +
                              " (joining a running job is not supported; restart the job)");
      }
    }
    info.node_rank = arrival;
    info.run_id = run_id_;
    info.secret = worker_secret_;
    node_count_ = info.node_count;
    place_workers(rp, &info);
    return info;
  }

  std::optional<Outcome> outcome(int round) override {
    const std::string key = round_prefix(round) + "outcome";
    return guarded([&]() -> std::optional<Outcome> {
      if (!store_->check({key})) return std::nullopt;
      return decode_outcome(text(store_->get(key)));
    });
  }

  Outcome publish(int round, const Outcome& mine) override {
    const std::string key = round_prefix(round) + "outcome";
    return guarded([&] {
      return decode_outcome(text(store_->compareSet(key, {}, bytes(encode_outcome(mine)))));
    });
  }

  void report_done(int round) override {
    guarded([&] { return store_->add(round_prefix(round) + "done", 1); });
  }

  bool all_done(int round) override {
    return guarded([&] { return store_->add(round_prefix(round) + "done", 0); }) >= node_count_;
  }

  void leave(int round) override {
    const std::string key = round_prefix(round) + "left";
    try {
      if (!is_host_) {
        store_->add(key, 1);
        return;
      }
      const double limit = 10 + 2 * options_.monitor_interval + options_.stop_timeout;
      const auto start = Clock::now();
      while (store_->add(key, 0) < node_count_ - 1 && seconds_since(start) < limit) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        if (termination_count() > 1) return;
      }
    } catch (const std::exception&) {  // leaving: nothing left to tell anyone
    }
  }

  std::string where() const override {
    return "rendezvous '" + options_.rdzv_id + "' at " + options_.endpoint.str();
  }

 private:
  std::string round_prefix(int round) const { return prefix_ + std::to_string(round) + "/"; }

  static std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
  static std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

  template <typename F>
  auto guarded(F&& call) -> decltype(call()) {
    try {
      return call();
    } catch (const RendezvousError&) {
      throw;
    } catch (const Interrupted&) {
      throw;
    } catch (const std::exception& e) {
      std::string why = e.what();
      why = why.substr(0, why.find('\n'));
      throw RendezvousError("lost contact with " + where() + " (" + why +
                            "); the node hosting it may have exited");
    }
  }

  // The agents' own secret: the user's COHORT_JOB_SECRET (the same on every node), else derived from
  // the rendezvous id (weak: anyone who knows the id can compute it; docs/security.md).
  JobSecret agents_secret() const {
    return job_secret(process_env(), "cohortrun:" + options_.rdzv_id, options_.endpoint.port);
  }

  void host_store() {
    const bool taken = can_connect(options_.endpoint.host, options_.endpoint.port, 300);
    if (taken && options_.rdzv_backend == "static") {
      throw RendezvousError("cannot host " + where() + ": port " +
                            std::to_string(options_.endpoint.port) +
                            " is in use on this machine (another job? choose another --master-port)");
    }
    if (taken) return;  // c10d: another launcher on this machine hosts it; join as a client
    const JobSecret secret = agents_secret();
    StoreServerOptions server;
    server.bind_address = store_bind_address(options_.endpoint.host, options_.endpoint.port);
    server.port = options_.endpoint.port;
    server.secret = secret.value;
    server.run_id = options_.run_id;
    try {
      auto hosted = std::make_shared<StoreServer>(server);
      const std::string host = server.bind_address.empty() ? options_.endpoint.host : server.bind_address;
      store_ = c10::make_intrusive<CohortStore>(
          StoreClientOptions{host, hosted->port(), secret.value, secret.source, std::chrono::seconds(60)}, hosted);
      is_host_ = true;
    } catch (const std::exception& e) {
      const std::string why = e.what();
      const bool in_use = why.find("in use") != std::string::npos;
      if (options_.rdzv_backend == "static" || !in_use) {
        throw RendezvousError("cannot host " + where() + ": " + why.substr(0, why.find('\n')));
      }
      // c10d: another launcher on this machine hosts it already; join as a client
    }
  }

  void connect_store() {
    const auto start = Clock::now();
    while (!can_connect(options_.endpoint.host, options_.endpoint.port, 500)) {
      if (seconds_since(start) >= options_.join_timeout) {
        throw RendezvousError("timed out after " + seconds_text(options_.join_timeout) +
                              " waiting for " + where() +
                              ": the node that hosts it never came (0 of " +
                              std::to_string(options_.nnodes.min) + " nodes seen)");
      }
      pause_or_interrupt();
      std::this_thread::sleep_for(std::chrono::milliseconds(80));
    }
    // Whose store it is, from its greeting: another job's is named before our proof fails there.
    const StoreHello hello = read_store_hello(options_.endpoint.host, options_.endpoint.port, std::chrono::seconds(5));
    if (hello.run_id && options_.rdzv_id != "none" && *hello.run_id != options_.rdzv_id) refuse_job(*hello.run_id);
    try {
      const JobSecret secret = agents_secret();
      store_ = c10::make_intrusive<CohortStore>(StoreClientOptions{options_.endpoint.host, options_.endpoint.port,
                                                                   secret.value, secret.source, std::chrono::seconds(60)});
    } catch (const std::exception& e) {
      const std::string why = e.what();
      throw RendezvousError("cannot connect to " + where() + ": " + why.substr(0, why.find('\n')));
    }
  }

  [[noreturn]] void refuse_job(const std::string& theirs) const {
    throw RendezvousError("the store at " + options_.endpoint.str() + " belongs to job '" + theirs +
                          "', not to this node's job '" + options_.rdzv_id +
                          "' (--rdzv-id): two jobs share one rendezvous endpoint; give each its own");
  }

  // Node 0 says whose rendezvous this is; the others check it is their job's before joining a round.
  void agree_on_job() {
    if (is_host_) {
      run_id_ = options_.run_id;
      worker_secret_ = workers_secret();
      guarded([&] {
        store_->set(kSecretKey, bytes(worker_secret_));
        store_->set(kJobKey, bytes(run_id_));
        return 0;
      });
      return;
    }
    const auto start = Clock::now();
    while (!guarded([&] { return store_->check({kJobKey}); })) {
      if (seconds_since(start) >= options_.join_timeout) {
        throw RendezvousError("timed out after " + seconds_text(options_.join_timeout) + " waiting for " +
                              where() + " to say which job it belongs to");
      }
      pause_or_interrupt();
    }
    run_id_ = guarded([&] { return text(store_->get(kJobKey)); });
    worker_secret_ = guarded([&] { return text(store_->get(kSecretKey)); });
    if (options_.rdzv_id != "none" && run_id_ != options_.rdzv_id) refuse_job(run_id_);
  }

  // Node 0: waits for the others and closes the round; returns the node count.
  int host_close_round(const std::string& rp) {
    const auto start = Clock::now();
    std::optional<Clock::time_point> min_since;
    for (;;) {
      const int arrived = 1 + static_cast<int>(guarded([&] { return store_->add(rp + "joined", 0); }));
      if (arrived >= options_.nnodes.min && !min_since) min_since = Clock::now();
      const bool last_call_over =
          min_since && seconds_since(*min_since) >= options_.last_call_timeout;
      if (const int count = close_count(arrived, options_.nnodes, last_call_over)) {
        const std::string master = options_.endpoint.host + " " + std::to_string(pick_free_port());
        guarded([&] {
          store_->set(rp + "master", bytes(master));
          store_->set(rp + "closed", bytes(std::to_string(count)));
          return 0;
        });
        return count;
      }
      if (seconds_since(start) >= options_.join_timeout) {
        const std::string message =
            "timed out after " + seconds_text(options_.join_timeout) + " waiting for nodes: " +
            std::to_string(arrived) + " of " + std::to_string(options_.nnodes.min) +
            " nodes arrived at " + where();
        try {
          store_->set(rp + "closed", bytes("error:" + message));
        } catch (const std::exception&) {
        }
        throw RendezvousError(message);
      }
      pause_or_interrupt();
    }
  }

  // Other nodes: waits for node 0 to close the round; returns the node count.
  int wait_for_close(const std::string& rp) {
    const auto start = Clock::now();
    const double limit = options_.join_timeout + 10;  // node 0 times out first and says why
    while (!guarded([&] { return store_->check({rp + "closed"}); })) {
      if (seconds_since(start) >= limit) {
        const int arrived = 1 + static_cast<int>(guarded([&] { return store_->add(rp + "joined", 0); }));
        throw RendezvousError("timed out after " + seconds_text(limit) + " waiting for nodes: " +
                              std::to_string(arrived) + " of " +
                              std::to_string(options_.nnodes.min) + " nodes arrived at " + where());
      }
      pause_or_interrupt();
    }
    const std::string closed = guarded([&] { return text(store_->get(rp + "closed")); });
    if (closed.rfind("error:", 0) == 0) throw RendezvousError(closed.substr(6));
    return std::stoi(closed);
  }

  // Exchanges worker counts and reads the workers' master address.
  void place_workers(const std::string& rp, RoundInfo* info) {
    guarded([&] {
      store_->set(rp + "nproc/" + std::to_string(info->node_rank),
                  bytes(std::to_string(options_.nproc)));
      return 0;
    });
    std::vector<std::string> keys;
    for (int node = 0; node < info->node_count; ++node) {
      keys.push_back(rp + "nproc/" + std::to_string(node));
    }
    const auto start = Clock::now();
    while (!guarded([&] { return store_->check(keys); })) {
      if (seconds_since(start) >= options_.join_timeout) {
        throw RendezvousError("timed out waiting for the nodes of " + where() +
                              " to report their worker counts");
      }
      pause_or_interrupt();
    }
    std::vector<int> sizes;
    for (const auto& key : keys) {
      sizes.push_back(std::stoi(guarded([&] { return text(store_->get(key)); })));
    }
    const RankSpan span = assign_worker_ranks(sizes, info->node_rank);
    info->rank_base = span.base;
    info->world_size = span.world_size;
    const std::string master = guarded([&] { return text(store_->get(rp + "master")); });
    const auto space = master.rfind(' ');
    info->master_addr = master.substr(0, space);
    info->master_port = std::stoi(master.substr(space + 1));
  }

  const LaunchOptions& options_;
  std::string run_id_;  // the job's, as node 0 published it
  std::string worker_secret_;  // the workers' COHORT_JOB_SECRET, as node 0 published it
  std::string prefix_;
  c10::intrusive_ptr<CohortStore> store_;
  bool is_host_ = false;
  int node_count_ = 1;
};

}  // namespace

std::unique_ptr<Rendezvous> make_rendezvous(const LaunchOptions& options) {
  // An unknown host is named at once, not after the join timeout (or by every worker in turn).
  const bool static_local = options.nnodes.max <= 1 && options.rdzv_backend == "static";
  const std::string flag = options.rdzv_endpoint.empty() ? "--master-addr" : "--rdzv-endpoint";
  const std::string host = static_local ? options.master_addr : options.endpoint.host;
  if (!host.empty()) {
    const std::string why = resolve_error(host);
    if (!why.empty()) {
      throw RendezvousError(flag + " " + (flag == "--master-addr" ? options.master_addr : options.rdzv_endpoint) +
                            ": cannot resolve host " + host + " (" + why + ")");
    }
  }
  if (options.nnodes.max <= 1) return std::make_unique<LocalRendezvous>(options);
  return std::make_unique<StoreRendezvous>(options);
}

}  // namespace cohort::detail::launch
