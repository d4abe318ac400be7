// One save's work once the state is collected: what this rank writes and what rank 0's manifest says,
// and the phases that turn it into a committed step directory. save.cpp collects it on the caller's
// thread; the phases run there too (a synchronous save) or on the background writer (async_saves.h),
// from a snapshot the job then owns.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "cohort/stateful.h"

namespace cohort::detail::ckpt {

class Group;

/// A tensor of the state under the name it is saved as ("<entry>/<tensor>").
struct Collected {
  std::string name;
  StateTensor tensor;
  Stateful* owner = nullptr;  ///< lend_part for a part's tensor; null once snapshotted
};

struct SaveJob {
  std::filesystem::path root;       ///< the checkpoint directory
  std::filesystem::path tmp;        ///< root/.step-<n>.tmp while it is written
  std::filesystem::path final_dir;  ///< root/step-<n>
  std::string what;                 ///< "save_checkpoint(<final_dir>)", the errors' prefix
  int64_t step = 0;
  int keep_last = 3;
  /// "" when collecting went well, else status_of()'s text: the phases then raise it on every rank.
  std::string status;
  std::vector<Collected> written_here;  ///< this rank's share, in the state's order
  std::map<std::string, StateValues> values;
  std::map<std::string, std::string> user;
};

/// A phase's status on one rank: "" when `body` went well, else the error's kind as one digit and its
/// text, so that the error every rank raises keeps the kind of the first failure.
std::string status_of(const std::function<void()>& body);

/// Raises on every rank when any rank's status is an error, naming the rank(s), of the first one's kind.
void check_statuses(const std::vector<std::string>& statuses, int my_rank, const std::string& what);

/// The manifest's record of `c` before its bytes are written; throws for a dtype a checkpoint cannot
/// hold and a kSharded slice outside its tensor.
TensorRecord record_of(const Collected& c);

/// The name a tensor's writer is agreed under: a kSharded tensor's slice by its range.
std::string writer_key(const Collected& c);

/// Phases 1-3 on every rank of `group`: rank 0 makes the temporary directory, every rank writes its
/// shard of `job.written_here`, rank 0 writes the manifest and commits. A failure anywhere raises on
/// every rank and leaves the previous checkpoint `latest`.
void write_and_commit(Group& group, const SaveJob& job);

}  // namespace cohort::detail::ckpt
