#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (ctest), twice: against Debian's
# LibTorch 1.13 in build/, then against PyPI's torch 2.11 (a CUDA build: every source, NCCL included,
# compiles with CUDA on; the tests run on the CPU) in build-torch2/, with a checkpoint written by each
# build read by the other. COHORT_TORCH2=0 skips the second. Exit code 0 = all passed.
# Under CI (CI=true) both build without debug info (Release): a quarter less compile time, and CI's
# time on a fresh 2-core machine is bounded. COHORT_TEST_BUILD_TYPE overrides.
set -euo pipefail
cd "$(dirname "$0")/.."
default_type=RelWithDebInfo
[ "${CI:-}" = true ] && default_type=Release
build_type="${COHORT_TEST_BUILD_TYPE:-$default_type}"
scripts/install-deps.sh
scripts/build.sh -DCMAKE_BUILD_TYPE="$build_type"
(cd build && ctest --output-on-failure --timeout 600 -j "${COHORT_TEST_JOBS:-2}" "$@")
# The file readers under libFuzzer (docs/fuzzing.md), briefly and with a fixed seed; 0 skips.
fuzz_seconds="${COHORT_CI_FUZZ_SECONDS:-15}"
if [ "$fuzz_seconds" != 0 ]; then
  COHORT_FUZZ_SECONDS="$fuzz_seconds" COHORT_FUZZ_SEED="${COHORT_FUZZ_SEED:-1}" scripts/fuzz.sh
fi
if [ "${COHORT_TORCH2:-1}" != 0 ]; then
  # The benchmarks are measured by hand (docs/BENCHMARKS.md); the second build skips them to save CI time.
  COHORT_LIBTORCH=pip scripts/build.sh -DCMAKE_BUILD_TYPE="$build_type" -DCOHORT_PEER_BUILD="$PWD/build" \
    -DCOHORT_BUILD_BENCH="${COHORT_TORCH2_BENCH:-OFF}" -DCOHORT_MEMCHECK=OFF
  # Launcher logic does not change with LibTorch: 4 pairs of jobs on one port here, 20 in the first build,
  # and the cluster scenarios (tests/cluster: Slurm and MPI across namespace hosts) in the first only.
  (cd build-torch2 && COHORT_TEST_JOB_PAIRS=4 ctest --output-on-failure --timeout 600 -j "${COHORT_TEST_JOBS:-2}" \
    -LE cluster "$@")
fi
