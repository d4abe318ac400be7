// The run-id check at the rendezvous (see job_identity.h). The value is stored as "run:<id>" so that
// an empty id (no launcher named the job) is still a value that can be published and compared.
#include "world/job_identity.h"

#include "cohort/error.h"
#include "comm/control_plane.h"
#include "core/check.h"
#include "world/store_client.h"

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

// The run id the store at host:port names in its greeting (store_client.h), or why there is none:
// the store went away, said nothing in time, or the listener is no cohort store.
struct Published {
  std::optional<std::string> run_id;
  std::string failure;
};

Published read_published(const std::string& host, int port, std::chrono::milliseconds timeout) {
  const StoreHello hello = read_store_hello(host, port, timeout);
  return {hello.run_id, hello.failure};
}

void compare(const std::string& theirs, const JobCheck& check) {
  // job_label("") is "a job without a run id": "not to this rank's a job without a run id" did not read.
  const std::string mine = check.run_id.empty() ? "this rank, whose job has no run id"
                                                : "this rank's " + job_label(check.run_id);
  COHORT_CHECK_KIND(kInvalidArgument, theirs == check.run_id, "rendezvous at ", check.where(), " belongs to ",
                    job_label(theirs), ", not to ", mine,
                    ": two jobs were started on one MASTER_ADDR:MASTER_PORT; give each job its own port "
                    "(cohortrun --master-port, or --standalone)");
}

}  // namespace

void check_listening_job(const JobCheck& check) {
  const Published published = read_published(check.host, check.port, check.timeout);
  if (!published.run_id)
    throw JobUnanswered("rendezvous at " + check.where() +
                        ": the store there did not say which job it belongs "
                        "to within " +
                        std::to_string(check.timeout.count()) + " ms (" + published.failure + "): is rank 0 of " +
                        job_label(check.run_id) + " running a cohort program?");
  compare(*published.run_id, check);
}

void check_same_job(c10d::Store& store, const JobCheck& check) {
  switch (check.role) {
    case JobCheck::Role::kPublish: store.set(kJobKey, encode(check.run_id)); return;
    case JobCheck::Role::kFirstPublishes: {
      const auto theirs = decode(store.compareSet(kJobKey, {}, encode(check.run_id)));
      COHORT_CHECK_KIND(kInvalidArgument, theirs.has_value(), "rendezvous at ", check.where(), ": the store's ",
                        kJobKey, " is not a run id");
      compare(*theirs, check);
      return;
    }
    case JobCheck::Role::kCompare: check_listening_job(check); return;
  }
}

std::optional<std::string> job_listening_at(const std::string& host, int port, std::chrono::milliseconds timeout) {
  return read_published(host, port, timeout).run_id;  // nullopt: not a cohort store, or gone
}

}  // namespace cohort::detail
