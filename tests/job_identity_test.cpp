// Job identity (issue 17, item 2): the run id each launcher gives (LaunchEnv::run_id), its check at
// the store's rendezvous (a rank of another job is refused naming both jobs, a port in use names the
// job that holds it, an unknown MASTER_ADDR is named at once) and on the control plane's handshake.
// Ranks are threads of this process; every store and socket is on 127.0.0.1.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <future>
#include <system_error>
#include <thread>

#include "cohort/world.h"

#include "comm/control_plane.h"
#include "support/errors.h"
#include "support/multiproc.h"
#include "world/job_identity.h"
#include "world/launch_env.h"
#include "world/rendezvous.h"
#include "world/store_client.h"
#include "world/store_server.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace job_identity_test {

using ::testing::HasSubstr;
using namespace cohort::detail;
using cohort::testing::error_of;
using namespace std::chrono_literals;

namespace {

RendezvousConfig rank_config(int port, int rank, const std::string& run_id) {
  RendezvousConfig config{"127.0.0.1", port, rank, 2, std::chrono::milliseconds(3000)};
  config.run_id = run_id;
  return config;
}

// A socket listening on a fresh port of 127.0.0.1 that accepts nothing: connections wait in its queue,
// and closing it resets them (what another job's rank 0 does when it ends as this rank connects).
struct SilentListener {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int port = 0;
  SilentListener() {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    EXPECT_EQ(::listen(fd, 16), 0);
    socklen_t size = sizeof address;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
    port = ntohs(address.sin_port);
  }
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  ~SilentListener() { close(); }
};

// A store whose connection is gone: c10d's own exception, not a cohort::Error.
struct ResetStore : c10d::HashStore {
  void set(const std::string&, const std::vector<uint8_t>&) override {
    throw std::system_error(ECONNRESET, std::system_category());
  }
};

}  // namespace

TEST(JobIdentity, LaunchersNameTheJob) {
  const EnvMap torchrun = {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}};
  EnvMap named = torchrun;
  named["TORCHELASTIC_RUN_ID"] = "3f2a";
  EXPECT_EQ(detect_launch_env(named).run_id, "3f2a");
  named["TORCHELASTIC_RUN_ID"] = "none";  // torchrun's default names nothing
  EXPECT_EQ(detect_launch_env(named).run_id, "");
  named["SLURM_JOB_ID"] = "77";
  named["SLURM_STEP_ID"] = "2";  // torchrun inside an srun step: the step names the job
  EXPECT_EQ(detect_launch_env(named).run_id, "slurm-77.2");
  EXPECT_EQ(detect_launch_env(torchrun).run_id, "");
  const EnvMap srun = {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_ID", "0"},
                       {"SLURM_JOB_ID", "4242"}, {"SLURM_NODELIST", "n1"}};
  EXPECT_EQ(detect_launch_env(srun).run_id, "slurm-4242.0");
  const EnvMap ompi = {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"OMPI_MCA_ess_base_jobid", "12345"}};
  EXPECT_EQ(detect_launch_env(ompi).run_id, "openmpi-12345");
}

TEST(JobIdentity, RankOfTheSameJobJoins) {
  const int port = cohort::testing::free_port();
  auto host = connect_store(rank_config(port, 0, "job-a"));
  auto peer = std::async(std::launch::async, [&] {
    auto store = connect_store(rank_config(port, 1, "job-a"));
    wait_for_all_ranks(*store, rank_config(port, 1, "job-a"));
  });
  wait_for_all_ranks(*host, rank_config(port, 0, "job-a"));
  peer.get();
}

TEST(JobIdentity, RankOfAnotherJobIsRefusedNamingBothJobs) {
  const int port = cohort::testing::free_port();
  auto host = connect_store(rank_config(port, 0, "job-a"));
  const std::string message = error_of([&] { connect_store(rank_config(port, 1, "job-b")); });
  EXPECT_THAT(message, HasSubstr("rendezvous at 127.0.0.1:" + std::to_string(port) +
                                 " belongs to job 'job-a', not to this rank's job 'job-b': two jobs were started "
                                 "on one MASTER_ADDR:MASTER_PORT; give each job its own port (cohortrun "
                                 "--master-port, or --standalone)"));
  // The stranger announced nothing in the other job's store.
  EXPECT_FALSE(host->check({"cohort/arrived/1"}));
}

