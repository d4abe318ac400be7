// check_sampler_values (see sampler_values.h). Values are JSON doubles: each is checked whole and in
// range before anything casts it to an integer (a cast of 2^70 is undefined).
#include "checkpoint/sampler_values.h"

#include "checkpoint/counter_values.h"
#include "cohort/error.h"
#include "core/check.h"
#include "core/text.h"

namespace cohort::detail::ckpt {
namespace {

constexpr const char* kSamplerKeys[] = {"epoch", "samples_in_epoch", "dataset_size", "seed", "shuffle"};

}  // namespace

// Three of a sampler's five keys: one or two deleted by hand still read as a sampler's (and are
// refused for the missing ones), a user's entry with one such name does not.
bool is_sampler_values(const StateValues& values) {
  int found = 0;
  for (const char* key : kSamplerKeys) found += int(values.count(key));
  return found >= 3;
}

void check_sampler_values(const StateValues& values, const std::string& entry, int world_size) {
  for (const auto& [key, value] : values) {  // a number no sampler saves is an edit, or another format
    COHORT_CHECK_KIND(
        kIO, key == "epoch" || key == "samples_in_epoch" || key == "dataset_size" || key == "seed" || key == "shuffle",
        "'values.", excerpt(entry), ".", excerpt(key),
        "' is not a number a sampler saves (epoch, samples_in_epoch, dataset_size, seed, shuffle)");
  }
  for (const char* key : kSamplerKeys)  // hostile pass 7, S2: verify said OK, the resume failed unnamed
    COHORT_CHECK_KIND(kIO, values.count(key), "'values.", excerpt(entry), "' has no '", key,
                      "': a sampler saves epoch, samples_in_epoch, dataset_size, seed and shuffle");
  check_whole_value(values, entry, "epoch", 0, kTwoTo53 - 1, "0..9007199254740991 (2^53 - 1)");
  check_whole_value(values, entry, "dataset_size", 0, kTwoTo53 - 1, "0..9007199254740991 (2^53 - 1)");
  check_whole_value(values, entry, "seed", -kTwoTo53, kTwoTo53, "-2^53..2^53 (a seed a checkpoint saves exactly)");
  check_whole_value(values, entry, "shuffle", 0, 1, "0..1 (false or true)");
  const auto size = values.find("dataset_size");
  if (size == values.end()) return;
  const double high = 2 * size->second + world_size;
  check_whole_value(values, entry, "samples_in_epoch", 0, high,
                    str("0..", number_text(high), " (no epoch of ", number_text(size->second), " samples over ",
                        world_size, " rank(s) reaches further)"));
}

}  // namespace cohort::detail::ckpt
