#!/usr/bin/env bash
# Builds packaging/consumer against the cohort that CMake finds (CMAKE_PREFIX_PATH, or the system's) and
# runs it on 2 ranks under the cohortrun on PATH: the check each packaging recipe ends with.
# Usage: run.sh <build dir>     prints where cohort and cohortrun came from, exits non-zero on any failure
set -euo pipefail
build=${1:?usage: run.sh <build dir>}
here=$(cd "$(dirname "$0")" && pwd)
command -v cmake >/dev/null || { echo "consumer: no cmake on PATH"; exit 1; }
launcher=$(command -v cohortrun) || { echo "consumer: no cohortrun on PATH (is cohort installed or loaded?)"; exit 1; }
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$here" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; echo "consumer: cmake could not configure (find_package(cohort))"; exit 1; }
grep "consumer: cohort" "$build.configure.log"
cmake --build "$build" >"$build.build.log" 2>&1 || { cat "$build.build.log"; echo "consumer: build failed"; exit 1; }
echo "consumer: cohortrun is $launcher"
output=$(timeout 120 "$launcher" --standalone --nproc-per-node 2 "$build/consumer" 2 2>&1) ||
  { echo "$output"; echo "consumer: the 2-rank run failed"; exit 1; }
echo "$output"
[[ $(grep -c "allreduce sum 3, expected 3 in a world of 2: ok" <<<"$output") -eq 2 ]] ||
  { echo "consumer: not every rank printed the right sum"; exit 1; }
echo "consumer: 2 ranks, allreduce checked: ok"
