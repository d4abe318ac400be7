// Reads a tensor a loading rank asks for from one checkpoint: the whole tensor, or this rank's range
// of a sharded flat tensor cut from the saved slices (any world size saved it), each piece's CRC32
// checked. Staging reads with it (stage.h); so does commit, for the parts of a state it fills a part
// at a time.
#pragma once

#include <torch/types.h>

#include <map>
#include <memory>
#include <string>

#include "checkpoint/manifest.h"
#include "checkpoint/shard_file.h"
#include "cohort/stateful.h"

namespace cohort::detail::ckpt {

class TensorReader {
 public:
  /// `dir` is the step directory, `manifest` its manifest (it must outlive the reader).
  TensorReader(std::string dir, const Manifest& manifest, int rank);

  /// The saved value (record `r`) of `want`, named `name` in errors, in the shape of want.tensor.
  torch::Tensor read(const std::string& name, const StateTensor& want, const TensorRecord& r);

 private:
  ShardReader& file(const std::string& name);
  torch::Tensor piece(const Piece& p, c10::ScalarType dtype, const std::string& name);

  std::string dir_;
  const Manifest& m_;
  int rank_;
  std::map<std::string, std::unique_ptr<ShardReader>> open_;
};

}  // namespace cohort::detail::ckpt
