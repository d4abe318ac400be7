// DDP communication hooks (cohort/comm_hooks.h) on 2 rank processes: fp16/bf16 compression is bit for
// bit the allreduce of manually cast gradients; PowerSGD is plain DDP before its start iteration and
// afterwards a reference computation of the algorithm (written here, in double, from every rank's
// local gradients); batched PowerSGD at full rank is the exact average; error feedback makes the
// accumulated gradient converge; a synthetic problem trains as well as with plain DDP.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <random>

#include "cohort/comm_hooks.h"
#include "cohort/ddp.h"
#include "cohort/world.h"
#include "ddp/powersgd_math.h"
#include "support/multiproc.h"
#include "support/small_models.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace ddp_comm_hook_test {

using ::testing::HasSubstr;
using cohort::testing::Mlp;
using cohort::testing::report;
using cohort::testing::run_ranks;
using torch::Tensor;

namespace {

constexpr int kBatch = 8;

// One backward of `net` on this rank's rows of a global batch drawn from `seed`.
void backward_on(const std::shared_ptr<cohort::testing::MlpImpl>& net, int rank, int size, int seed) {
  torch::manual_seed(seed);
  const auto x = torch::randn({int64_t(size) * kBatch, 20});
  const auto y = torch::randint(0, 5, {int64_t(size) * kBatch}, torch::kLong);
  net->zero_grad();
  torch::nn::functional::cross_entropy(net->forward(x.narrow(0, rank * kBatch, kBatch)),
                                       y.narrow(0, rank * kBatch, kBatch))
      .backward();
}

std::vector<Tensor> grads_of(const Mlp& net) {
  std::vector<Tensor> out;
  for (const auto& p : net->parameters()) out.push_back(p.grad().detach().clone());
  return out;
}

// Every rank's local gradients, in parameter order: result[r][i].
std::vector<std::vector<Tensor>> gather_local(cohort::Comm& comm, const std::vector<Tensor>& local) {
  std::vector<std::vector<Tensor>> out(size_t(comm.size()));
  for (const auto& g : local) {
    const Tensor all = comm.allgather(g);
    for (int r = 0; r < comm.size(); ++r) out[size_t(r)].push_back(all[r].clone());
  }
  return out;
}

void expect_cast_hook_exact(int rank, int size, torch::ScalarType dtype) {
  torch::manual_seed(1);
  Mlp model;
  torch::manual_seed(1);
  Mlp plain;
  cohort::DistributedDataParallel ddp(model);
  ddp.register_comm_hook(dtype == torch::kHalf ? cohort::comm_hooks::fp16_compress()
                                                : cohort::comm_hooks::bf16_compress());
  const cohort::World world = cohort::init();
  cohort::Comm& comm = world.comm();
  for (int step = 0; step < 3; ++step) {  // the first step reduces at its end (rebuild), the others overlap
    backward_on(model.ptr(), rank, size, 100 + step);
    backward_on(plain.ptr(), rank, size, 100 + step);
    const auto got = grads_of(model), local = grads_of(plain);
    for (size_t i = 0; i < local.size(); ++i) {
      Tensor expected = local[i].to(dtype).div_(size);
      comm.allreduce(expected);
      expected = expected.to(torch::kFloat);
      EXPECT_TRUE(torch::equal(got[i], expected)) << "step " << step << " parameter " << i << " dtype " << dtype
                                                  << ": max diff " << (got[i] - expected).abs().max().item<double>();
    }
  }
}

}  // namespace

TEST(DdpCommHook, Fp16AndBf16EqualTheAllreduceOfManuallyCastGradients) {
  run_ranks(2, [](int rank, int size) {
    cohort::init();
    expect_cast_hook_exact(rank, size, torch::kHalf);
    expect_cast_hook_exact(rank, size, torch::kBFloat16);
  });
}

