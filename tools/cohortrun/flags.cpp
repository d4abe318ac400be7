// cohortrun's command line (see flags.h): a table of torchrun's flags cuts argv at the program and
// normalizes names, CLI11 reads the values (and PET_* defaults), flag_values.h checks them, and
// resolve_options() turns the combination into one consistent LaunchOptions.
#include "cohortrun/flags.h"

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <random>
#include <set>
#include <sstream>

#include "cohortrun/program.h"

namespace cohort::detail::launch {
namespace {

struct FlagInfo {
  const char* name;
  bool takes_value;
};

// torchrun's flags (torch/distributed/run.py), plus cohortrun's own --stop-timeout and --bind-cores,
// and --core-list (named after PyTorch's torch.backends.xeon.run_cpu).
constexpr FlagInfo kFlags[] = {
    {"nnodes", true},
    {"nproc-per-node", true},
    {"node-rank", true},
    {"master-addr", true},
    {"master-port", true},
    {"rdzv-backend", true},
    {"rdzv-endpoint", true},
    {"rdzv-id", true},
    {"rdzv-conf", true},
    {"standalone", false},
    {"max-restarts", true},
    {"monitor-interval", true},
    {"start-method", true},
    {"role", true},
    {"module", false},
    {"no-python", false},
    {"run-path", false},
    {"log-dir", true},
    {"redirects", true},
    {"tee", true},
    {"local-ranks-filter", true},
    {"stop-timeout", true},
    {"bind-cores", false},
    {"core-list", true},
    {"help", false},
};

const FlagInfo* find_flag(const std::string& name, const std::string& as_typed) {
  for (const auto& flag : kFlags) {
    if (name == flag.name) return &flag;
  }
  const FlagInfo* match = nullptr;  // argparse accepts a unique prefix
  std::string candidates;
  for (const auto& flag : kFlags) {
    if (std::string(flag.name).rfind(name, 0) == 0) {
      candidates += std::string(candidates.empty() ? "" : ", ") + "--" + flag.name;
      if (match != nullptr) throw UsageError("ambiguous flag " + as_typed + " (" + candidates + ")");
      match = &flag;
    }
  }
  if (match == nullptr) throw UsageError("unknown flag " + as_typed);
  return match;
}

std::string short_flag(char c) {
  switch (c) {
    case 'r': return "redirects";
    case 't': return "tee";
    case 'm': return "module";
    case 'h': return "help";
  }
  return "";
}

std::string random_run_id() {
  std::random_device device;
  std::mt19937_64 gen((static_cast<uint64_t>(device()) << 32) ^ device());
  std::ostringstream out;
  out << std::hex << gen() << gen();
  return out.str().substr(0, 8) + "-" + out.str().substr(8, 4) + "-" + out.str().substr(12, 4) + "-" +
         out.str().substr(16, 12);
}

}  // namespace

const char* usage_hint() {
  return "usage: cohortrun [--nnodes N|MIN:MAX] [--nproc-per-node N|cpu|gpu|auto] [flags...] "
         "PROGRAM [ARGS...]; see cohortrun --help";
}

CommandLine split_command_line(const std::vector<std::string>& args) {
  CommandLine line;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // the program
    std::string name, value;
    bool has_value = false;
    if (arg[1] == '-') {
      const auto eq = arg.find('=');
      name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
        has_value = true;
      }
      for (auto& c : name) c = c == '_' ? '-' : c;
      if (name.empty()) throw UsageError("unknown flag " + arg);
      name = find_flag(name, arg)->name;
    } else {
      name = short_flag(arg[1]);
      if (name.empty()) throw UsageError("unknown flag " + arg);
      if (arg.size() > 2) {  // -r3 or -r=3
        value = arg.substr(arg[2] == '=' ? 3 : 2);
        has_value = true;
      }
    }
    const FlagInfo* flag = find_flag(name, arg);
    if (flag->takes_value && !has_value) {
      if (i + 1 >= args.size()) throw UsageError("flag " + arg + " needs a value");
      value = args[++i];
      has_value = true;
    } else if (!flag->takes_value && has_value) {
      throw UsageError("flag " + arg + " takes no value");
    }
    line.flags.push_back("--" + name);
    if (flag->takes_value) line.flags.back() += "=" + value;
  }
  line.program.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  return line;
}

