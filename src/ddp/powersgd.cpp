// PowerSGD gradient compression as a DDP comm hook (PyTorch's powerSGD_hook and batched_powerSGD_hook):
// plain averaging until start_iteration, then per bucket: add last step's error, P = M Q, allreduce P
// (with the uncompressed tensors), orthogonalize P, Q = M^T P, allreduce Q, M ~ P Q^T / divisor, and
// keep the new local error and Q for the next step. Three stages, advanced by DDP in bucket order.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "cohort/comm_hooks.h"
#include "core/check.h"
#include "core/log.h"
#include "ddp/comm_hook_util.h"
#include "ddp/powersgd_math.h"

namespace cohort {
namespace {

using torch::Tensor;

// The compressed side of one step of one bucket: matrices [b, n, m] (views of the bucket, or stacked
// copies of same-shaped ones) with their P [b, n, r] and Q [b, m, r] views into the bucket's memory.
struct Batches {
  std::vector<Tensor> matrices, ps, qs;
  std::vector<std::vector<Tensor>> stacked_from;  // per batch: the views a stacked copy goes back to
  std::vector<Tensor> uncompressed;               // gradient views reduced whole
};

struct Memory {
  Tensor error;  // this rank's compression error of the last step (error feedback)
  Tensor p, q;   // the low-rank factors, flat; q is the warm start
};

// kLayerwise: powerSGD_hook (a matrix per tensor); kBatched: batched_powerSGD_hook (one per bucket).
enum class Variant { kLayerwise, kBatched };

class PowerSgdHook : public CommHook {
 public:
  PowerSgdHook(PowerSGDOptions options, Variant variant)
      : options_(std::move(options)), batched_(variant == Variant::kBatched), rng_(uint32_t(options_.random_seed())) {}

  HookFuture run(Comm& comm, const GradBucket& bucket) override {
    const bool compress = iteration_ >= options_.start_iteration();
    if (compress && bucket.index == 0 && iteration_ == options_.start_iteration())
      COHORT_INFO(name(), ": compression starts at iteration ", iteration_, " (rank ",
                  options_.matrix_approximation_rank(), ")");
    if (bucket.is_last) ++iteration_;  // PyTorch's maybe_increase_iter: one step per last bucket
    if (!compress) return detail::allreduce_average(comm, bucket);
    torch::NoGradGuard no_grad;
    return batched_ ? run_batched(comm, bucket) : run_layerwise(comm, bucket);
  }
  std::string name() const override { return batched_ ? "batched_powersgd" : "powersgd"; }

 private:
  // Adds the last error to `input` (the bucket, or batched's padded copy) and returns a copy of the sum.
  Tensor add_error(Memory& memory, Tensor& input) {
    if (!options_.use_error_feedback()) return Tensor();
    if (memory.error.defined()) input.add_(memory.error);
    else memory.error = torch::zeros_like(input);
    return input.clone();
  }

  Batches plan(const GradBucket& bucket) const;
  HookFuture run_layerwise(Comm& comm, const GradBucket& bucket);
  HookFuture run_batched(Comm& comm, const GradBucket& bucket);
  void finish(Memory& memory, const Tensor& input_copy, const Tensor& result);