namespace {

using Matrix = Tensor;  // double

// Gram-Schmidt on the columns of a [n, r] double matrix (the reference's own, not the library's).
Matrix orthonormal_columns(Matrix m) {
  for (int64_t i = 0; i < m.size(1); ++i) {
    Tensor col = m.select(1, i);
    for (int64_t j = 0; j < i; ++j) col -= (m.select(1, j) * col).sum() * m.select(1, j);
    col /= col.norm();
  }
  return m;
}

// PowerSGD on every rank's gradients at once (powerSGD_hook's algorithm, rank 2, warm start, error
// feedback, min_compression_rate 2), in double: what every rank's averaged gradient must be.
struct ReferencePowerSgd {
  int64_t rank = 2;
  std::vector<std::vector<Tensor>> errors;  // [rank of the world][parameter in bucket order]
  std::vector<Tensor> qs;                   // per parameter in bucket order; undefined: uncompressed

  std::vector<Tensor> step(const std::vector<std::vector<Tensor>>& local) {  // local[r][i], bucket order
    const size_t world = local.size(), count = local[0].size();
    if (errors.empty()) errors.assign(world, std::vector<Tensor>(count));
    std::vector<std::vector<Tensor>> m(world, std::vector<Tensor>(count));
    for (size_t r = 0; r < world; ++r)
      for (size_t i = 0; i < count; ++i) {
        const Tensor base = local[r][i].to(torch::kDouble);
        m[r][i] = errors[r][i].defined() ? base + errors[r][i] : base;
      }
    std::vector<Tensor> result(count);
    for (size_t i = 0; i < count; ++i) {
      const auto shape = m[0][i].sizes();
      if (!qs[i].defined()) {  // uncompressed: the plain mean (sum, then divide)
        Tensor sum = torch::zeros(shape, torch::kDouble);
        for (size_t r = 0; r < world; ++r) sum += m[r][i];
        result[i] = sum / double(world);
        continue;
      }
      const Matrix q = orthonormal_columns(qs[i].clone());
      Matrix p = torch::zeros({shape[0], rank}, torch::kDouble);
      for (size_t r = 0; r < world; ++r) p += m[r][i].reshape({shape[0], -1}).matmul(q);
      p = orthonormal_columns(p);
      Matrix new_q = torch::zeros_like(q);
      for (size_t r = 0; r < world; ++r) new_q += m[r][i].reshape({shape[0], -1}).t().matmul(p);
      qs[i] = new_q / double(world);
      result[i] = p.matmul(qs[i].t()).reshape(shape);
    }
    for (size_t r = 0; r < world; ++r)
      for (size_t i = 0; i < count; ++i) errors[r][i] = m[r][i] - result[i];
    return result;
  }
};

// The parameters of `net` in the order of its DDP's single bucket.
std::vector<int64_t> bucket_order(const cohort::DataParallelCore& ddp, const Mlp& net) {
  const auto layout = ddp.bucket_layout();
  EXPECT_EQ(layout.size(), 1u) << "the MLP fits one bucket";
  const auto names = net->named_parameters().keys();
  std::vector<int64_t> order;
  for (const auto& name : layout.at(0))
    order.push_back(std::find(names.begin(), names.end(), name) - names.begin());
  return order;
}

}  // namespace

