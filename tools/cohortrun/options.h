// LaunchOptions: everything cohortrun was told on its command line, parsed and checked, in one
// struct that the rendezvous, the supervisor and the tests share. Field names follow torchrun's
// flags (docs/cohortrun.md lists them); only resolve_options() fills the derived fields.
#pragma once

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace cohort::detail::launch {

/// Bad command-line input: cohortrun prints what() and a usage hint, starts nothing and exits 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Which standard streams of a worker a --redirects/--tee value selects (torchrun's Std):
/// 0 none, 1 stdout, 2 stderr, 3 both; either one value for all local ranks or a per-rank map.
struct StdSpec {
  static constexpr int kNone = 0, kOut = 1, kErr = 2, kAll = 3;
  int all = kNone;
  std::map<int, int> per_rank;  // local rank -> mask; used when non-empty
  int for_rank(int local_rank) const;
};

/// HOST[:PORT] of a rendezvous; port 0 means "pick a free one" (--standalone).
struct Endpoint {
  std::string host;
  int port = 0;
  std::string str() const;
};

/// Node count: --nnodes N or MIN:MAX.
struct NodeRange {
  int min = 1;
  int max = 1;
};

struct LaunchOptions {
  NodeRange nnodes;
  std::string nproc_per_node = "1";  // as given: N, cpu, gpu or auto
  int nproc = 1;                     // resolved number of workers on this node
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string rdzv_backend = "static";  // static | c10d
  std::string rdzv_endpoint;            // as given
  Endpoint endpoint;                    // resolved rendezvous endpoint (empty host: none needed)
  std::string rdzv_id = "none";
  std::string run_id;  // resolved: --rdzv-id, else a fresh one (TORCHELASTIC_RUN_ID)
  std::map<std::string, std::string> rdzv_conf;
  bool standalone = false;
  int max_restarts = 0;
  double monitor_interval = 5.0;    // seconds between checks of the other nodes' state
  double stop_timeout = 30.0;       // SIGTERM -> SIGKILL grace, seconds
  double join_timeout = 600.0;      // rendezvous: how long to wait for nodes (rdzv_conf join_timeout)
  double last_call_timeout = 30.0;  // MIN:MAX: extra wait for more nodes once MIN arrived
  std::string role = "default";
  StdSpec redirects;
  StdSpec tee;
  std::string log_dir;
  std::set<int> local_ranks_filter;               // empty: every local rank shows on the console
  bool bind_cores = false;                        // --bind-cores (or --core-list): each local rank its own CPUs
  std::string core_list;                          // --core-list as given: the CPUs to split ("" = all allowed)
  std::vector<std::vector<int>> local_rank_cpus;  // resolved: local rank -> CPUs; empty unless bound
  std::string program;                            // as given
  std::string program_path;                       // resolved to a file that can be executed
  std::vector<std::string> args;                  // the program's arguments
};

}  // namespace cohort::detail::launch
