// convert_sync_batchnorm (include/cohort/sync_batchnorm.h): finds every BatchNorm1d/2d/3d below a
// module, checks that each one is reached only through its parent's registered children (and the
// container's own list for Sequential, ModuleList and ModuleDict), then replaces them all. A BatchNorm
// also held elsewhere (a member holder) would keep running as plain BatchNorm, so nothing is replaced.
#include <torch/torch.h>

#include <string>
#include <vector>

#include "cohort/error.h"
#include "cohort/sync_batchnorm.h"
#include "core/check.h"

namespace cohort {
namespace {

using torch::nn::Module;

struct Found {
  Module* parent_raw = nullptr;
  std::string name, path, kind;
  std::shared_ptr<Module> old;
  SyncBatchNormOptions options{1};
  detail::SyncBatchNormState state;
};

template <typename Impl>
bool read_batchnorm(const std::shared_ptr<Module>& module, const char* kind, Found& found) {
  auto bn = std::dynamic_pointer_cast<Impl>(module);
  if (bn == nullptr) return false;
  const auto& o = bn->options;
  found.kind = kind;
  found.options = SyncBatchNormOptions(o.num_features())
                      .eps(o.eps())
                      .momentum(o.momentum())
                      .affine(o.affine())
                      .track_running_stats(o.track_running_stats());
  found.state = {bn->weight, bn->bias, bn->running_mean, bn->running_var, bn->num_batches_tracked};
  return true;
}

bool is_container(const Module& module) {
  return dynamic_cast<const torch::nn::SequentialImpl*>(&module) != nullptr ||
         dynamic_cast<const torch::nn::ModuleListImpl*>(&module) != nullptr ||
         dynamic_cast<const torch::nn::ModuleDictImpl*>(&module) != nullptr;
}

void find_batchnorms(Module& parent, const std::string& prefix, std::vector<Found>& out) {
  for (const auto& child : parent.named_children()) {
    const std::string path = prefix.empty() ? child.key() : prefix + "." + child.key();
    Found found;
    if (read_batchnorm<torch::nn::BatchNorm1dImpl>(child.value(), "BatchNorm1d", found) ||
        read_batchnorm<torch::nn::BatchNorm2dImpl>(child.value(), "BatchNorm2d", found) ||
        read_batchnorm<torch::nn::BatchNorm3dImpl>(child.value(), "BatchNorm3d", found)) {
      found.parent_raw = &parent;
      found.name = child.key();
      found.path = path;
      found.old = child.value();
      out.push_back(std::move(found));
    } else {
      find_batchnorms(*child.value(), path, out);
    }
  }
}

// Owners a convertible BatchNorm has: its parent's children table, a container's own list, `found.old`.
void check_reachable_only_as_child(const Found& found) {
  const long expected = 2 + (is_container(*found.parent_raw) ? 1 : 0);
  COHORT_CHECK_KIND(
      kInvalidArgument, found.old.use_count() <= expected, "convert_sync_batchnorm: '", found.path, "' (", found.kind,
      ") is also held outside its parent's registered children (a member holder such as `torch::nn::", found.kind, " ",
      found.name, "` keeps calling the old module), so converting it would leave ",
      "plain BatchNorm running; declare it as cohort::SyncBatchNorm, or hold it in a Sequential, ",
      "ModuleList or ModuleDict (nothing was converted)");
}

void replace(const Found& found, const std::shared_ptr<SyncBatchNormImpl>& sync) {
  Module& parent = *found.parent_raw;
  if (auto* sequential = dynamic_cast<torch::nn::SequentialImpl*>(&parent)) {
    for (auto& entry : *sequential)
      if (entry.ptr().get() == found.old.get()) entry = torch::nn::AnyModule(sync);
  } else if (auto* list = dynamic_cast<torch::nn::ModuleListImpl*>(&parent)) {
    for (auto& entry : *list)
      if (entry.get() == found.old.get()) entry = sync;
  } else if (auto* dict = dynamic_cast<torch::nn::ModuleDictImpl*>(&parent)) {
    dict->update(std::vector<std::pair<std::string, std::shared_ptr<Module>>>{{found.name, sync}});
    return;  // update re-registers the child
  }
  parent.replace_module(found.name, sync);
}

}  // namespace

std::vector<std::string> convert_sync_batchnorm(Module& module, ConvertSyncBatchNormOptions options) {
  COHORT_CHECK_KIND(
      kInvalidArgument,
      dynamic_cast<torch::nn::BatchNorm1dImpl*>(&module) == nullptr &&
          dynamic_cast<torch::nn::BatchNorm2dImpl*>(&module) == nullptr &&
          dynamic_cast<torch::nn::BatchNorm3dImpl*>(&module) == nullptr,
      "convert_sync_batchnorm: the module itself is a BatchNorm; construct a cohort::SyncBatchNorm in its "
      "place (the function converts the BatchNorms below a module)");
  std::vector<Found> found;
  find_batchnorms(module, "", found);
  for (const auto& item : found) check_reachable_only_as_child(item);
  std::vector<std::string> converted;
  for (auto& item : found) {
    auto sync = std::make_shared<SyncBatchNormImpl>(item.options.comm(options.comm()), std::move(item.state));
    sync->train(item.old->is_training());
    replace(item, sync);
    converted.push_back(item.path);
  }
  return converted;
}

}  // namespace cohort
