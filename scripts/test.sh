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
# Under CI the examples and tools compile at -O1, as the tests do (COHORT_QUICK_PROGRAMS), and the
# benchmarks, measured by hand (docs/BENCHMARKS.md builds them), not at all: CI's time is bounded.
# COHORT_CI_BENCH=1 builds them there too.
quick_programs=OFF bench=ON
if [ "${CI:-}" = true ]; then quick_programs=ON bench="$([ "${COHORT_CI_BENCH:-0}" = 1 ] && echo ON || echo OFF)"; fi
# Under CI the second LibTorch's library compiles at -O1 too: it checks that cohort builds and passes
# against 2.11, not its speed, and its build is the end of CI's critical path (a unit of the library
# took 16.8 s of CPU at -O1 against 20.1 s at -O3 here).
torch2_release_flags=()
if [ "${CI:-}" = true ] && [ "$build_type" = Release ]; then torch2_release_flags=(-DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG"); fi

# The second LibTorch: its wheel (several GB on a fresh machine) downloads, and its build compiles at
# the lowest CPU priority (nice 19), while the first build and its tests run: the tests wait on peers,
# timeouts and the cluster's daemons part of the time, and that idle CPU compiles the second build
# (measured here: the first build's tests took 652 s beside it, 641 s alone). In a session of its own,
# so an early exit stops it.
# The benchmarks are measured by hand (docs/BENCHMARKS.md), and the programs started as programs
# (label launch: cohortrun's logic, the examples' flags and fault scenarios) and the cluster scenarios
# (tests/cluster: Slurm and MPI across namespace hosts) do not change with LibTorch, so under CI they
# run in the first build only and the second skips the examples (and so the launch tests, which start
# them). Likewise the transports' own tests (cohort_comm_tests: cohort's sockets and shared memory;
# every other multi-process test goes through them too), the checks of the sources (label style) and
# the GPU tests (no GPU in CI). COHORT_TORCH2_ALL=1 runs everything there too.
torch2_pid="" torch2_log="$(mktemp)"
trap '[ -n "$torch2_pid" ] && kill -- -"$torch2_pid" 2>/dev/null; rm -f "$torch2_log"' EXIT
if [ "${COHORT_TORCH2:-1}" != 0 ]; then
  torch2_labels='cluster|launch|style' torch2_all=OFF
  if [ "${CI:-}" != true ] || [ "${COHORT_TORCH2_ALL:-0}" = 1 ]; then torch2_labels='cluster' torch2_all=ON; fi
  # (With the kernel's autogroups a session shares the CPU with the others whatever its processes' nice:
  # the session's own weight is set too.)
  setsid bash -c 'echo 19 >/proc/self/autogroup 2>/dev/null || true
    scripts/install-torch.sh >/dev/null && COHORT_LIBTORCH=pip exec nice -n 19 scripts/build.sh "$@"' \
    torch2 -DCMAKE_BUILD_TYPE="$build_type" -DCOHORT_PEER_BUILD="$PWD/build" \
    -DCOHORT_BUILD_BENCH="${COHORT_TORCH2_BENCH:-OFF}" -DCOHORT_MEMCHECK=OFF -DCOHORT_BUILD_EXAMPLES="$torch2_all" \
    -DCOHORT_BUILD_COMM_TESTS="$torch2_all" -DCOHORT_BUILD_GPU_TESTS="$torch2_all" \
    -DCOHORT_QUICK_PROGRAMS="$quick_programs" "${torch2_release_flags[@]}" >"$torch2_log" 2>&1 &
  torch2_pid=$!
fi

scripts/build.sh -DCMAKE_BUILD_TYPE="$build_type" -DCOHORT_QUICK_PROGRAMS="$quick_programs" -DCOHORT_BUILD_BENCH="$bench"
# One job more than cores: the multi-process tests wait (timeouts, peers, rendezvous) part of the time,
# which a third job fills (measured on 2 cores: 16.2 min against 18.7 with -j 2); what idle CPU is left
# goes to the second LibTorch's build.
test_jobs="${COHORT_TEST_JOBS:-$(($(nproc) + 1))}"
# Under CI the race of two jobs on one port runs 8 pairs instead of 20 (about 45 s less).
pairs="${COHORT_TEST_JOB_PAIRS:-$([ "${CI:-}" = true ] && echo 8 || echo 20)}"
(cd build && COHORT_TEST_JOB_PAIRS="$pairs" ctest --output-on-failure --timeout 600 -j "$test_jobs" -LE cluster "$@")
# The cluster scenarios (tests/cluster: hosts as namespaces, each job 4 ranks and Slurm's daemons) after
# the rest, one at a time and alone: beside three other tests on 2 cores the fault scenarios ran 2-3x
# slower and chaos past its 330 s deadline (alone it takes about 150 s).
(cd build && ctest --output-on-failure --timeout 600 -L cluster "$@")
# The file readers under libFuzzer (docs/fuzzing.md), briefly and with a fixed seed; 0 skips.
fuzz_seconds="${COHORT_CI_FUZZ_SECONDS:-10}"
if [ "$fuzz_seconds" != 0 ]; then
  COHORT_FUZZ_SECONDS="$fuzz_seconds" COHORT_FUZZ_SEED="${COHORT_FUZZ_SEED:-1}" scripts/fuzz.sh
fi
if [ "${COHORT_TORCH2:-1}" != 0 ]; then
  echo "test.sh: waiting for the second LibTorch's build (started in the background)" >&2
  if ! wait "$torch2_pid"; then
    torch2_pid=""
    cat "$torch2_log" >&2
    echo "test.sh: the second LibTorch's build failed (above)" >&2
    exit 1
  fi
  torch2_pid=""
  tail -n 3 "$torch2_log" >&2
  # 4 pairs of jobs on one port here, 20 in the first build.
  (cd build-torch2 && COHORT_TEST_JOB_PAIRS=4 ctest --output-on-failure --timeout 600 -j "$test_jobs" \
    -LE "$torch2_labels" "$@")
fi
