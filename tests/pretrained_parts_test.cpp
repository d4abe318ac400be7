// Pretrained weights into tensor-parallel parts (checkpoint/pretrained.h, issue 42 item 3): a part with
// runs is read run by run from the file, never as the whole tensor (the whole-then-cut path throws
// here), for a column cut (one run per row) and a fused row cut (a run per fused part), and equals the
// part torch.chunk gives; a tensor without a part is read as it is.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include "checkpoint/pretrained.h"
#include "cohort/safetensors.h"
#include "tp/cut_runs.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace pretrained_parts_test {

namespace {

// Rank `rank` of `ranks`' part of a tensor of `whole_shape` cut along `dim` in `fused` parts, by runs.
cohort::detail::LocalPart part_by_runs(std::vector<int64_t> whole_shape, int64_t dim, int64_t fused, int ranks,
                                       int rank) {
  cohort::detail::LocalPart part;
  part.whole_shape = whole_shape;
  part.cut = [](const torch::Tensor&) -> torch::Tensor { throw std::runtime_error("read the whole tensor"); };
  part.runs = [=](int64_t begin, int64_t end) {
    std::vector<cohort::detail::PartRun> out;
    for (const auto& r : cohort::tp::detail::cut_runs(whole_shape, dim, fused, ranks, rank, begin, end))
      out.push_back({r.local, r.whole, r.count});
    return out;
  };
  return part;
}

// torch.chunk's part: each of `fused` parts along `dim` split over the ranks, this rank's pieces joined.
torch::Tensor chunk_part(const torch::Tensor& whole, int64_t dim, int64_t fused, int ranks, int rank) {
  std::vector<torch::Tensor> pieces;
  for (const auto& piece : whole.chunk(fused, dim)) pieces.push_back(piece.chunk(ranks, dim).at(size_t(rank)));
  return torch::cat(pieces, dim);
}

}  // namespace

TEST(PretrainedParts, APartIsReadByItsRunsOnly) {
  const auto dir = std::filesystem::temp_directory_path() / ("pretrained_parts_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "w.safetensors").string();
  const auto columns = torch::arange(48, torch::kFloat).view({6, 8});  // cut along dim 1 over 2 ranks
  const auto fused = torch::arange(100, 124, torch::kFloat).view({12, 2});  // 3 fused parts of 4 rows, over 2
  const auto whole = torch::arange(200, 206, torch::kFloat);
  cohort::save_safetensors({{"columns", columns}, {"fused", fused}, {"whole", whole}}, file);
  torch::nn::Module module;
  auto c = module.register_parameter("columns", torch::zeros({6, 4}));
  auto f = module.register_parameter("fused", torch::zeros({6, 2}));
  auto w = module.register_parameter("whole", torch::zeros({6}));
  cohort::detail::load_pretrained_parts(
      module, file, cohort::StateDictOptions(),
      [](const std::string& name, const std::vector<int64_t>&) -> std::optional<cohort::detail::LocalPart> {
        if (name == "columns") return part_by_runs({6, 8}, 1, 1, 2, 1);
        if (name == "fused") return part_by_runs({12, 2}, 0, 3, 2, 0);
        return std::nullopt;
      });
  EXPECT_TRUE(torch::equal(c, chunk_part(columns, 1, 1, 2, 1))) << c;
  EXPECT_TRUE(torch::equal(f, chunk_part(fused, 0, 3, 2, 0))) << f;
  EXPECT_TRUE(torch::equal(w, whole));
  std::filesystem::remove_all(dir);
}

}  // namespace pretrained_parts_test
