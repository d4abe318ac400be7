// cohort::Mesh on 4 real rank processes: a 2 x 2 {pipeline, data} mesh laid out row-major like
// init_device_mesh, coordinates given explicitly (two "nodes" with a cyclic rank layout), the
// {node, local} mesh of World::node_mesh, and the one-line errors for a bad shape or a taken place.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cohort/comm.h"
#include "cohort/mesh.h"
#include "cohort/world.h"
#include "support/errors.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace comm_mesh_test {

using ::testing::HasSubstr;
using cohort::testing::error_of;
using cohort::testing::run_ranks;

TEST(Mesh, RowMajorPipelineByDataGroups) {
  run_ranks(4, [](int rank, int) {
    auto& world = cohort::init().comm();
    cohort::Mesh mesh(world, {{"pipeline", 2}, {"data", 2}});
    EXPECT_EQ(mesh.coordinate("pipeline"), rank / 2);
    EXPECT_EQ(mesh.coordinate("data"), rank % 2);
    EXPECT_EQ(mesh.size("data"), 2);
    // The data group holds the ranks of this pipeline stage; its rank is the data coordinate.
    auto& data = mesh.group("data");
    EXPECT_EQ(data.name(), "data");
    EXPECT_EQ(data.rank(), rank % 2);
    EXPECT_EQ(data.allreduce(torch::full({4}, float(rank)))[0].item<float>(), float(4 * (rank / 2) + 1));
    auto& pipeline = mesh.group("pipeline");
    EXPECT_EQ(pipeline.rank(), rank / 2);
    EXPECT_EQ(pipeline.allreduce(torch::full({4}, float(rank)))[0].item<float>(), float(2 * (rank % 2) + 2));
    EXPECT_THAT(error_of([&] { mesh.group("tensor"); }), HasSubstr("no axis 'tensor' in the pipeline=2 x data=2 mesh"));
  });
}

TEST(Mesh, ExplicitCoordinatesAndTheNodeMesh) {
  run_ranks(4, [](int rank, int) {
    auto world = cohort::init();
    // Two nodes with ranks dealt round-robin (Slurm's cyclic distribution): node = rank % 2.
    auto mesh = cohort::Mesh::at_coordinates(world.comm(), {{"node", 2}, {"local", 2}}, {rank % 2, rank / 2});
    EXPECT_EQ(mesh.group("local").allreduce(torch::full({1}, float(rank)))[0].item<float>(),
              float(rank % 2 == 0 ? 0 + 2 : 1 + 3));
    EXPECT_EQ(mesh.group("node").world_rank(1), rank / 2 * 2 + 1);
    // run_ranks starts every rank on one node: LOCAL_RANK = rank, LOCAL_WORLD_SIZE = 4.
    auto nodes = world.node_mesh();
    EXPECT_EQ(nodes.size("node"), 1);
    EXPECT_EQ(nodes.group("local").size(), 4);
    EXPECT_EQ(nodes.group("node").size(), 1);
    EXPECT_EQ(nodes.group("local").allreduce(torch::ones({2}))[0].item<float>(), 4.f);
  });
}

TEST(Mesh, BadShapeAndTakenPlaceAreOneLineErrors) {
  run_ranks(2, [](int rank, int) {
    auto& world = cohort::init().comm();
    EXPECT_THAT(error_of([&] { cohort::Mesh(world, {{"pipeline", 2}, {"data", 2}}); }),
                HasSubstr("Mesh: pipeline=2 x data=2 holds 4 ranks but the Comm has 2"));
    EXPECT_THAT(error_of([&] { cohort::Mesh(world, {{"data", 0}}); }),
                HasSubstr("Mesh: axis 'data' has size 0 (accepted: >= 1)"));
    EXPECT_THAT(error_of([&] { cohort::Mesh::at_coordinates(world, {{"node", 2}}, {0}); }),
                HasSubstr("Mesh: ranks 0 and 1 claim the same place of the node=2 mesh"));
  });
}

TEST(Readme, GroupsPointToPointAndAlltoallExample) {
  // The example of README.md's "Groups, point-to-point and alltoall", as written there.
  run_ranks(4, [](int, int) {
    auto world = cohort::init();
    auto& comm = world.comm();
    auto half = comm.split(world.rank() / 2, world.rank());
    auto pair = world.new_group({0, 1});
    cohort::Mesh mesh(comm, {{"pipeline", 2}, {"data", 2}});
    auto grads = mesh.group("data").allreduce(torch::ones({4}));
    EXPECT_EQ(grads[0].item<float>(), 2.f);
    if (mesh.coordinate("pipeline") == 0) {
      comm.send_object(std::vector<int64_t>{8, 16}, world.rank() + 2);
      comm.isend(torch::randn({8, 16}), world.rank() + 2).wait();
    } else {
      auto shape = comm.recv_object<std::vector<int64_t>>(world.rank() - 2);
      auto activations = torch::empty(shape);
      comm.irecv(activations, world.rank() - 2).wait();
      EXPECT_EQ(activations.sizes(), (std::vector<int64_t>{8, 16}));
    }
    auto mine = torch::full({world.rank() + 1, 2}, float(world.rank()));
    auto all_rows = comm.allgather_v(mine);
    EXPECT_EQ(all_rows.size(0), 10);
    auto swapped = comm.alltoall(torch::arange(4.f));
    EXPECT_TRUE(swapped.eq(float(world.rank())).all().item<bool>());
    EXPECT_EQ(half->size(), 2);
    EXPECT_EQ(bool(pair), world.rank() < 2);
  });
}

}  // namespace comm_mesh_test
