// Test worker for cohortrun: prints its arguments and every environment variable ("ENV KEY=VALUE"),
// or writes them to --env-dir DIR/<RANK>.env, so tests can check what the launcher set.
// --print-cpus: also prints "CPUS <list>", the CPUs it may run on (/proc/self/status Cpus_allowed_list).
// --meet-at-master: rank 0 listens on MASTER_PORT (as the rank hosting the workers' store does; exit
// 3 if the port is taken) until every other rank connected to MASTER_ADDR:MASTER_PORT; prints MET.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "pid_file.h"

extern char** environ;

namespace {

int env_int(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? -1 : std::atoi(value);
}

// Rank 0: accept WORLD_SIZE-1 connections on MASTER_PORT within 15 s.
int host_meeting() {
  const int listener = ::socket(AF_INET6, SOCK_STREAM, 0);
  int off = 0, on = 1;
  ::setsockopt(listener, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_addr = in6addr_any;
  address.sin6_port = htons(static_cast<uint16_t>(env_int("MASTER_PORT")));
  if (::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(listener, 64) != 0) {
    std::fprintf(stderr, "bind MASTER_PORT=%d: %s\n", env_int("MASTER_PORT"), std::strerror(errno));
    return 3;
  }
  for (int met = 1; met < env_int("WORLD_SIZE"); ++met) {
    pollfd waiting{listener, POLLIN, 0};
    if (::poll(&waiting, 1, 15000) != 1) {
      std::fprintf(stderr, "only %d of %d ranks came\n", met, env_int("WORLD_SIZE"));
      return 4;
    }
    ::close(::accept(listener, nullptr, nullptr));
  }
  ::close(listener);
  return 0;
}

// Other ranks: connect to MASTER_ADDR:MASTER_PORT, retrying for 15 s.
int join_meeting() {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  for (int attempt = 0; attempt < 300; ++attempt) {
    addrinfo* found = nullptr;
    if (::getaddrinfo(std::getenv("MASTER_ADDR"), std::getenv("MASTER_PORT"), &hints, &found) == 0) {
      for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, SOCK_STREAM, 0);
        const bool ok = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;
        ::close(fd);
        if (ok) {
          ::freeaddrinfo(found);
          return 0;
        }
      }
      ::freeaddrinfo(found);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::fprintf(stderr, "cannot reach MASTER_ADDR:MASTER_PORT\n");
  return 5;
}

// "0-1" from the kernel's own view of this process, not from anything the launcher says.
std::string allowed_cpus() {
  FILE* status = std::fopen("/proc/self/status", "r");
  if (status == nullptr) return "unreadable";
  char line[4096];
  std::string list = "missing";
  while (std::fgets(line, sizeof line, status) != nullptr) {
    if (std::strncmp(line, "Cpus_allowed_list:", 18) != 0) continue;
    list = line + 18;
    list.erase(0, list.find_first_not_of(" \t"));
    list.erase(list.find_last_not_of(" \t\n") + 1);
  }
  std::fclose(status);
  return list;
}

}  // namespace

int main(int argc, char** argv) {
  write_pid_file("");
  bool meet = false, print_cpus = false;
  double sleep_seconds = 0;
  std::string args_line = "ARGS", env_dir;
  for (int i = 1; i < argc; ++i) {
    args_line += std::string(" ") + argv[i];
    if (std::strcmp(argv[i], "--meet-at-master") == 0) meet = true;
    if (std::strcmp(argv[i], "--print-cpus") == 0) print_cpus = true;
    if (std::strcmp(argv[i], "--sleep") == 0 && i + 1 < argc) sleep_seconds = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--env-dir") == 0 && i + 1 < argc) env_dir = argv[i + 1];
  }
  std::printf("%s\n", args_line.c_str());
  if (print_cpus) std::printf("CPUS %s\n", allowed_cpus().c_str());
  FILE* env_out = stdout;
  if (!env_dir.empty()) env_out = std::fopen((env_dir + "/" + std::getenv("RANK") + ".env").c_str(), "w");
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::fprintf(env_out, env_dir.empty() ? "ENV %s\n" : "%s\n", *entry);
  }
  if (env_out != stdout) std::fclose(env_out);
  std::fflush(stdout);
  if (meet) {
    const int code = env_int("RANK") == 0 ? host_meeting() : join_meeting();
    if (code != 0) return code;
    std::printf("MET\n");
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<long>(sleep_seconds * 1000)));
  return 0;
}