namespace {

// The on/off flags; the others' values land in a map from flag name to text.
struct Switches {
  bool standalone = false, module = false, no_python = false, run_path = false, help = false;
  bool bind_cores = false;
};

// A value flag's key ("tee") and the form of its value, to refuse "--tee=" with no value by name.
struct ValueFlag {
  std::string key;
  std::string type;
};

// torchrun's default for a flag: "nproc-per-node" -> PET_NPROC_PER_NODE.
std::string pet_variable(const std::string& key) {
  std::string env = "PET_" + key;
  for (auto& c : env) c = c == '-' ? '_' : static_cast<char>(std::toupper(c));
  return env;
}

void add_flags(CLI::App& app, std::map<std::string, std::string>& text, Switches& on, std::vector<ValueFlag>& values) {
  const auto value_flag = [&](const std::string& name, const std::string& type, const std::string& description) {
    const std::string key = name.substr(0, name.find(','));  // "tee,-t": key tee, alias -t
    app.add_option("--" + name, text[key], description)->envname(pet_variable(key))->type_name(type);
    values.push_back({key, type});
  };
  value_flag("nnodes", "N|MIN:MAX", "number of nodes (default 1); MIN:MAX: elastic");
  value_flag("nproc-per-node", "N|cpu|gpu|auto", "workers on this node (default 1)");
  value_flag("node-rank", "R", "rank of this node, static rendezvous (default 0)");
  value_flag("master-addr", "HOST", "node 0's address, static rendezvous (default 127.0.0.1)");
  value_flag("master-port", "PORT", "node 0's port, static rendezvous (default 29500)");
  value_flag("rdzv-backend", "static|c10d", "rendezvous backend (default static)");
  value_flag("rdzv-endpoint", "HOST[:PORT]", "c10d rendezvous store (default port 29400)");
  value_flag("rdzv-id", "ID", "job id, the same on every node (default: a fresh one)");
  value_flag("rdzv-conf", "K=V,...", "join_timeout (600), last_call_timeout (30), in seconds");
  app.add_flag("--standalone", on.standalone, "one node: free port, fresh run id")->envname("PET_STANDALONE");
  value_flag("max-restarts", "N", "restarts of the worker group after failures before failing (default 0)");
  value_flag("monitor-interval", "SECONDS", "how often other nodes' state and joining nodes are checked (default 5)");
  value_flag("start-method", "METHOD", "accepted for torchrun compatibility; ignored");
  value_flag("role", "NAME", "ROLE_NAME of the workers (default 'default')");
  app.add_flag("--module,-m", on.module, "rejected: runs Python modules");
  app.add_flag("--no-python", on.no_python, "accepted; programs always run directly");
  app.add_flag("--run-path", on.run_path, "rejected: runs Python scripts");
  value_flag("log-dir", "DIR", "log files: DIR/ID_*/attempt_N/LOCAL_RANK/std{out,err}.log");
  value_flag("redirects,-r", "0-3|R:V,...", "streams to log files only (1 out, 2 err, 3 both)");
  value_flag("tee,-t", "0-3|R:V,...", "streams to log files and the console");
  value_flag("local-ranks-filter", "R,...", "local ranks shown on the console (default all)");
  value_flag("stop-timeout", "SECONDS", "SIGTERM to SIGKILL grace when stopping workers (30)");
  app.add_flag("--bind-cores", on.bind_cores,
               "each local rank its own share of the CPUs cohortrun may use; OMP_NUM_THREADS, "
               "OPENBLAS_NUM_THREADS, MKL_NUM_THREADS = that CPU count unless you set them")
      ->envname("PET_BIND_CORES");
  value_flag("core-list", "0-3,8,...", "--bind-cores over these CPUs only (run_cpu's --core-list)");
  app.add_flag("--help,-h", on.help, "print this help");
}

// "--master-addr=$HOST" with HOST unset: named plainly (CLI11 would say "1 required HOST missing").
void refuse_empty_values(const std::vector<std::string>& flags, const std::vector<ValueFlag>& values) {
  for (size_t i = 0; i < flags.size(); ++i) {
    const std::string& arg = flags[i];
    if (arg.rfind("--", 0) != 0) continue;
    const auto eq = arg.find('=');
    const bool empty = eq == std::string::npos ? i + 1 < flags.size() && flags[i + 1].empty() : eq + 1 == arg.size();
    if (!empty) continue;
    std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    for (auto& c : name) c = c == '_' ? '-' : c;
    for (const auto& flag : values)
      if (flag.key == name)
        throw UsageError("--" + name + " was given an empty value: give a value (" + flag.type +
                         ") or leave the flag out");
  }
}

// A value flag given twice (`--nproc-per-node 2 ... --nproc 4`, prefixes and `-r` included, as the
// names are normalized by now) is refused naming both values: CLI11 said "At Most 1 required but
// received 2", and torchrun's silent last value hides a conflict in a wrapper script's flags.
void refuse_repeated_values(const std::vector<std::string>& flags) {
  std::map<std::string, std::vector<std::string>> given;
  for (const std::string& arg : flags) {
    const auto eq = arg.find('=');
    if (eq != std::string::npos) given[arg.substr(0, eq)].push_back(arg.substr(eq + 1));
  }
  for (const auto& [name, values] : given) {
    if (values.size() < 2) continue;
    std::string list;
    for (const auto& value : values) list += (list.empty() ? "" : ", ") + value;
    throw UsageError(name + " was given " + std::to_string(values.size()) + " times (" + list + "): give it once");
  }
}

std::string help_text(const CLI::App& app) {
  std::string help = app.help();
  const std::string usage = "Usage: cohortrun [OPTIONS]";
  const auto at = help.find(usage);
  if (at != std::string::npos) help.replace(at, usage.size(), "Usage: cohortrun [FLAGS] PROGRAM [ARGS...]");
  return help +
         "\nFlags are torchrun's, spelled with - or _; PET_* variables give defaults as in torchrun.\n"
         "Exit codes: 0 success, 1 a worker or the rendezvous failed, 2 bad command line,\n"
         "128+N cohortrun got signal N (forwarded to the workers). See docs/cohortrun.md.\n";
}

// The flags' texts (as typed or from PET_*) into options, each checked by its parser. An error names
// where the value came from: the flag, or its PET_* variable when the flag was not given.
void read_values(std::map<std::string, std::string>& text, const std::set<std::string>& given, const HostFacts& host,
                 LaunchOptions& o) {
  const auto has = [&](const std::string& name) { return !text[name].empty(); };
  const auto named = [&](const std::string& key) {
    return given.count(key) != 0 || std::getenv(pet_variable(key).c_str()) == nullptr ? "--" + key : pet_variable(key);
  };
  if (has("nnodes")) o.nnodes = parse_nnodes(text["nnodes"], named("nnodes"));
  if (has("nproc-per-node")) o.nproc_per_node = text["nproc-per-node"];
  o.nproc = parse_nproc(o.nproc_per_node, host, named("nproc-per-node"));
  check_local_workers(o.nproc, named("nproc-per-node"), o.nproc_per_node, host);
  if (has("node-rank")) o.node_rank = parse_int(named("node-rank"), text["node-rank"], 0, 1 << 20);
  if (has("master-addr")) o.master_addr = text["master-addr"];
  if (has("master-port")) o.master_port = parse_int(named("master-port"), text["master-port"], 1, 65535);
  if (has("rdzv-backend")) o.rdzv_backend = text["rdzv-backend"];
  o.rdzv_endpoint = text["rdzv-endpoint"];
  if (has("rdzv-id")) o.rdzv_id = text["rdzv-id"];
  o.rdzv_conf = parse_key_values(text["rdzv-conf"]);
  if (has("max-restarts")) o.max_restarts = parse_int(named("max-restarts"), text["max-restarts"], 0, 1 << 20);
  if (has("monitor-interval")) {
    o.monitor_interval = parse_positive_seconds(named("monitor-interval"), text["monitor-interval"]);
  }
  const std::string& method = text["start-method"];
  if (has("start-method") && method != "spawn" && method != "fork" && method != "forkserver") {
    throw UsageError(named("start-method") + "=" + method + " is not spawn, fork or forkserver");
  }
  if (has("role")) o.role = text["role"];
  o.log_dir = text["log-dir"];
  if (has("redirects")) o.redirects = parse_std_spec(named("redirects"), text["redirects"]);
  if (has("tee")) o.tee = parse_std_spec(named("tee"), text["tee"]);
  if (has("local-ranks-filter")) o.local_ranks_filter = parse_rank_list(text["local-ranks-filter"]);
  if (has("stop-timeout")) o.stop_timeout = parse_seconds(named("stop-timeout"), text["stop-timeout"]);
  o.core_list = text["core-list"];
}

}  // namespace

