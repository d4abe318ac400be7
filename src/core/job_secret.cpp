// The job's secret and its HMAC proofs (see job_secret.h): OpenSSL's HMAC-SHA256, the kernel's
// random numbers.
#include "core/job_secret.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "cohort/error.h"
#include "core/check.h"
#include "core/log.h"

namespace cohort::detail {
namespace {

std::string value_of(const std::map<std::string, std::string>& env, const std::string& name) {
  const auto it = env.find(name);
  return it == env.end() ? "" : it->second;
}

}  // namespace

std::string given_job_secret(const std::map<std::string, std::string>& env) {
  const auto it = env.find("COHORT_JOB_SECRET");
  if (it == env.end()) return "";
  COHORT_CHECK_KIND(kInvalidArgument, !it->second.empty(),
                    "COHORT_JOB_SECRET is set but empty: export a random secret to every rank (openssl rand -hex "
                    "32), or unset it to let cohortrun draw one");
  static std::atomic<bool> warned{false};  // the launcher, init and each rendezvous ask: one line is enough
  if (it->second.size() < kShortJobSecret && !warned.exchange(true))
    COHORT_WARN("COHORT_JOB_SECRET has ", it->second.size(), " character(s), fewer than ", kShortJobSecret,
                ": a stranger that records one proof can guess it offline; export a random secret to every rank "
                "(openssl rand -hex 32)");
  return it->second;
}

JobSecret job_secret(const std::map<std::string, std::string>& env, const std::string& run_id, int port) {
  const std::string given = given_job_secret(env);
  if (!given.empty()) return {given, "COHORT_JOB_SECRET"};
  const std::string slurm_job = value_of(env, "SLURM_JOB_ID");
  if (!slurm_job.empty())
    return {"slurm:" + slurm_job + "." + value_of(env, "SLURM_STEP_ID") + ":" + std::to_string(port), "SLURM_JOB_ID"};
  return {"run:" + run_id + ":" + std::to_string(port), "run id"};
}

std::string random_bytes(size_t count) {
  std::string bytes(count, '\0');
  for (size_t done = 0; done < count;) {
    const ssize_t n = ::getrandom(&bytes[done], count - done, 0);
    if (n < 0 && errno == EINTR) continue;
    COHORT_CHECK_KIND(kIO, n > 0, "cannot draw ", count,
                      " random bytes from the kernel (getrandom): ", std::strerror(errno));
    done += size_t(n);
  }
  return bytes;
}

std::string new_job_secret() {
  static const char* kHex = "0123456789abcdef";
  std::string text;
  for (unsigned char byte : random_bytes(32)) {
    text += kHex[byte >> 4];
    text += kHex[byte & 15];
  }
  return text;
}

std::string new_launch_id() { return new_job_secret().substr(0, 32); }

std::string hmac_proof(const std::string& secret, const std::string& label, const std::string& first,
                       const std::string& second) {
  const std::string message = label + '\0' + first + second;
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  const auto* out = ::HMAC(EVP_sha256(), secret.data(), int(secret.size()),
                           reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest, &size);
  COHORT_CHECK_KIND(kInternal, out != nullptr && size == 32, "HMAC-SHA256 failed in OpenSSL");
  return std::string(reinterpret_cast<const char*>(digest), size);
}

bool same_bytes(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace cohort::detail
