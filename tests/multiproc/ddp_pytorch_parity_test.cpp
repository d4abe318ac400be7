// Cross-check of cohort's DistributedDataParallel against PyTorch's own Python DDP: 2 cohort ranks
// train a model from fixed weights on fixed data, rank 0 saves initial weights, data and final weights
// (torch::pickle_save, read by torch.load), then tests/python/ddp_reference.py trains the same model
// under torch.nn.parallel.DistributedDataParallel on 2 Gloo processes and compares rank 0's weights.
// Needs Debian's /usr/bin/python3 with python3-torch (the same LibTorch 1.13); fails, never skips. The
// PowerSGD case also needs numpy (PyTorch's hook imports it): Debian's python3-torch brings
// python3-numpy and the 2.11 venv has it; a Python without it skips that case, saying so.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cohort/comm_hooks.h"
#include "cohort/ddp.h"
#include "cohort/world.h"
#include "support/multiproc.h"
#include "support/python.h"
#include "support/small_models.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace ddp_pytorch_parity_test {

using cohort::testing::is_rank_process;
using cohort::testing::run_ranks;

namespace {

constexpr const char* kDirVariable = "COHORT_PARITY_DIR";
constexpr int kPythonTimeoutSeconds = 120;  // a hung Gloo rendezvous fails the test instead of hanging it
constexpr int kWorldSize = 2, kSteps = 10, kBatch = 8;  // kBatch: rows per rank per step
constexpr double kLr = 0.05, kMomentum = 0.9, kTolerance = 1e-5;
constexpr int kPowerSgdStart = 2, kPowerSgdSeed = 7;

using cohort::testing::Cnn;
using cohort::testing::CnnImpl;
using cohort::testing::Mlp;

std::string reference_script() {
  const char* root = std::getenv("COHORT_SOURCE_DIR");
  if (root != nullptr && *root != '\0') return std::string(root) + "/tests/python/ddp_reference.py";
  std::string here = __FILE__;  // tests/multiproc/ddp_pytorch_parity_test.cpp
  here = here.substr(0, here.find_last_of('/'));
  return here.substr(0, here.find_last_of('/')) + "/python/ddp_reference.py";
}

// Parameters and buffers by name, as one dict: torch.load gives Python a {name: tensor} dict.
c10::Dict<std::string, torch::Tensor> state_of(const torch::nn::Module& module) {
  c10::Dict<std::string, torch::Tensor> state;
  for (const auto& item : module.named_parameters()) state.insert(item.key(), item.value().detach().clone());
  for (const auto& item : module.named_buffers()) state.insert(item.key(), item.value().detach().clone());
  return state;
}

void save(const c10::IValue& value, const std::string& path) {
  const std::vector<char> bytes = torch::pickle_save(value);
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

// One rank: trains kSteps of SGD with momentum under cohort DDP; rank r takes rows r*B..(r+1)*B of
// each global batch. Rank 0 saves init.pt, data.pt ({"x": [steps, W*B, ...], "y": [steps, W*B]}) and
// final.pt into $COHORT_PARITY_DIR.
template <typename Holder>
void train_and_save(int rank, int size, const std::vector<int64_t>& sample_shape, int powersgd_rank) {
  const std::string dir = std::getenv(kDirVariable);
  cohort::init();
  torch::manual_seed(1);
  Holder model;
  torch::manual_seed(100);  // the same global batches on every rank
  std::vector<int64_t> x_shape{kSteps, int64_t(size) * kBatch};
  x_shape.insert(x_shape.end(), sample_shape.begin(), sample_shape.end());
  const auto xs = torch::randn(x_shape);
  const auto ys = torch::randint(0, 5, {kSteps, int64_t(size) * kBatch}, torch::kLong);
  if (rank == 0) {
    save(state_of(*model), dir + "/init.pt");
    c10::Dict<std::string, torch::Tensor> data;
    data.insert("x", xs);
    data.insert("y", ys);
    save(data, dir + "/data.pt");
  }
  cohort::DistributedDataParallel ddp(model);
  if (powersgd_rank > 0)
    ddp.register_comm_hook(cohort::comm_hooks::powersgd(cohort::PowerSGDOptions()
                                                            .matrix_approximation_rank(powersgd_rank)
                                                            .start_iteration(kPowerSgdStart)
                                                            .random_seed(kPowerSgdSeed)));
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(kLr).momentum(kMomentum));
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad();
    const auto x = xs[step].narrow(0, rank * kBatch, kBatch), y = ys[step].narrow(0, rank * kBatch, kBatch);
    torch::nn::functional::cross_entropy(ddp(x), y).backward();
    opt.step();
  }
  if (rank == 0) save(state_of(*model), dir + "/final.pt");
}

