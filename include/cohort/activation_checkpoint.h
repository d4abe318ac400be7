// cohort::checkpoint: torch.utils.checkpoint for C++. The callable runs without keeping any
// activation for backward; backward runs it again (with the random number generators put back to
// where they were, so dropout draws the same masks) and backpropagates through that second run.
// It works under every strategy (DDP, ZeRO 1-3, sharded units) and on CPU and CUDA. See docs/fsdp.md.
//
//   auto y = cohort::checkpoint([&](const torch::Tensor& x) { return block->forward(x); }, x);
//   auto [a, b] = cohort::checkpoint(two_outputs, x, mask, /*non-tensor arguments too*/ 0.1);
#pragma once

#include <torch/arg.h>
#include <torch/types.h>

#include <cstddef>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort {

struct CheckpointOptions {
  /// Restore the CPU and CUDA generators' states for the recomputation, so random operations
  /// (dropout) draw what the first run drew (torch.utils.checkpoint's preserve_rng_state).
  TORCH_ARG(bool, preserve_rng_state) = true;
};

namespace detail {

/// Runs the callable on tensors that stand for its tensor arguments, returning its output tensors.
using RecomputeFn = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;

/// The non-template part: runs `fn` on `inputs` without building a graph and returns outputs whose
/// backward recomputes `fn`.
std::vector<torch::Tensor> run_checkpointed(RecomputeFn fn, const std::vector<torch::Tensor>& inputs,
                                            const CheckpointOptions& options);

/// True on the thread that is recomputing a checkpointed callable in backward (sharded units then
/// gather without counting a second forward).
bool in_recomputation();

// The output types a checkpointed callable may return: a tensor, a vector of them, a tuple or pair
// of tensors.
template <typename T>
struct CheckpointOutput {
  static_assert(sizeof(T) == 0,
                "cohort::checkpoint: the callable must return torch::Tensor, std::vector<torch::Tensor>, "
                "or a std::tuple / std::pair of torch::Tensor");
};
template <>
struct CheckpointOutput<torch::Tensor> {
  static void flatten(const torch::Tensor& t, std::vector<torch::Tensor>& out) { out.push_back(t); }
  static torch::Tensor rebuild(const std::vector<torch::Tensor>& flat, size_t& next) { return flat[next++]; }
};
template <>
struct CheckpointOutput<std::vector<torch::Tensor>> {
  static void flatten(const std::vector<torch::Tensor>& v, std::vector<torch::Tensor>& out) {
    out.insert(out.end(), v.begin(), v.end());
  }
  // Only as the whole output: it takes every remaining tensor.
  static std::vector<torch::Tensor> rebuild(const std::vector<torch::Tensor>& flat, size_t& next) {
    std::vector<torch::Tensor> v(flat.begin() + std::ptrdiff_t(next), flat.end());
    next = flat.size();
    return v;
  }
};
template <typename... Ts>
struct CheckpointOutput<std::tuple<Ts...>> {
  static_assert((std::is_same_v<Ts, torch::Tensor> && ...),
                "cohort::checkpoint: a tuple output may hold only torch::Tensor");
  static void flatten(const std::tuple<Ts...>& t, std::vector<torch::Tensor>& out) {
    std::apply([&](const auto&... x) { (out.push_back(x), ...); }, t);
  }
  static std::tuple<Ts...> rebuild(const std::vector<torch::Tensor>& flat, size_t& next) {
    return std::tuple<Ts...>{flat[next++ + 0 * sizeof(Ts)]...};  // braced: evaluated left to right
  }
};
template <typename A, typename B>
struct CheckpointOutput<std::pair<A, B>> {
  static_assert(std::is_same_v<A, torch::Tensor> && std::is_same_v<B, torch::Tensor>,
                "cohort::checkpoint: a pair output must hold two torch::Tensor");
  static void flatten(const std::pair<A, B>& p, std::vector<torch::Tensor>& out) {
    out.push_back(p.first);
    out.push_back(p.second);
  }
  static std::pair<A, B> rebuild(const std::vector<torch::Tensor>& flat, size_t& next) {
    next += 2;
    return {flat[next - 2], flat[next - 1]};
  }
};

// A tensor argument is replaced by the tensor standing for it; anything else is passed as stored.
template <typename T>
decltype(auto) checkpoint_argument(const T& stored, const std::vector<torch::Tensor>& tensors, size_t& next) {
  if constexpr (std::is_same_v<T, torch::Tensor>) {
    return tensors[next++];
  } else {
    return (stored);
  }
}
template <typename T>
void collect_tensor_argument(const T& value, std::vector<torch::Tensor>& out) {
  if constexpr (std::is_same_v<T, torch::Tensor>) out.push_back(value);
}

}  // namespace detail

/// Calls fn(args...) keeping no activation inside it for backward; backward recomputes it.
/// Tensor arguments are the callable's differentiable inputs; other arguments are copied and passed
/// again to the recomputation. Parameters the callable uses get their gradients as usual.
template <typename F, typename... Args>
auto checkpoint_with(const CheckpointOptions& options, F&& fn, Args&&... args) {
  using Result = std::decay_t<std::invoke_result_t<F&, std::decay_t<Args>&...>>;
  auto stored = std::make_shared<std::tuple<std::decay_t<Args>...>>(std::forward<Args>(args)...);
  std::vector<torch::Tensor> inputs;
  std::apply([&](const auto&... a) { (detail::collect_tensor_argument(a, inputs), ...); }, *stored);
  detail::RecomputeFn run = [stored, fn = std::forward<F>(fn)](const std::vector<torch::Tensor>& tensors) mutable {
    size_t next = 0;
    Result out = std::apply(
        [&](const auto&... a) -> Result {
          // Braced initialisation evaluates the substitutions left to right.
          std::tuple<decltype(detail::checkpoint_argument(a, tensors, next))...> call{
              detail::checkpoint_argument(a, tensors, next)...};
          return std::apply(fn, call);
        },
        *stored);
    std::vector<torch::Tensor> flat;
    detail::CheckpointOutput<Result>::flatten(out, flat);
    return flat;
  };
  auto outputs = detail::run_checkpointed(std::move(run), inputs, options);
  size_t next = 0;
  return detail::CheckpointOutput<Result>::rebuild(outputs, next);
}

template <typename F, typename... Args>
auto checkpoint(F&& fn, Args&&... args) {
  return checkpoint_with(CheckpointOptions(), std::forward<F>(fn), std::forward<Args>(args)...);
}

}  // namespace cohort
COHORT_EXPORT_END
