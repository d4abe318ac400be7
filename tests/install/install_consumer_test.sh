#!/usr/bin/env bash
# Installs cohort from the build tree into a temporary prefix, builds tests/install/consumer against it
# with find_package(cohort), and runs it on 2 ranks under the installed cohortrun.
set -euo pipefail
build=$1
source=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
quiet() {  # a step's output is shown only when it fails
  "$@" >"$prefix/step.log" 2>&1 || { cat "$prefix/step.log"; echo "failed: $*"; exit 1; }
}
quiet cmake --install "$build" --prefix "$prefix"
quiet cmake -S "$source/tests/install/consumer" -B "$prefix/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$prefix"
quiet cmake --build "$prefix/consumer"
output=$(LD_LIBRARY_PATH="$prefix/lib" timeout 120 "$prefix/bin/cohortrun" --standalone --nproc-per-node 2 \
  "$prefix/consumer/consumer" 2>&1)
echo "$output"
grep -q "\[rank0\]: rank 0 of 2: 3" <<<"$output"
grep -q "\[rank1\]: rank 1 of 2: 3" <<<"$output"
grep -q "\[rank1\]: rank 1 error kind: invalid argument" <<<"$output"
echo "installed cohort: find_package, link and run on 2 ranks: ok"
