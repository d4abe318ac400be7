#!/usr/bin/env bash
# The house layout (.clang-format at the top of the tree) holds in src/, include/ and tools/: prints each
# file clang-format would change, with the first line it would change, and exits 1 when there is any.
# To reformat: find src include tools -name '*.h' -o -name '*.cpp' | xargs clang-format-14 -i
# Usage: format_check.sh <source dir> [clang-format]
set -euo pipefail
src=$1
tool=${2:-}
if [[ -z $tool ]]; then
  for candidate in clang-format-14 clang-format; do
    command -v "$candidate" >/dev/null && { tool=$candidate; break; }
  done
fi
[[ -n $tool ]] || { echo "FAIL: no clang-format (scripts/install-deps.sh installs clang-format-14)"; exit 1; }
[[ -f $src/.clang-format ]] || { echo "FAIL: no $src/.clang-format"; exit 1; }
cd "$src"
mapfile -t files < <(find src include tools -name '*.h' -o -name '*.cpp' | sort)
# One run over every file: each place clang-format would change is a "file:line:col: error" line.
report=$("$tool" --style=file --dry-run --Werror "${files[@]}" 2>&1 || true)
mapfile -t changed < <(printf '%s\n' "$report" | grep -oE '^[^:]+:[0-9]+:[0-9]+: error' | cut -d: -f1 | uniq)
if [[ ${#changed[@]} -gt 0 ]]; then
  for file in "${changed[@]}"; do
    echo "FAIL: $file is not formatted as .clang-format says, first at line $(printf '%s\n' "$report" |
      grep -m1 -oE "^$file:[0-9]+" | cut -d: -f2)"
  done
  echo "${#changed[@]} of ${#files[@]} files differ; reformat with the command in tests/style/format_check.sh"
  exit 1
fi
echo "format: ${#files[@]} files in src/, include/ and tools/ follow .clang-format ($("$tool" --version))"
