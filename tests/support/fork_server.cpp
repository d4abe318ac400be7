// The fork server (see fork_server.h). Messages from the server are 9 bytes: a type ('P': the pid a
// request got, or -errno; 'S': a child's wait status) and two 32-bit numbers. A request is a count
// and that many length-prefixed strings: the output path, the gtest filter, then the environment.
#include "support/fork_server.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <optional>

extern char** environ;

namespace cohort::testing {
namespace {

constexpr const char* kServerFdVariable = "COHORT_TEST_FORK_SERVER_FD";
constexpr int kServerFd = 200;  // where the server finds its end of the socket

// Plain loops, not core/socket.h's net::write_all and read_exact: the server runs them during static
// initialization, before the other translation units' statics exist.
bool write_all(int fd, const void* data, size_t size) {
  const char* at = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, at, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    at += n;
    size -= size_t(n);
  }
  return true;
}

bool read_all(int fd, void* data, size_t size) {
  char* at = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::read(fd, at, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    at += n;
    size -= size_t(n);
  }
  return true;
}

bool send_message(int fd, char type, int32_t a, int32_t b) {
  char message[9];
  message[0] = type;
  std::memcpy(message + 1, &a, 4);
  std::memcpy(message + 5, &b, 4);
  return write_all(fd, message, sizeof message);
}

std::optional<std::vector<std::string>> read_request(int fd) {
  uint32_t count = 0;
  if (!read_all(fd, &count, 4)) return std::nullopt;
  std::vector<std::string> fields(count);
  for (auto& field : fields) {
    uint32_t size = 0;
    if (!read_all(fd, &size, 4)) return std::nullopt;
    field.resize(size);
    if (size > 0 && !read_all(fd, field.data(), size)) return std::nullopt;
  }
  return fields;
}

// In a child of the server: its output, environment and test, then back to static initialization.
void become_rank(int fd, const std::vector<std::string>& request) {
  ::close(fd);
  const int out = ::open(request[0].c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) ::_exit(127);
  ::dup2(out, 1);
  ::dup2(out, 2);
  ::close(out);
  ::clearenv();
  for (size_t i = 2; i < request.size(); ++i) ::putenv(::strdup(request[i].c_str()));
  ::setenv("GTEST_FILTER", request[1].c_str(), 1);
}

// The server: forks a rank per request and reports each child's end, until the test process goes.
// Returns only in a forked child.
void serve(int fd) {
  int children = 0;
  for (;;) {
    int status = 0;
    for (pid_t ended; children > 0 && (ended = ::waitpid(-1, &status, WNOHANG)) > 0; --children)
      if (!send_message(fd, 'S', ended, status)) ::_exit(0);
    pollfd ready{fd, POLLIN, 0};
    if (::poll(&ready, 1, children > 0 ? 5 : -1) <= 0) continue;
    const auto request = read_request(fd);
    if (!request || request->size() < 2) ::_exit(0);  // the test process is gone
    const pid_t pid = ::fork();
    if (pid == 0) return become_rank(fd, *request);
    if (pid > 0) ++children;
    if (!send_message(fd, 'P', pid > 0 ? pid : -errno, 0)) ::_exit(0);
  }
}

// Runs during static initialization: in the server it serves (and returns only in a forked rank).
bool serve_if_asked() {
  const char* fd_text = std::getenv(kServerFdVariable);
  if (fd_text == nullptr) return false;
  const int fd = std::atoi(fd_text);
  ::unsetenv(kServerFdVariable);
  serve(fd);
  return true;
}
[[maybe_unused]] const bool g_is_forked_rank = serve_if_asked();

// The test process's side.
struct Server {
  int fd = -1;
  pid_t pid = -1;
  bool broken = false;
  std::deque<int32_t> replies;  // pids answering requests, in order
  std::map<pid_t, int> ended;   // wait statuses not yet asked for
};
Server g_server;

// Reads what the server has sent, waiting at most `wait_ms` for the first bytes.
void read_messages(int wait_ms) {
  pollfd ready{g_server.fd, POLLIN, 0};
  while (!g_server.broken && ::poll(&ready, 1, wait_ms) > 0) {
    char message[9];
    if (!read_all(g_server.fd, message, sizeof message)) {
      g_server.broken = true;
      break;
    }
    int32_t a = 0, b = 0;
    std::memcpy(&a, message + 1, 4);
    std::memcpy(&b, message + 5, 4);
    if (message[0] == 'P') g_server.replies.push_back(a);
    if (message[0] == 'S') g_server.ended[a] = b;
    wait_ms = 0;
  }
}

bool start_server(const std::vector<std::string>& env) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return false;
  std::vector<std::string> server_env = env;
  server_env.push_back(std::string(kServerFdVariable) + "=" + std::to_string(kServerFd));
  std::vector<char*> envp;
  for (auto& entry : server_env) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe", brief = "--gtest_brief=1";
  std::vector<char*> argv{exe.data(), brief.data(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], kServerFd);  // dup2 clears close-on-exec
  const int rc = posix_spawn(&g_server.pid, exe.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return false;
  }
  g_server.fd = fds[0];
  return true;
}

// A variable the server's libraries already read when they loaded (a fork keeps those values).
bool read_at_load(const std::string& name) {
  for (const char* prefix : {"LD_", "OMP_", "GOMP_", "KMP_", "OPENBLAS_", "GOTO_", "MKL_", "MALLOC_", "GLIBC_", "CUDA_",
                             "TORCH_", "PYTORCH_"})
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

}  // namespace

bool forkable(const std::map<std::string, std::string>& extra) {
  const char* setting = std::getenv("COHORT_TEST_FORK_SERVER");
  if (setting != nullptr && std::string(setting) == "0") return false;
  for (const auto& entry : extra)
    if (read_at_load(entry.first)) return false;
  return true;
}

pid_t fork_rank(const std::vector<std::string>& env, const std::string& filter, const std::string& out_path) {
  if (g_server.broken) return -1;
  if (g_server.fd < 0 && !start_server(env)) {
    g_server.broken = true;
    return -1;
  }
  std::vector<std::string> fields{out_path, filter};
  fields.insert(fields.end(), env.begin(), env.end());
  std::string request;
  const auto append_number = [&](uint32_t n) { request.append(reinterpret_cast<const char*>(&n), 4); };
  append_number(uint32_t(fields.size()));
  for (const auto& field : fields) {
    append_number(uint32_t(field.size()));
    request += field;
  }
  if (!write_all(g_server.fd, request.data(), request.size())) g_server.broken = true;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!g_server.broken && g_server.replies.empty() && std::chrono::steady_clock::now() < until) read_messages(100);
  if (g_server.replies.empty()) {
    g_server.broken = true;
    return -1;
  }
  const int32_t pid = g_server.replies.front();
  g_server.replies.pop_front();
  return pid > 0 ? pid : -1;
}

bool forked_rank_status(pid_t pid, int& status) {
  read_messages(0);
  const auto found = g_server.ended.find(pid);
  if (found == g_server.ended.end()) return false;
  status = found->second;
  g_server.ended.erase(found);
  return true;
}

}  // namespace cohort::testing
