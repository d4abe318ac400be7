// save_checkpoint: collects the state, agrees which rank writes what, then runs the write protocol of
// save_job.h on the caller's thread, or (SaveOptions::async) snapshots this rank's share and hands it
// to the background writer (async_saves.h). Every save first waits for the one in flight.
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "checkpoint/async_saves.h"
#include "checkpoint/entry.h"
#include "checkpoint/group.h"
#include "checkpoint/layout.h"
#include "checkpoint/part_lender.h"
#include "checkpoint/save_job.h"
#include "cohort/error.h"
#include "core/check.h"
#include "core/log.h"
#include "core/trace_recorder.h"

namespace fs = std::filesystem;

namespace cohort {
namespace detail::ckpt {
namespace {

// Which rank writes each kOwned tensor and each slice of a kSharded one: every rank tells the others
// what it holds ("<bytes> <key>" each; nothing when its collection failed) and all compute the
// same assignment. Ranks holding the same slice (HSDP's replicas of a shard) write it once, as DCP's
// dedup does.
std::map<std::string, int> agree_owned_writers(Group& group, const std::vector<Collected>& tensors, bool ok) {
  std::vector<std::string> mine;
  for (const Collected& c : tensors)
    if (ok && (c.tensor.kind == StateKind::kOwned || c.tensor.kind == StateKind::kSharded))
      mine.push_back(std::to_string(c.tensor.tensor.nbytes()) + " " + writer_key(c));
  std::vector<HeldTensors> per_rank;
  for (const auto& items : group.allgather_lists(mine)) {
    per_rank.emplace_back();
    for (const std::string& item : items) {
      const size_t space = item.find(' ');
      per_rank.back().push_back({item.substr(space + 1), std::stoll(item.substr(0, space))});
    }
  }
  return assign_owned_writers(per_rank);
}

// This rank's share of `tensors`: the replicated ones spread over the ranks by size (every rank holds
// them, so the bytes are shared out and the shards are written in parallel instead of all by rank 0),
// and the owned ones and sharded slices the ranks agreed it writes.
std::vector<Collected> share_of(const std::vector<Collected>& tensors, const std::map<std::string, int>& owned_writers,
                                int rank, int world_size) {
  std::vector<int64_t> replicated_bytes;
  for (const Collected& c : tensors) {
    COHORT_CHECK_KIND(kInvalidArgument, c.tensor.tensor.defined(), "tensor '", c.name, "' is undefined");
    if (c.tensor.kind == StateKind::kReplicated) replicated_bytes.push_back(c.tensor.tensor.nbytes());
  }
  const std::vector<int> writers = assign_writers(replicated_bytes, world_size);
  std::vector<Collected> share;
  size_t replicated_index = 0;
  for (const Collected& c : tensors) {
    const StateKind kind = c.tensor.kind;
    if (kind == StateKind::kReplicated && writers[replicated_index++] != rank) continue;
    if ((kind == StateKind::kOwned || kind == StateKind::kSharded) && owned_writers.at(writer_key(c)) != rank) continue;
    share.push_back(c);
  }
  return share;
}

SaveJob job_of(const std::string& dir, const CheckpointState& state, const SaveOptions& options) {
  SaveJob job;
  job.root = dir;
  job.final_dir = job.root / step_dir_name(state.step());
  job.tmp = job.root / ("." + step_dir_name(state.step()) + ".tmp");
  job.what = "save_checkpoint(" + job.final_dir.string() + ")";
  job.step = state.step();
  job.keep_last = options.keep_last();
  job.user = state.user_values();
  return job;
}

// Every entry's tensors and numbers, and this rank's share; a failure is kept in job.status for the
// write phases to raise on every rank.
void collect(Group& group, const CheckpointState& state, SaveJob& job) {
  std::vector<Collected> tensors;
  job.status = status_of([&] {
    for (const auto& entry : entries_with_rng(state)) {
      for (StateTensor& t : entry.stateful->state_tensors())
        tensors.push_back({entry.name + "/" + t.name, t, entry.stateful});
      job.values[entry.name] = entry.stateful->state_values();
    }
    std::set<std::string> names;
    for (const Collected& c : tensors) {
      COHORT_CHECK_KIND(kInvalidArgument, names.insert(c.name).second, "two tensors are named '", c.name, "'");
    }
  });
  const auto owned_writers = agree_owned_writers(group, tensors, job.status.empty());
  // The records' checks (a dtype a checkpoint cannot hold, a slice outside its tensor) now, so that an
  // async save raises them at its call, not one save later.
  if (job.status.empty())
    job.status = status_of([&] {
      job.written_here = share_of(tensors, owned_writers, group.rank(), group.size());
      for (const Collected& c : job.written_here) record_of(c);
    });
}

// The copy the background writer writes from: this rank's share in the snapshot buffer, parts lent one
// at a time. Returns the bytes copied.
int64_t take_snapshot(SaveJob& job, SnapshotBuffer& buffer) {
  std::vector<torch::Tensor> like;
  for (const Collected& c : job.written_here) like.push_back(c.tensor.tensor);
  buffer.prepare(like);
  PartLender lender(/*changes=*/false);
  int64_t bytes = 0;
  for (size_t i = 0; i < job.written_here.size(); ++i) {
    Collected& c = job.written_here[i];
    const torch::Tensor live = c.owner != nullptr ? lender.live(*c.owner, c.tensor, c.name) : c.tensor.tensor;
    c.tensor.tensor = buffer.copy(i, live);
    c.tensor.part = -1;
    c.owner = nullptr;
    bytes += static_cast<int64_t>(c.tensor.tensor.nbytes());
  }
  lender.finish();
  return bytes;
}

// An async save: the snapshot on every rank (a failure raised on all of them now), then the writer.
void start_async(Group& group, SaveJob job) {
  AsyncSaves& saves = AsyncSaves::instance();
  const auto start = std::chrono::steady_clock::now();
  int64_t bytes = 0;
  if (job.status.empty()) job.status = status_of([&] { bytes = take_snapshot(job, saves.snapshot()); });
  // With each rank's status, whether it needs the writer's Comm split: all split when any does.
  std::vector<std::string> statuses;
  bool split = false;
  for (const std::string& s : group.allgather((saves.needs_writer_comm(group.comm()) ? "1" : "0") + job.status)) {
    split = split || s[0] == '1';
    statuses.push_back(s.substr(1));
  }
  check_statuses(statuses, group.rank(), job.what);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  COHORT_INFO(job.what, ": snapshot of ", bytes >> 20, " MiB taken in ", seconds, " s (",
              saves.snapshot().pinned() ? "pinned " : "", "buffer of ", saves.snapshot().capacity() >> 20,
              " MiB, kept for the next save); writing in the background");
  saves.start(group.comm(), std::move(job), split);
}

}  // namespace
}  // namespace detail::ckpt

std::string save_checkpoint(const std::string& dir, CheckpointState& state, const SaveOptions& options) {
  using namespace detail::ckpt;
  detail::trace::ScopedSpan span("save_checkpoint", "checkpoint");  // the timeline's row for saves
  Group group(options.comm());
  SaveJob job = job_of(dir, state, options);
  // The save in flight ends first: its error is raised here on every rank (never lost), and no two
  // saves write at once.
  AsyncSaves::instance().settle(group, job.what);
  collect(group, state, job);
  const std::string final_dir = job.final_dir.string();
  if (options.async()) {
    start_async(group, std::move(job));
    return final_dir;
  }
  write_and_commit(group, job);
  COHORT_INFO("saved checkpoint ", final_dir);
  return final_dir;
}

void finish_checkpoint_saves() { detail::ckpt::AsyncSaves::instance().finish(); }

bool checkpoint_save_in_flight() { return detail::ckpt::AsyncSaves::instance().in_flight(); }

}  // namespace cohort
