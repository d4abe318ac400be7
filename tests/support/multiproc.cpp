// The multi-process test harness (see multiproc.h).
#include "support/multiproc.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "support/fork_server.h"

extern char** environ;

namespace cohort::testing {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::vector<std::string> child_environment(int rank, int n, int port, const std::string& report_path,
                                           const RanksOptions& options) {
  std::map<std::string, std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    auto eq = entry.find('=');
    if (eq != std::string::npos) vars[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  // A clean launcher environment: nothing from an outer launcher leaks into the ranks.
  for (const char* name :
       {"SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
        "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID"})
    vars.erase(name);
  vars["RANK"] = std::to_string(rank);
  vars["WORLD_SIZE"] = std::to_string(n);
  const int local = options.local_size > 0 ? options.local_size : n;
  vars["LOCAL_RANK"] = std::to_string(rank % local);
  vars["LOCAL_WORLD_SIZE"] = std::to_string(local);
  if (options.local_size > 0) vars["GROUP_RANK"] = std::to_string(rank / local);
  vars["MASTER_ADDR"] = "127.0.0.1";
  vars["MASTER_PORT"] = std::to_string(port);
  vars["COHORT_TEST_RANK_PROCESS"] = "1";
  vars["COHORT_TEST_REPORT"] = report_path;
  vars["OMP_NUM_THREADS"] = "1";
  for (const auto& [key, value] : options.env) vars[key] = value;
  std::vector<std::string> out;
  for (const auto& [key, value] : vars) out.push_back(key + "=" + value);
  return out;
}

}  // namespace

bool is_rank_process() {
  const char* flag = std::getenv("COHORT_TEST_RANK_PROCESS");
  return flag != nullptr && std::string(flag) == "1";
}

std::string shared_temp_dir(RanksOptions& options, const std::string& variable, const std::string& prefix) {
  std::string dir;
  if (is_rank_process()) {
    const char* passed = std::getenv(variable.c_str());
    dir = passed != nullptr ? passed : "";
  } else {
    std::string name = "/tmp/" + prefix + "XXXXXX";
    dir = ::mkdtemp(name.data());
  }
  options.env[variable] = dir;
  return dir;
}

namespace {

// The first port the kernel hands to outgoing connections (ip_local_port_range): a port bound to 0
// comes from that range, so between the test choosing it and a rank binding it, any connection of the
// tests running beside it could take it as its local port (CI saw "MASTER_PORT=54725 is already in use").
int ephemeral_low() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 32768;
  return range >> low ? low : 32768;
}

bool bindable(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

// A random port below the ephemeral range that binds now: only another test choosing the same one
// could take it (1 in ~20,000 per pair).
int free_port() {
  static std::mt19937 random(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
  const int high = std::max(ephemeral_low() - 1, 12001);
  std::uniform_int_distribution<int> pick(10000, high);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int port = pick(random);
    if (bindable(port)) return port;
  }
  ADD_FAILURE() << "no free port between 10000 and " << high;
  return 0;
}

void report(const std::string& line) {
  const char* path = std::getenv("COHORT_TEST_REPORT");
  if (path == nullptr) return;
  std::ofstream out(path, std::ios::app);
  out << line << "\n";
}

std::string describe(const std::vector<RankResult>& results) {
  std::ostringstream out;
  for (const auto& r : results) {
    out << "---- rank " << r.rank << ": exit " << r.exit_code << " signal " << r.signal << "\n" << r.output << "\n";
  }
  return out.str();
}

std::vector<RankResult> run_ranks(int n, const std::function<void(int rank, int size)>& body,
                                  const RanksOptions& options) {
  if (is_rank_process()) {
    body(std::atoi(std::getenv("RANK")), std::atoi(std::getenv("WORLD_SIZE")));
    // The rest of the test body is the test process's (checking results); a rank ends here. exit()
    // (not _exit) so the Comm shuts down cleanly and peers do not see a death.
    std::fflush(stdout);
    std::exit(::testing::Test::HasFailure() ? 1 : 0);
  }
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string test_name = std::string(info->test_suite_name()) + "." + info->name();
  const std::string filter = "--gtest_filter=" + test_name;
  const bool use_server = forkable(options.env);
  const int port = free_port();
  char dir_template[] = "/tmp/cohort-test-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);

  std::vector<pid_t> pids(n);
  std::vector<bool> forked(n, false);
  std::vector<RankResult> results(n);
  for (int rank = 0; rank < n; ++rank) {
    const std::string out_path = dir + "/rank" + std::to_string(rank) + ".out";
    const std::string report_path = dir + "/rank" + std::to_string(rank) + ".report";
    auto env_strings = child_environment(rank, n, port, report_path, options);
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    results[rank].rank = rank;
    if (use_server && (pids[rank] = fork_rank(env_strings, test_name, out_path)) > 0) {
      forked[rank] = true;
      continue;
    }
    std::string exe = "/proc/self/exe";
    std::string quiet = "--gtest_brief=1";
    std::vector<char*> argv{exe.data(), const_cast<char*>(filter.c_str()), quiet.data(), nullptr};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    const int rc = posix_spawn(&pids[rank], exe.c_str(), &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) ADD_FAILURE() << "posix_spawn failed for rank " << rank;
  }
  // A rank's end: its wait status from waitpid, or from the fork server for a forked one.
  const auto ended = [&](int rank, int& status) {
    return forked[rank] ? forked_rank_status(pids[rank], status)
                        : ::waitpid(pids[rank], &status, WNOHANG) == pids[rank];
  };

  const auto deadline = std::chrono::steady_clock::now() + options.deadline;
  int remaining = n;
  std::vector<bool> done(n, false);
  while (remaining > 0) {
    for (int rank = 0; rank < n; ++rank) {
      if (done[rank]) continue;
      int status = 0;
      if (ended(rank, status)) {
        done[rank] = true;
        --remaining;
        if (WIFEXITED(status)) results[rank].exit_code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) results[rank].signal = WTERMSIG(status);
      }
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (int rank = 0; rank < n; ++rank)
        if (!done[rank]) ::kill(pids[rank], SIGKILL);
      ADD_FAILURE() << "ranks still running after " << options.deadline.count() << " s were killed";
      for (int rank = 0; rank < n; ++rank) {
        if (done[rank]) continue;
        int status = 0;
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!ended(rank, status) && std::chrono::steady_clock::now() < until)
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        results[rank].signal = SIGKILL;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  for (int rank = 0; rank < n; ++rank) {
    auto& r = results[rank];
    r.output = read_file(dir + "/rank" + std::to_string(rank) + ".out");
    std::istringstream reports(read_file(dir + "/rank" + std::to_string(rank) + ".report"));
    for (std::string line; std::getline(reports, line);) r.reports.push_back(line);
    r.passed = r.exit_code == 0 && r.signal == 0;
    ::unlink((dir + "/rank" + std::to_string(rank) + ".out").c_str());
    ::unlink((dir + "/rank" + std::to_string(rank) + ".report").c_str());
  }
  ::rmdir(dir.c_str());
  if (options.expect_all_pass) {
    for (const auto& r : results)
      if (!r.passed) ADD_FAILURE() << "rank " << r.rank << " failed:\n" << describe(results);
  }
  return results;
}

ToolRun run_tool(const std::string& relative, const std::string& args) {
  const char* from_ctest = std::getenv("COHORT_BUILD_DIR");
  std::string build = from_ctest != nullptr && *from_ctest != '\0' ? from_ctest : "";
  if (build.empty()) {  // run by hand: build/tests/<executable> -> build
    char self[4096];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
    const std::string exe = n > 0 ? std::string(self, size_t(n)) : "build/tests/x";
    build = exe.substr(0, exe.substr(0, exe.find_last_of('/')).find_last_of('/'));
  }
  const std::string command = build + "/" + relative + " " + args + " 2>&1";
  ToolRun run;
  FILE* pipe = ::popen(command.c_str(), "r");
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) run.out.append(buffer, n);
  const int status = ::pclose(pipe);
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

}  // namespace cohort::testing
