// The run-id check at the rendezvous (see job_identity.h). The value is stored as "run:<id>" so that
// an empty id (no launcher named the job) is still a value that can be published and compared.
#include "world/job_identity.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <thread>

#include "cohort/error.h"
#include "comm/control_plane.h"

namespace cohort::detail {
namespace {

constexpr const char* kJobKey = "cohort/job";
constexpr const char* kTag = "run:";

std::vector<uint8_t> encode(const std::string& run_id) {
  const std::string text = kTag + run_id;
  return {text.begin(), text.end()};
}

// The run id in a stored value; nullopt when the value is not one of ours.
std::optional<std::string> decode(const std::vector<uint8_t>& value) {
  const std::string text(value.begin(), value.end());
  if (text.rfind(kTag, 0) != 0) return std::nullopt;
  return text.substr(std::string(kTag).size());
}

// Polls (a store's get() would wait with a c10d message of its own) until the key is there.
std::optional<std::string> read_published(c10d::Store& store, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (store.check({kJobKey})) return decode(store.get(kJobKey));
    if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

void check_same_job(c10d::Store& store, const JobCheck& check) {
  std::optional<std::string> theirs;
  switch (check.role) {
    case JobCheck::Role::kPublish: store.set(kJobKey, encode(check.run_id)); return;
    case JobCheck::Role::kFirstPublishes:
      theirs = decode(store.compareSet(kJobKey, {}, encode(check.run_id)));
      break;
    case JobCheck::Role::kCompare: theirs = read_published(store, check.timeout); break;
  }
  COHORT_CHECK(theirs.has_value(), "rendezvous at ", check.where, ": the store there did not say which job it ",
               "belongs to within ", check.timeout.count(), " ms (is rank 0 running a cohort program of ",
               job_label(check.run_id), "?)");
  COHORT_CHECK(*theirs == check.run_id, "rendezvous at ", check.where, " belongs to ", job_label(*theirs),
               ", not to this rank's ", job_label(check.run_id),
               ": two jobs were started on one MASTER_ADDR:MASTER_PORT; give each job its own port "
               "(cohortrun --master-port, or --standalone)");
}

std::optional<std::string> job_listening_at(const std::string& host, int port,
                                            std::chrono::milliseconds timeout) {
  try {
    c10d::TCPStoreOptions options;
    options.port = uint16_t(port);
    options.isServer = false;
    options.waitWorkers = false;
    options.timeout = timeout;
    c10d::TCPStore store(host, options);
    return read_published(store, timeout);
  } catch (const std::exception&) {
    return std::nullopt;  // not a cohort store, or gone: the caller says "in use" without naming a job
  }
}

}  // namespace cohort::detail
