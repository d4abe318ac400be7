// ZeRO stage 3's unit coordinator (src/zero/unit_coordinator.h) driven by hand on real ranks, without
// the engine around it: each rank holds a different shard, so whole parameters prove the gathers; a
// unit is freed after its call, the root stays for the whole forward, and the second forward
// prefetches one unit ahead in the order the first one ran.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>

#include "cohort/fsdp.h"
#include "cohort/world.h"
#include "cohort/zero.h"
#include "support/multiproc.h"
#include "zero/engine_settings.h"
#include "zero/state_store.h"
#include "zero/trainable_parameters.h"
#include "zero/unit_coordinator.h"
#include "zero/unit_groups.h"

namespace zero_unit_coordinator_test {

using cohort::testing::run_ranks;
namespace detail = cohort::detail;

namespace {

// A root Linear and three units, each Linear(4, 4): 20 elements, one 80-byte gathered block apiece.
struct ChainImpl : torch::nn::Module {
  ChainImpl() {
    torch::manual_seed(7);
    in = register_module("in", torch::nn::Linear(4, 4));
    for (int i = 0; i < 3; ++i)
      blocks.push_back(cohort::fully_shard(register_module("b" + std::to_string(i), torch::nn::Linear(4, 4))));
  }
  torch::nn::Linear in{nullptr};
  std::vector<cohort::Unit<torch::nn::LinearImpl>> blocks;
};
TORCH_MODULE(Chain);

constexpr int64_t kBlockBytes = 20 * 4;

// The coordinator of `chain`'s units over a store it built the groups of, as the engine does.
struct Sharded {
  explicit Sharded(const Chain& chain)
      : settings(detail::make_engine_settings(
            cohort::ZeroConfig().zero_optimization(cohort::ZeroOptimizationConfig().stage(3)),
            cohort::EngineOptions().prefetch_units(1))),
        params(*chain, {}),
        store(settings, params) {
    auto units = detail::group_units(detail::plan_engine_units(chain.ptr(), {}), params, settings);
    auto layouts = std::exchange(units.layouts, {});
    coordinator = std::make_unique<detail::UnitCoordinator>(
        settings, std::move(units), detail::UnitCoordinator::Parts{params, store, [](int64_t) { return false; }});
    const auto options = params.at(0).options().requires_grad(false);
    for (size_t g = 0; g < layouts.size(); ++g)
      store.add_group(layouts[g], coordinator->initial_shard(int64_t(g), layouts[g], options));
  }
  int64_t gathered_bytes() const {
    cohort::MemoryReport report;
    coordinator->add_memory(report);
    return report.buffer_bytes;
  }
  detail::EngineSettings settings;
  detail::TrainableParameters params;
  detail::StateStore store;
  std::unique_ptr<detail::UnitCoordinator> coordinator;
};

std::map<std::string, torch::Tensor> values_of(const torch::nn::Module& module) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : module.named_parameters()) out[item.key()] = item.value().detach().clone();
  return out;
}

}  // namespace

TEST(ZeroUnitCoordinator, GathersFreesAndPrefetchesInRunOrder) {
  run_ranks(2, [](int rank, int size) {
    cohort::init();
    Chain chain;
    const auto whole = values_of(*chain);
    Sharded sharded(chain);
    auto& c = *sharded.coordinator;
    EXPECT_EQ(chain->blocks[0]->weight.numel(), 0) << "only the shards are kept";
    EXPECT_EQ(sharded.store.shards().lend(1).numel(), 10) << "half of a unit's 20 elements per rank";
    torch::NoGradGuard no_grad;  // evaluation: end_forward frees everything

    c.begin_forward();
    EXPECT_TRUE(torch::equal(chain->in->weight, whole.at("in.weight")));
    EXPECT_EQ(sharded.gathered_bytes(), kBlockBytes) << "the first forward has no order to prefetch by";
    for (int64_t unit = 1; unit <= 3; ++unit) {
      c.before_forward(unit);
      const std::string name = "b" + std::to_string(unit - 1);
      EXPECT_TRUE(torch::equal(chain->blocks[size_t(unit - 1)]->weight, whole.at(name + ".weight"))) << name;
      EXPECT_TRUE(torch::equal(chain->blocks[size_t(unit - 1)]->bias, whole.at(name + ".bias"))) << name;
      c.after_forward(unit);
      EXPECT_EQ(chain->blocks[size_t(unit - 1)]->weight.numel(), 0) << name << " is freed after its call";
    }
    EXPECT_EQ(chain->in->weight.numel(), 16) << "the root stays to the end of the forward";
    c.end_forward();
    EXPECT_EQ(chain->in->weight.numel(), 0);
    EXPECT_EQ(sharded.gathered_bytes(), 0);

    c.begin_forward();  // the root, and one unit ahead (EngineOptions::prefetch_units 1)
    EXPECT_EQ(sharded.gathered_bytes(), 2 * kBlockBytes);
    c.before_forward(1);
    EXPECT_EQ(sharded.gathered_bytes(), 3 * kBlockBytes) << "root, b0 and the prefetched b1";
    c.after_forward(1);
    EXPECT_EQ(sharded.gathered_bytes(), 2 * kBlockBytes);
    c.end_forward();
    EXPECT_EQ(sharded.gathered_bytes(), 0);
  });
}

}  // namespace zero_unit_coordinator_test
