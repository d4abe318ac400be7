// TCPStore rendezvous with errors that say where and who (see rendezvous.h).
#include "world/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <thread>

#include "cohort/error.h"
#include "core/log.h"

namespace cohort::detail {

c10::intrusive_ptr<c10d::Store> connect_store(const RendezvousConfig& config) {
  c10d::TCPStoreOptions options;
  options.port = uint16_t(config.master_port);
  options.isServer = config.rank == 0 && config.rank0_hosts;
  options.numWorkers = c10::nullopt;
  options.waitWorkers = false;
  options.timeout = config.timeout;
  const std::string where = config.master_addr + ":" + std::to_string(config.master_port);
  try {
    return c10::make_intrusive<c10d::TCPStore>(config.master_addr, options);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    if (options.isServer) {
      if (what.find("in use") != std::string::npos || what.find("EADDRINUSE") != std::string::npos)
        throw Error("MASTER_PORT=" + std::to_string(config.master_port) + " is already in use on rank 0 (" +
                    config.master_addr + "): choose another port, or launch with cohortrun --standalone "
                    "which picks a free one");
      throw Error("rank 0 cannot host the rendezvous store at " + where + ": " +
                  what.substr(0, what.find('\n')));
    }
    throw Error("cannot reach the master at " + where + " within " + std::to_string(config.timeout.count()) +
                " ms (rank 0 hosts the rendezvous store there): is rank 0 running, and is MASTER_ADDR=" +
                config.master_addr + " reachable from this host? (" + what.substr(0, what.find('\n')) + ")");
  }
}

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
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(count + 1 == config.size ? 5 : 50));
  }
  std::string arrived_list, missing_list;
  for (int r = 0; r < config.size; ++r) {
    std::string& list = arrived[r] ? arrived_list : missing_list;
    list += (list.empty() ? "" : ", ") + std::to_string(r);
  }
  throw Error("rendezvous at " + config.master_addr + ":" + std::to_string(config.master_port) +
              " timed out after " + std::to_string(config.timeout.count()) + " ms: " + std::to_string(count) +
              " of " + std::to_string(config.size) + " ranks arrived (ranks " + arrived_list +
              "); missing: ranks " + missing_list);
}

std::string local_address_towards(const std::string& master_addr, int master_port) {
  // A connected UDP socket sends nothing but makes the kernel pick the route, and so our address.
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  COHORT_CHECK(::getaddrinfo(master_addr.c_str(), std::to_string(master_port).c_str(), &hints, &res) == 0 &&
                   res != nullptr,
               "MASTER_ADDR=", master_addr, " does not resolve to an IPv4 address");
  int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  std::string address = "127.0.0.1";
  if (::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
    char text[INET_ADDRSTRLEN];
    ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text));
    address = text;
  }
  ::close(fd);
  ::freeaddrinfo(res);
  return address;
}

}  // namespace cohort::detail