// A rank whose launcher gave no run id is named in a sentence (it read "not to this rank's a job
// without a run id", issue 39).
TEST(JobIdentity, RankWithoutARunIdIsNamedInASentence) {
  const int port = cohort::testing::free_port();
  auto host = connect_store(rank_config(port, 0, "job-a"));
  EXPECT_THAT(error_of([&] { connect_store(rank_config(port, 1, "")); }),
              HasSubstr("rendezvous at 127.0.0.1:" + std::to_string(port) +
                        " belongs to job 'job-a', not to this rank, whose job has no run id: two jobs were started "
                        "on one MASTER_ADDR:MASTER_PORT"));
}

TEST(JobIdentity, AgentStoreFirstRankPublishesOthersCompare) {
  const int port = cohort::testing::free_port();
  c10d::TCPStoreOptions options;
  options.port = uint16_t(port);
  options.isServer = true;
  options.waitWorkers = false;
  c10d::TCPStore agent("127.0.0.1", options);  // torchrun's agent store
  RendezvousConfig first = rank_config(port, 1, "job-a"), stranger = rank_config(port, 0, "job-b");
  first.rank0_hosts = stranger.rank0_hosts = false;
  connect_store(first);
  EXPECT_THAT(error_of([&] { connect_store(stranger); }),
              HasSubstr("belongs to job 'job-a', not to this rank's job 'job-b'"));
}

TEST(JobIdentity, PortInUseNamesTheJobHoldingIt) {
  const int port = cohort::testing::free_port();
  auto holder = connect_store(rank_config(port, 0, "job-a"));
  EXPECT_THAT(error_of([&] { connect_store(rank_config(port, 0, "job-b")); }),
              HasSubstr("MASTER_PORT=" + std::to_string(port) + " is already in use on rank 0 (127.0.0.1) by "
                        "job 'job-a' (this is job 'job-b'): choose another port, or launch with cohortrun "
                        "--standalone which picks a free one"));
  // Two jobs without run ids: "by a job without a run id (this is a job without a run id)" did not read.
  const int other = cohort::testing::free_port();
  auto anonymous = connect_store(rank_config(other, 0, ""));
  EXPECT_THAT(error_of([&] { connect_store(rank_config(other, 0, "")); }),
              HasSubstr("MASTER_PORT=" + std::to_string(other) + " is already in use on rank 0 (127.0.0.1) by another "
                        "job without a run id: choose another port"));
}

// LibTorch 1.13's TCPStore client aborted the whole process ("terminate called after throwing an
// instance of 'std::system_error' ... Connection reset by peer") when the listener it had just
// connected to closed before accepting: a rank 0 that found its port held by another job that was
// ending, and asked it whose it was. The question now fails as an answer, and the process lives on.
TEST(JobIdentity, AStoreThatClosesBeforeAcceptingIsNoAnswerNotACrash) {
  SilentListener listener;
  std::thread closer([&] {
    std::this_thread::sleep_for(300ms);
    listener.close();
  });
  EXPECT_EQ(job_listening_at("127.0.0.1", listener.port, 2000ms), std::nullopt);
  closer.join();
  std::this_thread::sleep_for(500ms);  // long enough for a c10d callback thread to meet the reset
  EXPECT_EQ(job_listening_at("127.0.0.1", listener.port, 500ms), std::nullopt);  // and nothing listens now
}

// A rank that first meets a listener which vanishes (another job's rank 0 ending) joins its own job's
// store once that appears on the port, within its one deadline.
TEST(JobIdentity, RankJoinsItsJobAfterAStrangersListenerVanished) {
  SilentListener listener;
  const int port = listener.port;
  std::promise<void> joined;
  auto host = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(300ms);
    listener.close();
    std::this_thread::sleep_for(200ms);
    auto store = connect_store(rank_config(port, 0, "job-a"));
    wait_for_all_ranks(*store, rank_config(port, 0, "job-a"));
    joined.get_future().wait();  // rank 0's store outlives rank 1's last poll, as in a job
  });
  RendezvousConfig joining = rank_config(port, 1, "job-a");
  joining.timeout = 10000ms;
  auto store = connect_store(joining);
  const auto release_host = [&] { joined.set_value(); };
  try {
    wait_for_all_ranks(*store, joining);
  } catch (...) {
    release_host();
    throw;
  }
  release_host();
  host.get();
}