  PowerSGDOptions options_;
  bool batched_;
  std::mt19937 rng_;
  int64_t iteration_ = 0;
  std::map<int64_t, Memory> memory_;  // by bucket index; a map, so continuations' references stay valid
};

// Splits the bucket's gradients into compressed and uncompressed ones, and groups the compressed by
// shape in order of first appearance (PyTorch's order of Ps and Qs, hence of the random draws).
Batches PowerSgdHook::plan(const GradBucket& bucket) const {
  Batches out;
  std::vector<std::vector<Tensor>> by_shape;
  for (const auto& gradient : bucket.gradients) {
    const int64_t rows = gradient.dim() == 0 ? 1 : gradient.size(0);
    const Tensor matrix = gradient.reshape({rows, -1});
    const int64_t cols = matrix.size(1);
    const int64_t rank = std::min({rows, cols, options_.matrix_approximation_rank()});
    if (!detail::should_compress(rows, cols, rank, options_.min_compression_rate())) {
      out.uncompressed.push_back(gradient);
      continue;
    }
    auto same = std::find_if(by_shape.begin(), by_shape.end(),
                             [&](const auto& group) { return group[0].sizes() == matrix.sizes(); });
    if (same == by_shape.end()) by_shape.push_back({matrix});
    else same->push_back(matrix);
  }
  for (auto& group : by_shape) {
    if (options_.batch_tensors_with_same_shape() && group.size() > 1) {
      out.matrices.push_back(torch::stack(group));
      out.stacked_from.push_back(group);
      continue;
    }
    for (const auto& matrix : group) {
      out.matrices.push_back(matrix.unsqueeze(0));
      out.stacked_from.emplace_back();
    }
  }
  return out;
}

HookFuture PowerSgdHook::run_layerwise(Comm& comm, const GradBucket& bucket) {
  Memory& memory = memory_[bucket.index];
  Tensor input = bucket.buffer;
  const Tensor input_copy = add_error(memory, input);
  auto batches = std::make_shared<Batches>(plan(bucket));
  int64_t p_numel = 0, q_numel = 0;
  for (const auto& m : batches->matrices) {
    const int64_t rank = std::min({m.size(1), m.size(2), options_.matrix_approximation_rank()});
    p_numel += m.size(0) * m.size(1) * rank;
    q_numel += m.size(0) * m.size(2) * rank;
  }
  const bool fresh = !options_.warm_start() || !memory.q.defined();
  if (fresh) {
    memory.p = torch::empty({p_numel}, input.options());
    memory.q = torch::empty({q_numel}, input.options());
  }
  for (int64_t i = 0, p_at = 0, q_at = 0; i < int64_t(batches->matrices.size()); ++i) {
    const Tensor& m = batches->matrices[size_t(i)];
    const int64_t b = m.size(0), n = m.size(1), cols = m.size(2);
    const int64_t rank = std::min({n, cols, options_.matrix_approximation_rank()});
    batches->ps.push_back(memory.p.narrow(0, p_at, b * n * rank).view({b, n, rank}));
    batches->qs.push_back(memory.q.narrow(0, q_at, b * cols * rank).view({b, cols, rank}));
    p_at += b * n * rank;
    q_at += b * cols * rank;
  }
  // A fresh start draws a seed even for a bucket with nothing to compress, as PyTorch does, so later
  // buckets get PyTorch's draws.
  if (fresh) detail::fill_standard_normal(batches->qs, detail::draw_seed(rng_));
  const double epsilon = options_.orthogonalization_epsilon();
  for (const auto& q : batches->qs) detail::orthogonalize(q, epsilon);
  for (size_t i = 0; i < batches->matrices.size(); ++i)
    at::bmm_out(batches->ps[i], batches->matrices[i], batches->qs[i]);

  std::vector<Work> works;
  Tensor whole;  // the uncompressed tensors back to back
  if (!batches->uncompressed.empty()) {
    std::vector<Tensor> flat;
    for (const auto& t : batches->uncompressed) flat.push_back(t.reshape(-1));
    whole = torch::cat(flat);
    works.push_back(comm.allreduce_async(whole, ReduceOp::kSum));
  }
  if (p_numel > 0) works.push_back(comm.allreduce_async(memory.p, ReduceOp::kSum));
  const int64_t divisor = bucket.divisor;
  // Stage 2: the uncompressed tensors are averaged; P is orthogonalized and Q = M^T P is reduced.
  auto compute_q = [this, &comm, &memory, batches, whole, input, input_copy, divisor, epsilon, p_numel]() mutable {
    torch::NoGradGuard no_grad;
    if (whole.defined()) {
      whole.div_(divisor);
      int64_t at = 0;
      for (auto& t : batches->uncompressed) {
        t.copy_(whole.narrow(0, at, t.numel()).view(t.sizes()));
        at += t.numel();
      }
    }
    for (const auto& p : batches->ps) detail::orthogonalize(p, epsilon);
    for (size_t i = 0; i < batches->matrices.size(); ++i)
      at::bmm_out(batches->qs[i], batches->matrices[i].transpose(1, 2), batches->ps[i]);
    std::vector<Work> q_work;
    if (p_numel > 0) q_work.push_back(comm.allreduce_async(memory.q, ReduceOp::kSum));
    // Stage 3: M ~ P Q^T with the averaged Q, back into the bucket; the local error is kept.
    return HookFuture(std::move(q_work), [this, &memory, batches, input, input_copy, divisor]() {
      torch::NoGradGuard no_grad;
      if (memory.q.numel() > 0) memory.q.div_(divisor);
      for (size_t i = 0; i < batches->matrices.size(); ++i) {
        at::bmm_out(batches->matrices[i], batches->ps[i], batches->qs[i].transpose(1, 2));
        const auto& views = batches->stacked_from[i];
        for (size_t k = 0; k < views.size(); ++k) views[k].copy_(batches->matrices[i][int64_t(k)]);
      }
      finish(memory, input_copy, input);
      return HookFuture();
    });
  };
  return HookFuture(std::move(works), std::move(compute_q));
}

// The end of a compressed step: the error for the next one; without warm start the factors go.
void PowerSgdHook::finish(Memory& memory, const Tensor& input_copy, const Tensor& result) {
  if (options_.use_error_feedback()) at::sub_out(memory.error, input_copy, result);
  if (!options_.warm_start()) memory.p = memory.q = Tensor();
}

HookFuture PowerSgdHook::run_batched(Comm& comm, const GradBucket& bucket) {
  Memory& memory = memory_[bucket.index];
  const int64_t numel = bucket.buffer.numel();
  const int64_t side = detail::square_side(numel);
  const int64_t rank = std::min(side, options_.matrix_approximation_rank());
  // The bucket padded with zeros to side x side (the bucket itself cannot grow: gradients alias it).
  Tensor padded = torch::zeros({side * side}, bucket.buffer.options());
  padded.narrow(0, 0, numel).copy_(bucket.buffer);
  const Tensor input_copy = add_error(memory, padded);
  const Tensor matrix = padded.view({1, side, side});
  if (!options_.warm_start() || !memory.q.defined()) {
    memory.p = torch::empty({1, side, rank}, padded.options());
    memory.q = torch::empty({1, side, rank}, padded.options());
    detail::fill_standard_normal({memory.q}, detail::draw_seed(rng_));
  }
  const double epsilon = options_.orthogonalization_epsilon();
  detail::orthogonalize(memory.q, epsilon);
  at::bmm_out(memory.p, matrix, memory.q);
  const int64_t divisor = bucket.divisor;
  Tensor out = bucket.buffer;
  auto compute_q = [this, &comm, &memory, matrix, padded, input_copy, out, numel, divisor, epsilon]() mutable {
    torch::NoGradGuard no_grad;
    detail::orthogonalize(memory.p, epsilon);
    at::bmm_out(memory.q, matrix.transpose(1, 2), memory.p);
    return HookFuture({comm.allreduce_async(memory.q, ReduceOp::kSum)},
                      [this, &memory, matrix, padded, input_copy, out, numel, divisor]() mutable {
                        torch::NoGradGuard no_grad;
                        memory.q.div_(divisor);
                        Tensor result = matrix;
                        at::bmm_out(result, memory.p, memory.q.transpose(1, 2));
                        finish(memory, input_copy, padded);
                        out.copy_(padded.narrow(0, 0, numel));
                        return HookFuture();
                      });
  };
  return HookFuture({comm.allreduce_async(memory.p, ReduceOp::kSum)}, std::move(compute_q));
}

void check_options(const PowerSGDOptions& o) {
  COHORT_CHECK_KIND(kInvalidArgument, o.matrix_approximation_rank() >= 1,
                    "PowerSGDOptions.matrix_approximation_rank must be at least 1, got ",
                    o.matrix_approximation_rank());
  COHORT_CHECK_KIND(kInvalidArgument, o.start_iteration() >= 0,
                    "PowerSGDOptions.start_iteration must be at least 0, got ", o.start_iteration());
  COHORT_CHECK_KIND(kInvalidArgument, std::isfinite(o.min_compression_rate()) && o.min_compression_rate() >= 0,
                    "PowerSGDOptions.min_compression_rate must be a finite number >= 0, got ",
                    o.min_compression_rate());
  COHORT_CHECK_KIND(
      kInvalidArgument, std::isfinite(o.orthogonalization_epsilon()) && o.orthogonalization_epsilon() >= 0,
      "PowerSGDOptions.orthogonalization_epsilon must be a finite number >= 0, got ", o.orthogonalization_epsilon());
  COHORT_CHECK_KIND(kInvalidArgument, o.random_seed() >= 0 && o.random_seed() <= int64_t(UINT32_MAX),
                    "PowerSGDOptions.random_seed must be from 0 to 4294967295 (numpy's seed range), got ",
                    o.random_seed());
}

}  // namespace

namespace comm_hooks {

std::shared_ptr<CommHook> powersgd(const PowerSGDOptions& options) {
  check_options(options);
  return std::make_shared<PowerSgdHook>(options, Variant::kLayerwise);
}

std::shared_ptr<CommHook> batched_powersgd(const PowerSGDOptions& options) {
  check_options(options);
  return std::make_shared<PowerSgdHook>(options, Variant::kBatched);
}

}  // namespace comm_hooks
}  // namespace cohort
