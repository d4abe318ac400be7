// TiedParameters (see tied_parameters.h).
#include "pipeline/tied_parameters.h"

#include <torch/torch.h>

#include <algorithm>
#include <map>

#include "checkpoint/group.h"
#include "core/check.h"
#include "pipeline/stage_replicas.h"
#include "pipeline/transfer.h"

namespace cohort::pipeline::detail {
namespace {

struct Holder {
  int rank = 0;
  int stage = 0;
  std::string shape;  // "float32 [50304, 768]"
};

// "<stage> <dtype and shape> <whole-model name>" for each trainable parameter of this rank's stages.
std::vector<std::string> held_names(const std::vector<int>& stage_ids, const std::vector<torch::nn::Sequential>& stages,
                                    const ParameterNames& names) {
  std::vector<std::string> out;
  for (size_t i = 0; i < stages.size(); ++i)
    for (const auto& item : stages[i]->named_parameters(true))
      if (item.value().requires_grad())
        out.push_back(std::to_string(stage_ids[i]) + " " + describe_tensor(item.value()) + " " + names(item.key()));
  return out;
}

}  // namespace

TiedParameters::TiedParameters(const std::shared_ptr<Comm>& comm, const std::vector<int>& stage_ids,
                               const std::vector<torch::nn::Sequential>& stages, const ParameterNames& names) {
  std::map<std::string, std::vector<Holder>> holders;
  const auto per_rank = cohort::detail::ckpt::Group(comm).allgather_lists(held_names(stage_ids, stages, names));
  for (int r = 0; r < int(per_rank.size()); ++r) {
    for (const std::string& item : per_rank[size_t(r)]) {
      const size_t first = item.find(' '), second = item.find("] ", first) + 1;
      holders[item.substr(second + 1)].push_back(
          {r, std::stoi(item.substr(0, first)), item.substr(first + 1, second - first - 1)});
    }
  }
  distinct_ = int64_t(holders.size());
  for (auto& [name, held] : holders) {
    if (held.size() < 2) continue;
    std::sort(held.begin(), held.end(), [](const Holder& a, const Holder& b) { return a.stage < b.stage; });
    std::vector<int> ranks;
    for (const Holder& h : held) {
      COHORT_CHECK_KIND(kInvalidArgument, h.shape == held.front().shape,
                        "Pipeline: PipelineOptions::parameter_names "
                        "gives a parameter of stage ",
                        held.front().stage, " ", held.front().shape, " and one of stage ", h.stage, " ", h.shape,
                        " the name '", name, "': tied parameters must have one dtype and shape");
      const auto same_rank = std::find_if(held.begin(), held.end(),
                                          [&](const Holder& o) { return &o != &h && o.rank == h.rank; });
      COHORT_CHECK_KIND(kInvalidArgument, same_rank == held.end(), "Pipeline: parameter '", name, "' is in stage ",
                        h.stage,
                        same_rank != held.end() && same_rank->stage == h.stage
                            ? " twice"
                            : " and stage " + std::to_string(same_rank == held.end() ? 0 : same_rank->stage),
                        " of rank ", h.rank,
                        "; a weight tied across stages (PipelineOptions::parameter_names) must be "
                        "held by different ranks (at least 2 stages, the first and last on other ranks)");
      ranks.push_back(h.rank);
    }
    Tie tie;
    tie.name = name;
    tie.comm = comm->new_group(ranks);
    std::vector<int> sorted = ranks;
    std::sort(sorted.begin(), sorted.end());
    tie.root = int(std::find(sorted.begin(), sorted.end(), held.front().rank) - sorted.begin());
    for (size_t i = 0; i < stages.size() && tie.comm; ++i)
      for (const auto& item : stages[i]->named_parameters(true))
        if (item.value().requires_grad() && names(item.key()) == name) {
          tie.local = int(i);
          tie.stage_name = item.key();
          tie.parameter = item.value();
        }
    ties_.push_back(std::move(tie));
  }
}

void TiedParameters::synchronize() {
  torch::NoGradGuard no_grad;
  for (Tie& tie : ties_) {
    if (!tie.comm) continue;
    auto value = tie.parameter.detach().contiguous();
    tie.comm->broadcast(value, tie.root);
    if (!value.is_same(tie.parameter)) tie.parameter.detach().copy_(value);
  }
}

void TiedParameters::check_fresh_gradients() const {
  for (const Tie& tie : ties_) {
    if (!tie.comm || !tie.parameter.grad().defined()) continue;
    COHORT_CHECK_KIND(kInvalidArgument, !tie.parameter.grad().ne(0).any().item<bool>(), "Pipeline::step: parameter '",
                      tie.name,
                      "', tied across stages, still has a gradient from an earlier step: its copies' "
                      "gradients are summed at every step, so zero the gradients between steps (accumulate over "
                      "more chunks instead)");
  }
}

void TiedParameters::check_engines(StageReplicas& replicas) {
  sum_engine_gradients(replicas);  // a sum of zeros: every holder checks the layout at once
}

void TiedParameters::abort(const std::string& reason) {
  for (Tie& tie : ties_)
    if (tie.comm) tie.comm->abort(reason);
}

void TiedParameters::sum_gradients() {
  torch::NoGradGuard no_grad;
  for (Tie& tie : ties_) {
    if (!tie.comm) continue;
    if (!tie.parameter.grad().defined()) tie.parameter.mutable_grad() = torch::zeros_like(tie.parameter);
    tie.comm->allreduce(tie.parameter.mutable_grad());
  }
}

void TiedParameters::sum_engine_gradients(StageReplicas& replicas) {
  for (Tie& tie : ties_)
    if (tie.comm) replicas.zero_engine(tie.local).sum_tied_gradient(tie.stage_name, *tie.comm);
}

}  // namespace cohort::pipeline::detail
