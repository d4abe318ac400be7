// Numeric command-line flags of the examples through cohort's one parser (cohort/number.h): the whole
// text, in range, or one line naming the flag, the range and the text.
#pragma once

#include <CLI/CLI.hpp>

#include <sstream>
#include <string>

#include "cohort/error.h"
#include "cohort/number.h"

namespace examples {

/// range.name may list more names ("--tensor-parallel,--tp"); refusals name the first.
template <typename Int>
CLI::Option* add_integer(CLI::App& app, const cohort::IntegerRange& range, Int& target, const std::string& help) {
  cohort::IntegerRange named = range;
  named.name = range.name.substr(0, range.name.find(','));
  return app
      .add_option_function<std::string>(
          range.name,
          [&target, named](const std::string& text) { target = static_cast<Int>(cohort::parse_integer(text, named)); },
          help + " (" + cohort::describe_range(range) + ")")
      ->default_str(std::to_string(target));
}

inline CLI::Option* add_real(CLI::App& app, const cohort::RealRange& range, double& target, const std::string& help) {
  std::ostringstream shown;
  shown << target;
  return app
      .add_option_function<std::string>(
          range.name, [&target, range](const std::string& text) { target = cohort::parse_real(text, range); },
          help + " (" + cohort::describe_range(range) + ")")
      ->default_str(shown.str());
}

/// --devices: auto, or a number of processes from 1 to 4096 (TrainerOptions.devices' rule,
/// src/trainer/options.cpp), refused here naming the flag, before any worker starts, rather than as
/// the Trainer's option.
inline CLI::Option* add_devices(CLI::App& app, std::string& target, const std::string& help) {
  return app
      .add_option_function<std::string>(
          "--devices",
          [&target](const std::string& text) {
            if (text == "auto") {
              target = text;
              return;
            }
            try {
              target = std::to_string(cohort::parse_integer(text, {"--devices", 1, 4096}));
            } catch (const cohort::Error&) {
              throw cohort::Error("--devices expects auto or a number of devices from 1 to 4096, got " +
                                      (text.empty() ? std::string("\"\"") : text),
                                  cohort::ErrorKind::kInvalidArgument);
            }
          },
          help + " (auto, or 1 to 4096)")
      ->default_str(target);
}

}  // namespace examples