ParsedCommandLine parse_command_line(const std::vector<std::string>& args, const HostFacts& host) {
  const CommandLine line = split_command_line(args);
  CLI::App app("cohortrun: torchrun-compatible launcher for C++ programs", "cohortrun");
  app.set_help_flag();                      // --help is handled below, after the cut at the program
  std::map<std::string, std::string> text;  // flag name -> value, as typed or from PET_*
  Switches on;
  std::vector<ValueFlag> values;
  add_flags(app, text, on, values);
  refuse_empty_values(line.flags, values);
  refuse_repeated_values(line.flags);
  std::vector<std::string> reversed(line.flags.rbegin(), line.flags.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }

  ParsedCommandLine parsed;
  if (on.help) {
    parsed.help = help_text(app);
    return parsed;
  }
  if (on.module || on.run_path) {
    throw UsageError(std::string(on.module ? "--module" : "--run-path") +
                     " runs Python; cohortrun runs a program: drop the flag and name the program");
  }
  LaunchOptions& o = parsed.options;
  std::set<std::string> given;  // the value flags on the command line ("--tee=3"), by key
  for (const std::string& flag : line.flags) given.insert(flag.substr(2, flag.find('=') - 2));
  read_values(text, given, host, o);
  o.standalone = on.standalone;
  o.bind_cores = on.bind_cores || !o.core_list.empty();
  if (line.program.empty()) throw UsageError("no program to run was given");
  o.program = line.program[0];
  o.args.assign(line.program.begin() + 1, line.program.end());
  resolve_options(o);
  if (o.bind_cores) o.local_rank_cpus = bind_local_ranks(o, host.allowed_cpus);
  o.program_path = resolve_program(o.program, getenv_or_empty("PATH"));
  return parsed;
}

