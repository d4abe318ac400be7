#!/usr/bin/env bash
# Configures (once) and builds cohort in build/ with Ninja and ccache. Extra arguments go to CMake;
# COHORT_BUILD_TARGETS="a b" builds only those targets (the demo needs two of them).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
fi
targets=()
[ -n "${COHORT_BUILD_TARGETS:-}" ] && targets=(--target ${COHORT_BUILD_TARGETS})
cmake --build build --parallel "${COHORT_BUILD_JOBS:-$(nproc)}" "${targets[@]}"
