// Flags of the examples that take one of a few words (--strategy, --progress): a word outside the
// list is refused in one line naming the flag, the word and the words accepted, like the numbers of
// cli_numbers.h (CLI11's IsMember said "--strategy: foo not in {ddp,dp,...}" on two lines).
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "cohort/error.h"

namespace examples {

/// `name` takes one of `choices`; `target` keeps its value (the default, shown in --help) otherwise.
inline CLI::Option* add_choice(CLI::App& app, const std::string& name, std::string& target,
                               const std::vector<std::string>& choices, const std::string& help) {
  std::string list;
  for (const auto& choice : choices) list += (list.empty() ? "" : ", ") + choice;
  CLI::Option* option = app.add_option_function<std::string>(
      name,
      [&target, name, choices, list](const std::string& text) {
        if (std::find(choices.begin(), choices.end(), text) == choices.end())
          throw cohort::Error(
              name + " " + (text.empty() ? std::string("\"\"") : text) + " is not accepted: expected one of " + list,
              cohort::ErrorKind::kInvalidArgument);
        target = text;
      },
      help);
  if (!target.empty()) option->default_str(target);
  return option;
}

}  // namespace examples