namespace {

// --rdzv-conf keys cohortrun reads; any other is a typo or a torchrun setting it would silently ignore.
void check_rdzv_conf_keys(const LaunchOptions& o) {
  for (const auto& [key, value] : o.rdzv_conf) {
    if (key != "join_timeout" && key != "last_call_timeout") {
      throw UsageError("--rdzv-conf key '" + key + "' (" + key + "=" + value +
                       ") is not known; accepted keys: join_timeout, last_call_timeout");
    }
  }
}

// A local rank named by a flag must exist: a filter naming only local ranks that do not exist would
// hide every worker's output, and a --redirects/--tee entry for one would silently do nothing.
void check_local_ranks(const LaunchOptions& o, const std::string& flag, const std::set<int>& ranks,
                       const std::string& text) {
  for (int rank : ranks) {
    if (rank >= o.nproc) {
      throw UsageError(flag + "=" + text + ": local rank " + std::to_string(rank) +
                       " does not exist (--nproc-per-node=" + o.nproc_per_node + " starts local ranks 0.." +
                       std::to_string(o.nproc - 1) + ")");
    }
  }
}

void check_ranks_filter(const LaunchOptions& o) {
  std::string list;
  for (int rank : o.local_ranks_filter) list += (list.empty() ? "" : ",") + std::to_string(rank);
  check_local_ranks(o, "--local-ranks-filter", o.local_ranks_filter, list);
}

// --redirects and --tee in their per-rank form (R:V,...), as the map holds them.
void check_std_spec_ranks(const LaunchOptions& o, const std::string& flag, const StdSpec& spec) {
  std::set<int> ranks;
  std::string text;
  for (const auto& [rank, value] : spec.per_rank) {
    ranks.insert(rank);
    text += (text.empty() ? "" : ",") + std::to_string(rank) + ":" + std::to_string(value);
  }
  check_local_ranks(o, flag, ranks, text);
}

}  // namespace

