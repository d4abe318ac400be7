// Process helpers for cohortrun_test (see launch_helpers.h): fork/exec with two pipes and poll(),
// /proc for liveness, plain files for what workers report.
#include "launch_helpers.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace cohort::testing {
namespace {

bool is_launcher_variable(const std::string& name) {
  static const char* kNames[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                 "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_NAME",
                                 "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS",
                                 "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                                 "NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                                 "COHORT_TEST_PID_DIR", "COHORT_SOURCE_DIR"};
  for (const char* known : kNames) {
    if (name == known) return true;
  }
  return name.rfind("PET_", 0) == 0 || name.rfind("TORCHELASTIC_", 0) == 0 ||
         name.rfind("GTEST_", 0) == 0 || name.rfind("COHORT_TEST", 0) == 0;
}

bool is_alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string all;
  std::getline(stat, all);
  const auto close = all.rfind(')');
  return close != std::string::npos && close + 2 < all.size() && all[close + 2] != 'Z' &&
         all[close + 2] != 'X';
}

}  // namespace

std::string ProcResult::describe() const {
  std::ostringstream text;
  text << "exit code " << code << ", signal " << signal << (timed_out ? ", TIMED OUT" : "")
       << "\n--- stdout ---\n" << out << "--- stderr ---\n" << err;
  return text.str();
}

Env clean_env(const Env& extra) {
  Env env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string item(*entry);
    const auto eq = item.find('=');
    if (eq == std::string::npos || is_launcher_variable(item.substr(0, eq))) continue;
    env[item.substr(0, eq)] = item.substr(eq + 1);
  }
  for (const auto& [key, value] : extra) env[key] = value;
  return env;
}

Proc start_process(const std::vector<std::string>& argv, const Env& env) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return {};
  std::vector<std::string> env_items;
  for (const auto& [key, value] : env) env_items.push_back(key + "=" + value);
  std::vector<char*> c_argv, c_env;
  for (const auto& arg : argv) c_argv.push_back(const_cast<char*>(arg.c_str()));
  for (const auto& item : env_items) c_env.push_back(const_cast<char*>(item.c_str()));
  c_argv.push_back(nullptr);
  c_env.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::execve(c_argv[0], c_argv.data(), c_env.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  return Proc{pid, out[0], err[0]};
}

ProcResult finish_process(Proc& proc, std::chrono::milliseconds timeout) {
  ProcResult result;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buffer[65536];
  while (proc.out_fd >= 0 || proc.err_fd >= 0) {
    std::vector<pollfd> fds;
    if (proc.out_fd >= 0) fds.push_back({proc.out_fd, POLLIN, 0});
    if (proc.err_fd >= 0) fds.push_back({proc.err_fd, POLLIN, 0});
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      result.timed_out = true;
      ::kill(proc.pid, SIGKILL);
      break;
    }
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::min<long>(left, 200))) <= 0) continue;
    for (const auto& fd : fds) {
      if (!fd.revents) continue;
      const ssize_t n = ::read(fd.fd, buffer, sizeof buffer);
      std::string& sink = fd.fd == proc.out_fd ? result.out : result.err;
      if (n > 0) {
        sink.append(buffer, static_cast<size_t>(n));
      } else if (!(n < 0 && errno == EINTR)) {
        ::close(fd.fd);
        (fd.fd == proc.out_fd ? proc.out_fd : proc.err_fd) = -1;
      }
    }
  }
  for (int* fd : {&proc.out_fd, &proc.err_fd}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
  int status = 0;
  while (::waitpid(proc.pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) result.code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

ProcResult run_process(const std::vector<std::string>& argv, const Env& env,
                       std::chrono::milliseconds timeout) {
  Proc proc = start_process(argv, env);
  return finish_process(proc, timeout);
}

std::map<int, Env> envs_from_output(const std::string& out) {
  std::map<int, Env> envs;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    int rank = -1;
    char tag[8] = {0};
    int offset = 0;
    if (std::sscanf(line.c_str(), "[rank%d]: %4s %n", &rank, tag, &offset) < 2 ||
        std::strcmp(tag, "ENV") != 0 || offset == 0) {
      continue;
    }
    const std::string item = line.substr(static_cast<size_t>(offset));
    const auto eq = item.find('=');
    if (eq != std::string::npos) envs[rank][item.substr(0, eq)] = item.substr(eq + 1);
  }
  return envs;
}

std::map<int, Env> envs_from_dir(const std::string& dir) {
  std::map<int, Env> envs;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".env") continue;
    const int rank = std::stoi(entry.path().stem().string());
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      const auto eq = line.find('=');
      if (eq != std::string::npos) envs[rank][line.substr(0, eq)] = line.substr(eq + 1);
    }
  }
  return envs;
}

