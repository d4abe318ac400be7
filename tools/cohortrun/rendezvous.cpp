// The rendezvous (protocol in rendezvous.h) on cohort's store (world/store_server.h: bound to the endpoint's address,
// every connection proving the agents' secret) for several nodes (a single-node job's needs no store:
// local_rendezvous.h). It hands the workers the job's secret. All waiting
// is polling with a short sleep so a termination signal interrupts it; a store error is one line.
#include "cohortrun/rendezvous.h"

#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "cohortrun/local_rendezvous.h"
#include "cohortrun/signals.h"
#include "core/job_secret.h"
#include "core/socket.h"
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
constexpr const char* kLaunchKey = "cohortrun-launch";

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::string seconds_text(double seconds) {
  std::string text = std::to_string(seconds);
  text.erase(text.find_last_not_of('0') + 1);
  if (!text.empty() && text.back() == '.') text.pop_back();
  return text + "s";
}

// --nnodes as given: N or MIN:MAX.
std::string range_text(const NodeRange& range) {
  if (range.min == range.max) return std::to_string(range.max);
  return std::to_string(range.min) + ":" + std::to_string(range.max);
}

// Sleeps a little; throws Interrupted when a termination signal arrived.
void pause_or_interrupt() {
  if (termination_signal() != 0) throw Interrupted(termination_signal());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (termination_signal() != 0) throw Interrupted(termination_signal());
}

class StoreRendezvous : public Rendezvous {
 public:
  explicit StoreRendezvous(const LaunchOptions& options) : options_(options) {
    prefix_ = "cohortrun/" + options.rdzv_id + "/";
    const bool try_host = options.rdzv_backend == "static" ? options.node_rank == 0
                                                           : net::is_local_host(options.endpoint.host);
    if (try_host) host_store();
    if (!store_) connect_store();
    agree_on_job();
  }

  RoundInfo join(int round, int failure_restarts) override {
    RoundInfo info;
    int arrival = 0;
    if (is_host_) {
      const std::string rp = round_prefix(round);
      if (options_.rdzv_backend == "static") guarded([&] { return store_->add(rp + "rank/0", 1); });
      write(rp + "restarts", std::to_string(failure_restarts));
      info.node_count = host_close_round(rp, round);
      info.failure_restarts = failure_restarts;
    } else {
      for (round = first_round_to_join(round);; ++round) {
        arrival = arrive(round);
        info.node_count = wait_for_close(round_prefix(round));
        if (is_member(arrival, info.node_count)) break;
        // Closed just before this node arrived: wait for the next round, which a job at its largest
        // has only when this one ends for a restart.
        if (info.node_count >= options_.nnodes.max) wait_for_a_new_round(round, info.node_count);
      }
      info.failure_restarts = std::stoi(read(round_prefix(round) + "restarts"));
    }
    info.round = round;
    info.node_rank = arrival;
    info.run_id = run_id_;
    info.secret = worker_secret_;
    info.launch_id = launch_id_;
    node_count_ = info.node_count;
    place_workers(round_prefix(round), &info);
    return info;
  }

  RoundCounts counts(int round) override {  // nodes waiting for the next round; nodes done with this one
    return {counter(round_prefix(round + 1) + "joined"), counter(round_prefix(round) + "done")};
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
    return guarded([&] { return decode_outcome(text(store_->compareSet(key, {}, bytes(encode_outcome(mine))))); });
  }

  void report_done(int round) override {
    guarded([&] { return store_->add(round_prefix(round) + "done", 1); });
  }

  bool all_done(int round) override { return counter(round_prefix(round) + "done") >= node_count_; }