TEST(DdpCommHook, PowerSgdIsPlainDdpBeforeItsStartAndThePowerSgdAlgorithmAfter) {
  run_ranks(2, [](int rank, int size) {
    const cohort::World world = cohort::init();
    cohort::Comm& comm = world.comm();
    constexpr int kStart = 2, kSteps = 5;
    torch::manual_seed(1);
    Mlp model, plain_ddp_model, local_model;
    for (auto* other : {&plain_ddp_model, &local_model}) {
      torch::NoGradGuard no_grad;
      auto from = model->parameters(), to = (*other)->parameters();
      for (size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
    }
    cohort::DistributedDataParallel ddp(model), plain_ddp(plain_ddp_model);
    ddp.register_comm_hook(cohort::comm_hooks::powersgd(
        cohort::PowerSGDOptions().matrix_approximation_rank(2).start_iteration(kStart).random_seed(7)));
    ReferencePowerSgd reference;
    std::vector<int64_t> order;
    for (int step = 0; step < kSteps; ++step) {
      backward_on(model.ptr(), rank, size, 200 + step);
      backward_on(plain_ddp_model.ptr(), rank, size, 200 + step);
      backward_on(local_model.ptr(), rank, size, 200 + step);
      const auto got = grads_of(model), plain = grads_of(plain_ddp_model);
      if (step < kStart) {
        for (size_t i = 0; i < got.size(); ++i)
          EXPECT_TRUE(torch::equal(got[i], plain[i])) << "step " << step << " (before the start) parameter " << i;
        continue;
      }
      if (order.empty()) {  // the first compressed step: the reference's random Qs, as the hook draws them
        order = bucket_order(ddp, model);
        std::mt19937 rng(7);
        std::vector<Tensor> draws;
        for (int64_t p : order) {
          const Tensor g = got[size_t(p)];
          const bool compress = g.dim() == 2 && cohort::detail::should_compress(g.size(0), g.size(1), 2, 2.0);
          reference.qs.push_back(compress ? torch::empty({g.size(1), 2}) : Tensor());
          if (compress) draws.push_back(reference.qs.back());
        }
        cohort::detail::fill_standard_normal(draws, cohort::detail::draw_seed(rng));
        for (auto& q : reference.qs) q = q.defined() ? q.to(torch::kDouble) : q;
        EXPECT_EQ(draws.size(), 3u) << "the three weight matrices are compressed, the biases not";
      }
      const auto all = gather_local(comm, grads_of(local_model));
      std::vector<std::vector<Tensor>> local(all.size());
      for (size_t r = 0; r < all.size(); ++r)
        for (int64_t p : order) local[r].push_back(all[r][size_t(p)]);
      const auto expected = reference.step(local);
      for (size_t k = 0; k < order.size(); ++k) {
        const Tensor& g = got[size_t(order[k])];
        const double scale = expected[k].abs().max().item<double>();
        const double diff = (g.to(torch::kDouble) - expected[k]).abs().max().item<double>();
        EXPECT_LT(diff, 1e-4 * scale + 1e-7) << "step " << step << " parameter " << order[k] << " (scale " << scale << ")";
        if (reference.qs[k].defined())
          EXPECT_GT((g - plain[size_t(order[k])]).abs().max().item<double>(), 1e-4 * scale)
              << "step " << step << " parameter " << order[k] << ": rank-2 compression changed nothing";
      }
    }
  });
}

TEST(DdpCommHook, BatchedPowerSgdAtFullRankIsTheExactAverage) {
  // P = M Q with an orthogonal square Q, then P orthogonalized: P P^T = I, so P Q'^T is the average.
  run_ranks(2, [](int rank, int size) {
    cohort::init();
    torch::manual_seed(1);
    Mlp model, plain_model;
    {
      torch::NoGradGuard no_grad;
      auto from = model->parameters(), to = plain_model->parameters();
      for (size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
    }
    cohort::DistributedDataParallel ddp(model), plain_ddp(plain_model);
    ddp.register_comm_hook(cohort::comm_hooks::batched_powersgd(
        cohort::PowerSGDOptions().matrix_approximation_rank(100000).start_iteration(1)));
    for (int step = 0; step < 3; ++step) {
      backward_on(model.ptr(), rank, size, 300 + step);
      backward_on(plain_model.ptr(), rank, size, 300 + step);
      const auto got = grads_of(model), expected = grads_of(plain_model);
      for (size_t i = 0; i < got.size(); ++i) {
        const double diff = (got[i] - expected[i]).abs().max().item<double>();
        EXPECT_LT(diff, 1e-5) << "step " << step << " parameter " << i;
      }
    }
  });
}

namespace {

// A parameter whose gradient is a fixed matrix of this rank: a strong rank-1 part plus noise.
struct ConstantGradientImpl : torch::nn::Module {
  explicit ConstantGradientImpl(int rank) {
    weight = register_parameter("weight", torch::zeros({16, 12}));
    torch::manual_seed(50);
    const Tensor u = torch::randn({16, 1}), v = torch::randn({1, 12});
    torch::manual_seed(60 + rank);
    target = 3 * u.matmul(v) + torch::randn({16, 12});
  }
  Tensor forward() { return (weight * target).sum(); }
  Tensor weight, target;
};
TORCH_MODULE(ConstantGradient);

// |sum of the applied gradients - steps x the true mean| / |steps x the true mean| after each step.
std::vector<double> accumulated_error(int rank, bool error_feedback, int steps) {
  ConstantGradient net(rank);
  cohort::DistributedDataParallel ddp(net);
  ddp.register_comm_hook(cohort::comm_hooks::powersgd(cohort::PowerSGDOptions().start_iteration(0).use_error_feedback(error_feedback)));
  const cohort::World world = cohort::init();
  cohort::Comm& comm = world.comm();
  const Tensor mean = comm.allreduce(net->target.clone()) / comm.size();
  Tensor applied = torch::zeros_like(mean);
  std::vector<double> out;
  for (int k = 1; k <= steps; ++k) {
    net->zero_grad();
    net->forward().backward();
    applied += net->weight.grad();
    out.push_back(((applied - k * mean).norm() / (k * mean).norm()).item<double>());
  }
  return out;
}

}  // namespace

TEST(DdpCommHook, PowerSgdErrorFeedbackMakesTheAccumulatedGradientConverge) {
  run_ranks(2, [](int rank, int) {
    cohort::init();
    constexpr int kSteps = 20;
    const auto with = accumulated_error(rank, true, kSteps), without = accumulated_error(rank, false, kSteps);
    report("error feedback: " + std::to_string(with.front()) + " -> " + std::to_string(with.back()) +
           "; without: " + std::to_string(without.front()) + " -> " + std::to_string(without.back()));
    EXPECT_GT(without.back(), 0.05) << "rank-1 compression of a noisy matrix must lose something";
    // Measured on 2 ranks: 0.33 after the first step, 0.195 after 20 with error feedback, 0.26 without.
    EXPECT_LT(with.back(), 0.9 * without.back()) << "error feedback should shrink the accumulated error";
    EXPECT_LT(with.back(), 0.75 * with.front()) << "with error feedback the accumulated error should fall";
  });
}

namespace {

// Trains the MLP on a fixed synthetic task (labels from a random linear teacher) on 2 ranks, with
// `hook` (or none); returns the final loss over all the data.
double train_synthetic(int rank, int size, std::shared_ptr<cohort::CommHook> hook) {
  torch::manual_seed(5);
  Mlp net;
  cohort::DistributedDataParallel ddp(net);
  if (hook) ddp.register_comm_hook(hook);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::manual_seed(6);
  const Tensor teacher = torch::randn({20, 5});
  const Tensor x = torch::randn({1024, 20});
  const Tensor y = x.matmul(teacher).argmax(1);
  constexpr int64_t kRows = 32;
  for (int step = 0; step < 120; ++step) {
    const int64_t at = (step * size + rank) * kRows % x.size(0);
    opt.zero_grad();
    torch::nn::functional::cross_entropy(ddp(x.narrow(0, at, kRows)), y.narrow(0, at, kRows)).backward();
    opt.step();
  }
  torch::NoGradGuard no_grad;
  return torch::nn::functional::cross_entropy(net->forward(x), y).item<double>();
}

}  // namespace

TEST(DdpCommHook, PowerSgdTrainsASyntheticTaskAsWellAsPlainDdp) {
  run_ranks(2, [](int rank, int size) {
    cohort::init();
    const double plain = train_synthetic(rank, size, nullptr);
    const double compressed = train_synthetic(
        rank, size, cohort::comm_hooks::powersgd(cohort::PowerSGDOptions().matrix_approximation_rank(2).start_iteration(10)));
    report("final loss: plain " + std::to_string(plain) + ", powersgd " + std::to_string(compressed));
    EXPECT_LT(plain, 0.5) << "the task should be learnable";
    EXPECT_LT(compressed, plain + 0.1) << "PowerSGD rank 2 should train about as well as plain DDP";
  });
}

TEST(DdpCommHook, RefusesASecondHookAndBadOptionsInOneLine) {
  cohort::init();  // a world of one: DDP reduces nothing, registration is still checked
  Mlp net;
  cohort::DistributedDataParallel ddp(net);
  auto hook = cohort::comm_hooks::fp16_compress();
  ddp.register_comm_hook(hook);
  try {
    ddp.register_comm_hook(cohort::comm_hooks::bf16_compress());
    ADD_FAILURE() << "a second hook was accepted";
  } catch (const cohort::Error& e) {
    EXPECT_STREQ(e.what(), "DistributedDataParallel::register_comm_hook: a comm hook (fp16_compress) is already "
                           "registered; register_comm_hook can be called once per DDP, as in PyTorch");
  }
  Mlp other;
  cohort::DistributedDataParallel other_ddp(other);
  try {
    other_ddp.register_comm_hook(hook);
    ADD_FAILURE() << "a hook of another DDP was accepted";
  } catch (const cohort::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("the fp16_compress hook is already registered with a DistributedDataParallel"));
  }
  try {
    cohort::comm_hooks::powersgd(cohort::PowerSGDOptions().matrix_approximation_rank(0));
    ADD_FAILURE() << "rank 0 was accepted";
  } catch (const cohort::Error& e) {
    EXPECT_STREQ(e.what(), "PowerSGDOptions.matrix_approximation_rank must be at least 1, got 0");
  }
  try {
    cohort::comm_hooks::batched_powersgd(cohort::PowerSGDOptions().random_seed(-1));
    ADD_FAILURE() << "a negative seed was accepted";
  } catch (const cohort::Error& e) {
    EXPECT_STREQ(e.what(), "PowerSGDOptions.random_seed must be from 0 to 4294967295 (numpy's seed range), got -1");
  }
}

TEST(PowerSgdMath, SeedsAreNumpysRandintAndQsAreTorchRandn) {
  // numpy.random.RandomState(0).randint(10**9) three times; RandomState(12345) likewise.
  std::mt19937 zero(0), other(12345);
  EXPECT_EQ(cohort::detail::draw_seed(zero), 209652396);
  EXPECT_EQ(cohort::detail::draw_seed(zero), 398764591);
  EXPECT_EQ(cohort::detail::draw_seed(zero), 924231285);
  EXPECT_EQ(cohort::detail::draw_seed(other), 771445218);
  std::vector<Tensor> qs{torch::empty({5, 2}), torch::empty({40, 2})};
  cohort::detail::fill_standard_normal(qs, 209652396);
  torch::manual_seed(209652396);  // PyTorch: torch.manual_seed(seed), then torch.randn per Q
  const Tensor a = torch::randn({5, 2}), b = torch::randn({40, 2});
  EXPECT_TRUE(torch::equal(qs[0], a));
  EXPECT_TRUE(torch::equal(qs[1], b));
  EXPECT_EQ(cohort::detail::square_side(1), 1);
  EXPECT_EQ(cohort::detail::square_side(2117), 47);
  EXPECT_EQ(cohort::detail::square_side(2116), 46);
  Tensor zero_column = torch::zeros({1, 4, 2});
  cohort::detail::orthogonalize(zero_column, 0.0);
  EXPECT_TRUE(torch::equal(zero_column, torch::zeros({1, 4, 2}))) << "a zero column stays zero, not NaN";
}

}  // namespace ddp_comm_hook_test
