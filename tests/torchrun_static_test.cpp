// A cohort program under Python's torchrun in its default (static) rendezvous: the torchrun agent
// hosts the store at MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True), so every rank, rank 0 too,
// must connect to it as a client. Debian's torchrun needs --redirects 2 --tee 2 on Python 3.11.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "support/multiproc.h"
#include "support/python.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace torchrun_static_test {

namespace {

std::string run_command(const std::string& command, int& status) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  std::array<char, 4096> chunk;
  while (pipe && std::fgets(chunk.data(), chunk.size(), pipe)) output += chunk.data();
  status = pipe ? ::pclose(pipe) : -1;
  return output;
}

}  // namespace

TEST(TorchrunStatic, WorkersJoinTheAgentsStore) {
  const char* build = std::getenv("COHORT_BUILD_DIR");
  ASSERT_NE(build, nullptr) << "run under ctest (COHORT_BUILD_DIR names the build directory)";
  const std::string worker = std::string(build) + "/tests/workers/cohortrun_collective_worker";
  const int port = cohort::testing::free_port();
  int status = 0;
  const std::string output = run_command(
      "timeout 120 " + cohort::testing::python_with_torch() + " -m torch.distributed.run --redirects 2 --tee 2 --nproc_per_node 2 "
      "--master_port " + std::to_string(port) + " --no_python " + worker, status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_THAT(output, ::testing::HasSubstr("RESULT rank=0 size=2 sum=1"));
  EXPECT_THAT(output, ::testing::HasSubstr("RESULT rank=1 size=2 sum=1"));
}

}  // namespace torchrun_static_test