// Whose store listens at a port is read from its greeting, before this rank proves anything.
TEST(JobIdentity, StoreGreetingIsReadOrSaysWhyNot) {
  StoreServerOptions options;
  options.bind_address = "127.0.0.1";
  options.secret = "s";
  options.run_id = "job-a";
  StoreServer server(options);
  const StoreHello read = read_store_hello("127.0.0.1", server.port(), 2000ms);
  EXPECT_EQ(read.run_id, std::optional<std::string>("job-a")) << read.failure;
  SilentListener silent;  // accepts in the kernel, never answers
  const auto start = std::chrono::steady_clock::now();
  const StoreHello unanswered = read_store_hello("127.0.0.1", silent.port, 500ms);
  EXPECT_FALSE(unanswered.run_id);
  EXPECT_THAT(unanswered.failure, HasSubstr("no answer before the deadline"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s) << "a silent listener is given up at the timeout";
  silent.close();
  EXPECT_THAT(read_store_hello("127.0.0.1", silent.port, 500ms).failure,
              HasSubstr("nothing accepted a connection at 127.0.0.1:" + std::to_string(silent.port)));
}

// c10d's and Gloo's own exceptions while joining become one cohort::Error saying which step failed.
TEST(JobIdentity, StoreFailureWhileJoiningIsACohortError) {
  const std::string message = error_of([] {
    cohort::init(cohort::InitOptions().rank(0).world_size(2).master_addr("127.0.0.1").master_port(29999).store(
        c10::make_intrusive<ResetStore>()));
  });
  EXPECT_THAT(message, HasSubstr("joining the world at 127.0.0.1:29999 failed while waiting for every rank to "
                                 "arrive: Connection reset by peer"));
}

TEST(JobIdentity, UnresolvableMasterAddrIsNamedAtOnce) {
  RendezvousConfig config = rank_config(cohort::testing::free_port(), 1, "job-a");
  config.master_addr = "no.such.host.invalid";
  config.timeout = std::chrono::milliseconds(10000);  // the old code retried this long, then blamed rank 0
  const std::string message = error_of([&] { connect_store(config); });
  EXPECT_THAT(message, HasSubstr("MASTER_ADDR=no.such.host.invalid does not resolve ("));
  EXPECT_THAT(message, HasSubstr("): rank 1 cannot find the rendezvous; export rank 0's host name or address"));
}

TEST(JobIdentity, ControlPlaneRefusesAPeerOfAnotherJob) {
  c10d::HashStore store;
  const auto plane = [&](int rank, const std::string& run_id) {
    return std::async(std::launch::async, [&store, rank, run_id] {
      return error_of([&] {
        ControlPlane cp(store, ControlPlaneConfig{"t", rank, 2, "127.0.0.1", 5000ms, run_id});
      });
    });
  };
  auto zero = plane(0, "job-a"), one = plane(1, "job-b");
  const std::string hint = ": two jobs share one rendezvous (MASTER_ADDR:MASTER_PORT); give each job its own port";
  EXPECT_THAT(zero.get(), HasSubstr("control plane: rank 0 of job 'job-a' was dialled by rank 1 of job 'job-b'" +
                                    hint));
  const std::string dialler = one.get();
  EXPECT_THAT(dialler, HasSubstr("control plane: rank 1 of job 'job-b' dialled rank 0 at 127.0.0.1:"));
  EXPECT_THAT(dialler, HasSubstr(" and found job 'job-a'" + hint));
}

// The peers also tell each other their host names in the handshake (what failures name).
TEST(JobIdentity, ControlPlaneConnectsPeersOfOneJob) {
  c10d::HashStore store;
  auto one = std::async(std::launch::async, [&] {
    ControlPlane cp(store, ControlPlaneConfig{"t", 1, 2, "127.0.0.1", 5000ms, ""});
    AgreeResult result;
    return std::make_pair(cp.agree(0, 7, Clock::now() + 5s, result).has_value(), cp.host_of(0));
  });
  ControlPlane cp(store, ControlPlaneConfig{"t", 0, 2, "127.0.0.1", 5000ms, ""});
  AgreeResult result;
  EXPECT_FALSE(cp.agree(0, 7, Clock::now() + 5s, result).has_value());
  const auto [failed, host_seen_by_one] = one.get();
  EXPECT_FALSE(failed);
  EXPECT_TRUE(result.agreed());
  char host[256] = {0};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  EXPECT_EQ(cp.host_of(0), host);
  EXPECT_EQ(cp.host_of(1), host);
  EXPECT_EQ(host_seen_by_one, host);
}

}  // namespace job_identity_test
