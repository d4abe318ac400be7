// cohort's rendezvous store server, hosted by rank 0 in place of c10d's TCPStore (which listens on
// every interface and trusts whoever connects). One thread polls every connection; each connection
// must prove the job's secret (core/job_secret.h) before its first request, frames are bounded
// before anything is allocated (store_wire.h), and a peer that stays silent or stops mid-frame is
// cut off after a short deadline. Nothing here ever waits for a peer: stopping is immediate.
#pragma once

#include <chrono>
#include <memory>
#include <string>

namespace cohort::detail {

struct StoreServerOptions {
  std::string bind_address;  // numeric; "" listens on every interface (COHORT_STORE_BIND=any only)
  int port = 0;              // 0: any free port
  std::string secret;        // the job's (job_secret.h)
  std::string run_id;        // named in the hello, so a rank of another job can say whose store this is
  /// From accepting a connection to its proof of the secret.
  std::chrono::milliseconds auth_deadline{5000};
  /// From a frame's first byte to its last, once authenticated.
  std::chrono::milliseconds frame_deadline{30000};
  /// Connections that have not proved the secret yet; more are refused at once.
  int max_unproven = 64;
  /// The least time between two log lines about refused connections once a few were logged in full:
  /// the next ones are counted and summed up in one line per interval (core/refusal_log.h).
  std::chrono::milliseconds refusal_log_interval{10000};
};

class StoreServer {
 public:
  /// Listens and starts serving; throws cohort::Error naming the address, port and why (a port in
  /// use says "Address already in use").
  explicit StoreServer(const StoreServerOptions& options);
  /// Closes every connection and the listener without waiting for any peer.
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const;
  /// "ADDRESS:PORT" as bound, for messages.
  std::string where() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace cohort::detail