// Runs `command`; returns stdout and stderr together, `status` gets pclose's status.
std::string run_command(const std::string& command, int* status) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    *status = -1;
    return "";
  }
  std::string output;
  char buffer[4096];
  for (size_t got; (got = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) output.append(buffer, got);
  *status = pclose(pipe);
  return output;
}

// The number after `key` on the line that starts with it, or -1 when there is none.
double value_after(const std::string& output, const std::string& key) {
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(key.size()));
  return -1;
}

template <typename Holder>
void check_parity(const std::string& model_name, const std::vector<int64_t>& sample_shape, int powersgd_rank = 0) {
  const auto body = [&](int rank, int size) { train_and_save<Holder>(rank, size, sample_shape, powersgd_rank); };
  if (is_rank_process()) {  // a rank re-runs this test body: run_ranks calls body and exits
    run_ranks(kWorldSize, body);
    return;
  }
  const std::string python = cohort::testing::python_with_torch();
  ASSERT_EQ(access(python.c_str(), X_OK), 0)
      << python << " not found: this test compares cohort's DDP with PyTorch's Python DDP and needs "
      << "Debian's python3 with python3-torch (apt-get install python3-torch)";
  const std::string script = reference_script();
  ASSERT_EQ(access(script.c_str(), R_OK), 0) << "reference script not found: " << script;
  char dir_template[] = "/tmp/cohort-ddp-parity-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr) << "mkdtemp failed";
  const std::string dir = dir_template;

  const auto start = std::chrono::steady_clock::now();
  cohort::testing::RanksOptions options;
  options.env[kDirVariable] = dir;
  run_ranks(kWorldSize, body, options);
  ASSERT_FALSE(::testing::Test::HasFailure()) << "the cohort ranks failed; files kept in " << dir;
  const auto trained = std::chrono::steady_clock::now();

  std::ostringstream command;
  command << "timeout -k 5 " << kPythonTimeoutSeconds << " " << python << " " << script << " --dir " << dir << " --model " << model_name << " --world-size "
          << kWorldSize << " --steps " << kSteps << " --batch " << kBatch << " --lr " << kLr << " --momentum "
          << kMomentum << " --tolerance " << kTolerance;
  if (powersgd_rank > 0)
    command << " --powersgd-rank " << powersgd_rank << " --powersgd-start " << kPowerSgdStart << " --powersgd-seed "
            << kPowerSgdSeed;
  int status = 0;
  const std::string output = run_command(command.str(), &status);
  const auto compared = std::chrono::steady_clock::now();
  const int exit_code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  const double diff = value_after(output, "max-abs-diff: ");
  const double change = value_after(output, "max-abs-change: ");
  const auto seconds = [](auto from, auto to) { return std::chrono::duration<double>(to - from).count(); };
  std::cout << "[" << model_name << "] max-abs-diff " << diff << ", max-abs-change " << change << "; cohort "
            << seconds(start, trained) << " s, python " << seconds(trained, compared) << " s\n";

  EXPECT_EQ(exit_code, 0) << command.str() << "\nexited " << exit_code
                          << (exit_code == 2 ? " (environment problem: is python3-torch installed?)" : "")
                          << (exit_code == 124 ? " (killed after the timeout)" : "")
                          << "; files kept in " << dir << ". Output:\n" << output.substr(0, 4000);
  ASSERT_GE(diff, 0) << "no 'max-abs-diff:' line in the output:\n" << output.substr(0, 4000);
  EXPECT_LT(diff, kTolerance) << "cohort DDP and PyTorch DDP disagree after " << kSteps
                              << " steps (per-tensor differences in the output above)";
  // The comparison means something only if training moved the weights.
  EXPECT_GT(change, 1e-3) << "training barely changed the weights; output:\n" << output.substr(0, 4000);
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir);
}

}  // namespace

TEST(DdpPytorchParity, MlpMatchesPythonDdp) { check_parity<Mlp>("mlp", {20}); }
TEST(DdpPytorchParity, CnnWithBatchNormMatchesPythonDdp) { check_parity<Cnn>("cnn", {1, 8, 8}); }

TEST(DdpPytorchParity, MlpWithPowerSgdMatchesPythonPowerSgdHook) {
  // The same random draws (numpy's RandomState, torch.manual_seed), P/Q steps, error feedback and warm start.
  if (!is_rank_process()) {
    const std::string python = cohort::testing::python_with_torch();
    if (std::system((python + " -c 'import numpy' > /dev/null 2>&1").c_str()) != 0)
      GTEST_SKIP() << python << " has no numpy, which PyTorch's powerSGD_hook imports (apt-get install "
                   << "python3-numpy, or point COHORT_PYTHON at a Python with torch and numpy)";
  }
  check_parity<Mlp>("mlp", {20}, /*powersgd_rank=*/2);
}

}  // namespace ddp_pytorch_parity_test
