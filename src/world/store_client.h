// cohort's rendezvous store client: a c10d::Store (what Gloo's process group and cohort's comm
// layer use) speaking store_wire.h to a StoreServer. It proves the job's secret on connecting and
// checks the server's proof in turn, so neither a stranger's client nor a stranger's server that
// took the port is believed. Rank 0's store also owns the server (as c10d's TCPStore does).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "compat/c10d_compat.h"
#include "core/socket.h"
#include "world/store_server.h"
#include "world/store_wire.h"

namespace cohort::detail {

struct StoreClientOptions {
  std::string host;
  int port = 0;
  std::string secret;
  std::string secret_source;  // where the secret came from (job_secret.h), for a refusal's message
  /// Connecting (while nothing listens yet) and every request, as c10d's store timeout.
  std::chrono::milliseconds timeout{300000};
};

/// What a store's greeting says before any proof: the job it belongs to, or why there is none (not a
/// cohort store, gone, silent). Never throws; gives up after `timeout`.
struct StoreHello {
  std::optional<std::string> run_id;
  std::string failure;
};
StoreHello read_store_hello(const std::string& host, int port, std::chrono::milliseconds timeout);

class CohortStore : public StoreBase {
 public:
  /// Connects and proves the secret within options.timeout; throws cohort::Error naming the store's
  /// address and why. `server`: rank 0's, kept alive as long as this store or a clone of it is.
  explicit CohortStore(const StoreClientOptions& options, std::shared_ptr<StoreServer> server = nullptr);
  ~CohortStore() override;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
  c10::intrusive_ptr<c10d::Store> clone_store() override;

  /// "HOST:PORT" of the store, for messages.
  std::string where() const;

 private:
  /// Sends `request` and returns the reply (kOk or kTimedOut); throws on anything else. `wait`: how
  /// long the server may hold the request before answering.
  store_wire::Message call(const store_wire::Message& request, const std::string& what,
                           std::chrono::milliseconds wait = std::chrono::milliseconds(0));

  StoreClientOptions options_;
  std::shared_ptr<StoreServer> server_;
  net::Fd fd_;
  std::mutex mutex_;  // one request at a time on the connection, as c10d's TCPStore client
};

}  // namespace cohort::detail
