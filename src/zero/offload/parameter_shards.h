// Stage 3's parameter shards in compute precision, one per group, where offload_param puts them
// between gathers (DeepSpeed's partitioned parameters with their swapper): beside the computation
// (no offload), in host memory (device cpu), or in this rank's parameter swap file (device nvme; the
// first groups up to max_in_cpu elements stay in host memory). A gather borrows a shard (lend, read
// from the file when it is there, possibly read ahead by prefetch) and returns it when its
// all-gather is done; the optimizer step writes the updated shard back through write().
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "cohort/zero.h"
#include "zero/engine_settings.h"
#include "zero/offload/state_swapper.h"

namespace cohort::detail {

class ParameterShards {
 public:
  explicit ParameterShards(const EngineSettings& settings);

  /// Takes the next group's shard (this rank's, compute dtype) to the place offload_param says.
  void add(const torch::Tensor& shard);
  int64_t size() const { return int64_t(shards_.size()); }
  /// Whether group g's shard is on file (lend reads it; write writes it).
  bool on_file(int64_t g) const { return slots_[size_t(g)] >= 0; }
  /// The shard of group g, in memory until give_back (waits for its read when on file).
  const torch::Tensor& lend(int64_t g);
  /// Ends a lend; the values did not change (a gather only reads them).
  void give_back(int64_t g);
  /// Starts reading group g's shard ahead of its lend (nothing when it is in memory).
  void prefetch(int64_t g);
  /// Sets group g's shard to `values` (the updated master, any dtype or device), written to its file
  /// when it is there.
  void write(int64_t g, const torch::Tensor& values);
  /// Waits for every read and write started; a failure is an Error of kind I/O.
  void flush();
  /// Adds the shards in memory (and buffers lent or read ahead) and the swap file's bytes.
  void add_memory(MemoryReport& report) const;

 private:
  const EngineSettings& settings_;
  std::vector<torch::Tensor> shards_;      // empty between lends when on file
  std::vector<StateSwapper::Slot> slots_;  // -1: in memory
  int64_t in_memory_elements_ = 0;         // counted against max_in_cpu
  std::unique_ptr<StateSwapper> swapper_;  // device nvme
};

}  // namespace cohort::detail