void resolve_options(LaunchOptions& o) {
  if (o.monitor_interval <= 0) throw UsageError("--monitor-interval must be > 0 seconds");
  check_rdzv_conf_keys(o);
  check_ranks_filter(o);
  check_std_spec_ranks(o, "--redirects", o.redirects);
  check_std_spec_ranks(o, "--tee", o.tee);
  if (o.rdzv_conf.count("join_timeout")) {
    o.join_timeout = parse_seconds("--rdzv-conf join_timeout", o.rdzv_conf["join_timeout"]);
  }
  if (o.rdzv_conf.count("last_call_timeout")) {
    o.last_call_timeout = parse_seconds("--rdzv-conf last_call_timeout", o.rdzv_conf["last_call_timeout"]);
  }
  if (o.standalone) {  // torchrun: c10d on localhost, a fresh run id; explicit values are ignored
    if (o.nnodes.max > 1) {
      throw UsageError("--standalone runs one node; for --nnodes=" + std::to_string(o.nnodes.max) +
                       " give --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT instead");
    }
    o.rdzv_backend = "c10d";
    o.rdzv_id = o.run_id = random_run_id();
    o.endpoint = Endpoint{"127.0.0.1", 0};
    return;
  }
  // The job's identity for its workers (TORCHELASTIC_RUN_ID): several nodes without --rdzv-id take
  // the one node 0 publishes at the rendezvous (rendezvous.cpp).
  o.run_id = o.rdzv_id != "none" ? o.rdzv_id : random_run_id();
  if (o.rdzv_backend == "static") {
    if (o.nnodes.min != o.nnodes.max) {
      throw UsageError("--nnodes=" + std::to_string(o.nnodes.min) + ":" + std::to_string(o.nnodes.max) +
                       " needs --rdzv-backend=c10d (the static backend has a fixed node count)");
    }
    if (o.node_rank >= o.nnodes.max) {
      throw UsageError("--node-rank=" + std::to_string(o.node_rank) +
                       " is not below --nnodes=" + std::to_string(o.nnodes.max));
    }
    if (o.rdzv_endpoint.empty()) {  // torchrun: the endpoint is MASTER_ADDR:MASTER_PORT
      std::string host = o.master_addr;
      if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
        host = host.substr(1, host.size() - 2);
      }
      if (host.empty()) throw UsageError("--master-addr is empty");
      o.endpoint = Endpoint{host, o.master_port};
    } else {
      o.endpoint = parse_endpoint(o.rdzv_endpoint, o.master_port);
    }
    return;
  }
  if (o.rdzv_backend == "c10d") {
    if (o.rdzv_endpoint.empty()) {
      if (o.nnodes.max > 1) {
        throw UsageError("--rdzv-backend=c10d with --nnodes=" + std::to_string(o.nnodes.max) +
                         " needs --rdzv-endpoint=HOST[:PORT]");
      }
      o.endpoint = Endpoint{"127.0.0.1", 0};
    } else {
      o.endpoint = parse_endpoint(o.rdzv_endpoint, 29400);
    }
    return;
  }
  throw UsageError("--rdzv-backend=" + o.rdzv_backend + " is not supported (use static or c10d)");
}

}  // namespace cohort::detail::launch
