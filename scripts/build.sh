#!/usr/bin/env bash
# Configures (once) and builds cohort in build/ with Ninja and ccache. Extra arguments go to CMake.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
fi
cmake --build build --parallel "${COHORT_BUILD_JOBS:-$(nproc)}"
