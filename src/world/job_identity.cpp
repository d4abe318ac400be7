// The run-id check at the rendezvous (see job_identity.h). The value is stored as "run:<id>" so that
// an empty id (no launcher named the job) is still a value that can be published and compared.
#include "world/job_identity.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <future>
#include <memory>
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

// The published run id, or why there is none: c10d's wait (which, unlike check(), gives up at its
// timeout even when the listener is no store at all) timed out, or the store is gone.
struct Published {
  std::optional<std::string> run_id;
  std::string failure;
};

Published read_published(c10d::Store& store, std::chrono::milliseconds timeout) {
  try {
    store.wait({kJobKey}, timeout);
    const auto run_id = decode(store.get(kJobKey));
    return {run_id, run_id ? "" : "a value that is not a run id"};
  } catch (const std::exception& e) {
    const std::string what = e.what();
    return {std::nullopt, what.substr(0, what.find('\n'))};
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
    case JobCheck::Role::kCompare: {
      const Published published = read_published(store, check.timeout);
      if (!published.run_id)
        throw JobUnanswered("rendezvous at " + check.where + ": the store there did not say which job it belongs to "
                            "within " + std::to_string(check.timeout.count()) + " ms (" + published.failure +
                            "): is rank 0 of " + job_label(check.run_id) + " running a cohort program?");
      theirs = published.run_id;
      break;
    }
  }
  COHORT_CHECK(theirs.has_value(), "rendezvous at ", check.where, ": the store's ", kJobKey, " is not a run id");
  COHORT_CHECK(*theirs == check.run_id, "rendezvous at ", check.where, " belongs to ", job_label(*theirs),
               ", not to this rank's ", job_label(check.run_id),
               ": two jobs were started on one MASTER_ADDR:MASTER_PORT; give each job its own port "
               "(cohortrun --master-port, or --standalone)");
}

std::optional<std::string> job_listening_at(const std::string& host, int port,
                                            std::chrono::milliseconds timeout) {
  // A listener that never answers (a plain socket holding the port) blocks LibTorch 2.x's TCPStore
  // client in its handshake without a timeout, so the probe runs on a thread of its own that is left
  // behind if it does not answer in time (it holds only copies and ends with the process).
  auto answer = std::make_shared<std::promise<std::optional<std::string>>>();
  auto future = answer->get_future();
  std::thread([answer, host, port, timeout] {
    try {
      c10d::TCPStoreOptions options;
      options.port = uint16_t(port);
      options.isServer = false;
      options.waitWorkers = false;
      options.timeout = timeout;
      c10d::TCPStore store(host, options);
      answer->set_value(read_published(store, timeout).run_id);
    } catch (const std::exception&) {
      answer->set_value(std::nullopt);  // not a cohort store, or gone: "in use" without naming a job
    }
  }).detach();
  if (future.wait_for(timeout + std::chrono::milliseconds(500)) != std::future_status::ready) return std::nullopt;
  return future.get();
}

}  // namespace cohort::detail
