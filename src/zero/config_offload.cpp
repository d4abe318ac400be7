// The offload sections of a ds_config (see config_offload.h), with DeepSpeed's defaults.
#include "zero/config_offload.h"

#include <limits>
#include <string>

namespace cohort::detail::ds_config {

OffloadOptimizerConfig read_offload_optimizer(Section offload, int stage) {
  OffloadOptimizerConfig out;
  const size_t device = offload.choice("device", 0, {"none", "cpu", "nvme"});
  out.device(device == 2 ? OffloadDevice::kNvme : device == 1 ? OffloadDevice::kCpu : OffloadDevice::kNone);
  if (out.device() != OffloadDevice::kNone && stage == 0)
    offload.fail("device", "needs zero_optimization.stage 1, 2 or 3 (the stage is 0)");
  out.pin_memory(offload.boolean("pin_memory", out.pin_memory()));
  out.fast_init(offload.boolean("fast_init", out.fast_init()));
  out.buffer_count(int(offload.integer("buffer_count", 1, 1024).value_or(out.buffer_count())));
  out.nvme_path(offload.text("nvme_path", out.nvme_path()));
  if (out.device() == OffloadDevice::kNvme && out.nvme_path().empty())
    offload.fail_missing("nvme_path", "device \"nvme\" needs a directory on a local disk for the swap files");
  if (offload.has("ratio") && offload.number("ratio", 1.0, Section::Sign::kNonNegative) != 1.0)
    offload.fail("ratio", "is not supported: cohort offloads all of the optimizer state or none; set it to 1");
  return out;
}

OffloadParamConfig read_offload_param(Section offload, int stage) {
  OffloadParamConfig out;
  const size_t device = offload.choice("device", 0, {"none", "cpu", "nvme"});
  out.device(device == 2 ? OffloadDevice::kNvme : device == 1 ? OffloadDevice::kCpu : OffloadDevice::kNone);
  if (out.device() != OffloadDevice::kNone && stage != 3)
    offload.fail("device", str("needs zero_optimization.stage 3, where parameters are sharded (the stage is ", stage,
                               "); offload_optimizer offloads at stages 1 and 2"));
  out.pin_memory(offload.boolean("pin_memory", out.pin_memory()));
  out.buffer_count(int(offload.integer("buffer_count", 1, 1024).value_or(out.buffer_count())));
  out.buffer_size(offload.integer("buffer_size", 1).value_or(out.buffer_size()));
  out.max_in_cpu(offload.integer("max_in_cpu", 0).value_or(out.max_in_cpu()));
  out.nvme_path(offload.text("nvme_path", out.nvme_path()));
  if (out.device() == OffloadDevice::kNvme && out.nvme_path().empty())
    offload.fail_missing("nvme_path", "device \"nvme\" needs a directory on a local disk for the swap files");
  return out;
}

AioConfig read_aio(Section aio) {
  AioConfig out;
  const int64_t block = aio.integer("block_size", 4096, int64_t(1) << 30).value_or(out.block_size());
  if (block % 4096 != 0) aio.fail("block_size", "must be a multiple of 4096 (direct I/O's alignment)");
  out.block_size(block);
  out.queue_depth(int(aio.integer("queue_depth", 1, 4096).value_or(out.queue_depth())));
  out.thread_count(int(aio.integer("thread_count", 1, 1024).value_or(out.thread_count())));
  out.single_submit(aio.boolean("single_submit", out.single_submit()));
  out.overlap_events(aio.boolean("overlap_events", out.overlap_events()));
  if (aio.boolean("use_gds", false))
    aio.fail("use_gds", "is not supported: cohort's swap files go through host memory (io_uring); set it false");
  return out;
}

}  // namespace cohort::detail::ds_config