std::string make_temp_dir(const std::string& prefix) {
  std::string pattern = "/tmp/" + prefix + "XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) return "";
  return pattern;
}

void remove_tree(const std::string& path) {
  std::error_code ignored;
  if (!path.empty()) std::filesystem::remove_all(path, ignored);
}

std::vector<pid_t> recorded_pids(const std::string& dir) {
  std::vector<pid_t> pids;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".pid") continue;
    std::ifstream in(entry.path());
    pid_t pid = 0;
    if (in >> pid && pid > 0) pids.push_back(pid);
  }
  return pids;
}

std::vector<pid_t> alive_after(const std::vector<pid_t>& pids, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<pid_t> alive;
  do {
    alive.clear();
    for (pid_t pid : pids) {
      if (is_alive(pid)) alive.push_back(pid);
    }
    if (alive.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < deadline);
  return alive;
}

bool wait_for_pid_files(const std::string& dir, size_t count, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (recorded_pids(dir).size() < count) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

TwoNamespaces::TwoNamespaces() {
  const std::string id = std::to_string(::getpid() % 100000);
  a_ = "cohortrun_a" + id;
  b_ = "cohortrun_b" + id;
  const std::string va = "crva" + id, vb = "crvb" + id;  // interface names: 15 characters at most
  const std::vector<std::string> steps = {
      "ip netns add " + a_, "ip netns add " + b_,
      "ip link add " + va + " type veth peer name " + vb,
      "ip link set " + va + " netns " + a_, "ip link set " + vb + " netns " + b_,
      "ip -n " + a_ + " addr add 192.168.77.1/24 dev " + va,
      "ip -n " + b_ + " addr add 192.168.77.2/24 dev " + vb,
      "ip -n " + a_ + " link set " + va + " up", "ip -n " + b_ + " link set " + vb + " up",
      "ip -n " + a_ + " link set lo up", "ip -n " + b_ + " link set lo up"};
  for (const auto& step : steps) {
    if (std::system((step + " 2>&1").c_str()) != 0) {
      error_ = "'" + step + "' failed (the network-namespace tests need root and ip netns)";
      return;
    }
  }
}

TwoNamespaces::~TwoNamespaces() {
  for (const auto& ns : {a_, b_}) {  // deleting a namespace deletes its end of the veth pair
    (void)!std::system(("ip netns del " + ns + " 2>/dev/null").c_str());
  }
}

size_t count_of(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

std::vector<std::string> TwoNamespaces::node_argv(const std::string& ns, const std::string& cohortrun,
                                                  int join_timeout_s, const std::vector<std::string>& worker) {
  std::vector<std::string> argv{"/usr/sbin/ip", "netns", "exec", ns, cohortrun, "--nnodes=2",
                                "--nproc_per_node=2", "--rdzv_id=netns", "--rdzv_backend=c10d",
                                "--rdzv_endpoint=192.168.77.1:29400",
                                "--rdzv-conf=join_timeout=" + std::to_string(join_timeout_s)};
  argv.insert(argv.end(), worker.begin(), worker.end());
  return argv;
}

}  // namespace cohort::testing