  void leave(int round, const std::string& how) override {
    const std::string key = round_prefix(round) + "left";
    try {
      if (!is_host_) {
        store_->add(key, 1);
        return;
      }
      store_->set(prefix_ + "over", bytes(how));  // nodes waiting for the next round end too
      const double limit = 10 + 2 * options_.monitor_interval + options_.stop_timeout;
      const auto start = Clock::now();
      const auto everyone_read = [&] {
        return store_->add(key, 0) >= node_count_ - 1 &&
               store_->add(prefix_ + "over-seen", 0) >= store_->add(round_prefix(round + 1) + "joined", 0);
      };
      while (!everyone_read() && seconds_since(start) < limit) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        if (termination_count() > 1) return;
      }
    } catch (const std::exception&) {  // leaving: nothing left to tell anyone
    }
  }

  // Without --rdzv-id the job's id is node 0's fresh one, not "none" (flags.cpp, resolve_options).
  std::string where() const override {
    const std::string job = options_.rdzv_id != "none" ? "'" + options_.rdzv_id + "'" : "(no --rdzv-id)";
    return "rendezvous " + job + " at " + options_.endpoint.str();
  }

 private:
  std::string round_prefix(int round) const { return prefix_ + std::to_string(round) + "/"; }

  static std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
  static std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

  std::string read(const std::string& key) {
    return guarded([&] { return text(store_->get(key)); });
  }
  bool has(const std::string& key) {
    return guarded([&] { return store_->check({key}); });
  }
  void write(const std::string& key, const std::string& value) {
    guarded([&] {
      store_->set(key, bytes(value));
      return 0;
    });
  }
  int counter(const std::string& key) {
    return static_cast<int>(guarded([&] { return store_->add(key, 0); }));
  }

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
      throw RendezvousError("lost contact with " + where() + " (" + why + "); the node hosting it may have exited");
    }
  }

  // The agents' own secret: the user's COHORT_JOB_SECRET (the same on every node), else derived from
  // the rendezvous id (weak: anyone who knows the id can compute it; docs/security.md).
  JobSecret agents_secret() const {
    return job_secret(process_env(), "cohortrun:" + options_.rdzv_id, options_.endpoint.port);
  }

  void host_store() {
    const bool taken = net::can_connect({options_.endpoint.host, options_.endpoint.port},
                                        std::chrono::milliseconds(300));
    if (taken && options_.rdzv_backend == "static") {
      throw RendezvousError("cannot host " + where() + ": port " + std::to_string(options_.endpoint.port) +
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
    while (!net::can_connect({options_.endpoint.host, options_.endpoint.port}, std::chrono::milliseconds(500))) {
      if (seconds_since(start) >= options_.join_timeout) {
        throw RendezvousError("timed out after " + seconds_text(options_.join_timeout) + " waiting for " + where() +
                              ": the node that hosts it never came (0 of " + std::to_string(options_.nnodes.min) +
                              " nodes seen)");
      }
      pause_or_interrupt();
      std::this_thread::sleep_for(std::chrono::milliseconds(80));
    }
    // Whose store it is, from its greeting: another job's is named before our proof fails there.
    const StoreHello hello = read_store_hello(options_.endpoint.host, options_.endpoint.port, std::chrono::seconds(5));
    if (hello.run_id && options_.rdzv_id != "none" && *hello.run_id != options_.rdzv_id) refuse_job(*hello.run_id);
    try {
      const JobSecret secret = agents_secret();
      store_ = c10::make_intrusive<CohortStore>(StoreClientOptions{
          options_.endpoint.host, options_.endpoint.port, secret.value, secret.source, std::chrono::seconds(60)});
    } catch (const std::exception& e) {
      const std::string why = e.what();
      throw RendezvousError("cannot connect to " + where() + ": " + why.substr(0, why.find('\n')));
    }
  }

  // A node joins the round it is asked for, or, when node 0 closed that one (or a later one) already,
  // the round after the running one, where it waits until the running nodes restart to take it in.
  int first_round_to_join(int round) {
    if (!has(prefix_ + "round")) return round;
    const int running = std::stoi(read(prefix_ + "round"));
    if (running < round) return round;
    const int closed_with = std::stoi(read(round_prefix(running) + "closed"));
    if (closed_with >= options_.nnodes.max) wait_for_a_new_round(running, closed_with);
    return running + 1;
  }

  // A job at its largest takes a node into the round after `running` only when `running` ends for a
  // new round (a restart after a lost node, a rescale): a node coming back after its host died takes
  // the lost one's place, even when it comes before the survivors saw the loss. A job that ends, a
  // round that fails, or join_timeout passing refuses it.
  void wait_for_a_new_round(int running, int closed_with) {
    const auto start = Clock::now();
    for (bool over = false; !over;) {
      std::optional<Outcome> ended;
      try {
        ended = outcome(running);
        over = ended.has_value() || has(prefix_ + "over");
      } catch (const RendezvousError&) {
        over = true;  // node 0 left with the store: the job ended while this node waited
      }
      if (ended && (ended->kind == Outcome::Kind::kRestart || ended->kind == Outcome::Kind::kRescale)) return;
      if (over || seconds_since(start) >= options_.join_timeout) break;
      pause_or_interrupt();
      std::this_thread::sleep_for(std::chrono::milliseconds(80));
    }
    refuse_late(closed_with);
  }

  // Adds this node to round `round`'s arrivals; returns its arrival number (static: its --node-rank).
  int arrive(int round) {
    const std::string rp = round_prefix(round);
    if (options_.rdzv_backend == "static") {
      const std::string claim = rp + "rank/" + std::to_string(options_.node_rank);
      if (guarded([&] { return store_->add(claim, 1); }) > 1) {
        throw RendezvousError("two nodes joined " + where() +
                              " with --node-rank=" + std::to_string(options_.node_rank));
      }
      guarded([&] { return store_->add(rp + "joined", 1); });
      return options_.node_rank;
    }
    const int arrival = static_cast<int>(guarded([&] { return store_->add(rp + "joined", 1); }));
    if (arrival >= options_.nnodes.max) {
      throw RendezvousError("more nodes than --nnodes=" + std::to_string(options_.nnodes.max) + " joined " + where());
    }
    return arrival;
  }

  [[noreturn]] void refuse_late(int count) const {
    throw RendezvousError("this node came after " + where() + " closed with " + std::to_string(count) +
                          (count == 1 ? " node" : " nodes") + ", the most --nnodes=" + range_text(options_.nnodes) +
                          " allows (a job at its largest takes no more nodes; start it with a larger MAX)");
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
      launch_id_ = new_launch_id();
      write(kSecretKey, worker_secret_);
      write(kLaunchKey, launch_id_);
      write(kJobKey, run_id_);
      return;
    }
    const auto start = Clock::now();
    while (!has(kJobKey)) {
      if (seconds_since(start) >= options_.join_timeout) {
        throw RendezvousError("timed out after " + seconds_text(options_.join_timeout) + " waiting for " + where() +
                              " to say which job it belongs to");
      }
      pause_or_interrupt();
    }
    run_id_ = read(kJobKey);
    worker_secret_ = read(kSecretKey);
    launch_id_ = read(kLaunchKey);
    if (options_.rdzv_id != "none" && run_id_ != options_.rdzv_id) refuse_job(run_id_);
  }

  // Node 0: waits for the others and closes the round; returns the node count.
  int host_close_round(const std::string& rp, int round) {
    const auto start = Clock::now();
    std::optional<Clock::time_point> min_since;
    for (;;) {
      const int arrived = 1 + counter(rp + "joined");
      if (arrived >= options_.nnodes.min && !min_since) min_since = Clock::now();
      const bool last_call_over = min_since && seconds_since(*min_since) >= options_.last_call_timeout;
      if (const int count = close_count(arrived, options_.nnodes, last_call_over)) {
        const std::string master = options_.endpoint.host + " " + std::to_string(net::pick_free_port());
        write(rp + "master", master);
        write(rp + "closed", std::to_string(count));
        write(prefix_ + "round", std::to_string(round));  // for nodes that come later
        return count;
      }
      if (seconds_since(start) >= options_.join_timeout) {
        const std::string message = "timed out after " + seconds_text(options_.join_timeout) +
                                    " waiting for nodes: " + std::to_string(arrived) + " of " +
                                    std::to_string(options_.nnodes.min) + " nodes arrived at " + where();
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
    while (!has(rp + "closed")) {
      if (has(prefix_ + "over")) {  // ended while this node waited
        const std::string how = read(prefix_ + "over");
        guarded([&] { return store_->add(prefix_ + "over-seen", 1); });
        throw JobOver(how);
      }
      if (seconds_since(start) >= limit) {
        const int arrived = 1 + counter(rp + "joined");
        throw RendezvousError("timed out after " + seconds_text(limit) +
                              " waiting for nodes: " + std::to_string(arrived) + " of " +
                              std::to_string(options_.nnodes.min) + " nodes arrived at " + where());
      }
      pause_or_interrupt();
    }
    const std::string closed = read(rp + "closed");
    if (closed.rfind("error:", 0) == 0) throw RendezvousError(closed.substr(6));
    return std::stoi(closed);
  }

  // Exchanges worker counts and reads the workers' master address.
  void place_workers(const std::string& rp, RoundInfo* info) {
    write(rp + "nproc/" + std::to_string(info->node_rank), std::to_string(options_.nproc));
    std::vector<std::string> keys;
    for (int node = 0; node < info->node_count; ++node) {
      keys.push_back(rp + "nproc/" + std::to_string(node));
    }
    const auto start = Clock::now();
    while (!guarded([&] { return store_->check(keys); })) {
      if (seconds_since(start) >= options_.join_timeout) {
        throw RendezvousError("timed out waiting for the nodes of " + where() + " to report their worker counts");
      }
      pause_or_interrupt();
    }
    std::vector<int> sizes;
    for (const auto& key : keys) {
      sizes.push_back(std::stoi(read(key)));
    }
    const RankSpan span = assign_worker_ranks(sizes, info->node_rank);
    info->rank_base = span.base;
    info->world_size = span.world_size;
    const std::string master = read(rp + "master");
    const auto space = master.rfind(' ');
    info->master_addr = master.substr(0, space);
    info->master_port = std::stoi(master.substr(space + 1));
  }

  const LaunchOptions& options_;
  std::string run_id_;         // the job's, as node 0 published it
  std::string worker_secret_;  // the workers' COHORT_JOB_SECRET, as node 0 published it
  std::string launch_id_;      // the workers' COHORT_LAUNCH_ID, as node 0 published it
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
    const std::string why = net::resolve_error(host);
    if (!why.empty()) {
      throw RendezvousError(flag + " " + (flag == "--master-addr" ? options.master_addr : options.rdzv_endpoint) +
                            ": cannot resolve host " + host + " (" + why + ")");
    }
  }
  if (options.nnodes.max <= 1) return std::make_unique<LocalRendezvous>(options);
  return std::make_unique<StoreRendezvous>(options);
}

}  // namespace cohort::detail::launch
