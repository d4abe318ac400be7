#!/usr/bin/env bash
# Builds the fuzz targets (clang, libFuzzer, ASan + UBSan) in build-fuzz/ against Debian's LibTorch and
# runs each for COHORT_FUZZ_SECONDS (default 60) from its seed corpus in fuzz/corpus/<target>/. New
# inputs go to build-fuzz/corpus/, a crashing input to build-fuzz/artifacts/ (the run then fails with
# libFuzzer's report). COHORT_FUZZ_SEED fixes libFuzzer's seed (CI does, so a run is repeatable).
# Usage: scripts/fuzz.sh [target ...]   (targets: ds_config manifest shard idx safetensors dcp_metadata dcp_item)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${COHORT_FUZZ_SECONDS:-60}"
seed=()
[ -n "${COHORT_FUZZ_SEED:-}" ] && seed=(-seed="$COHORT_FUZZ_SEED")
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(ds_config manifest shard idx safetensors dcp_metadata dcp_item)
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
if [ ! -f build-fuzz/build.ninja ]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOHORT_FUZZ=ON \
    -DCOHORT_BUILD_TESTS=OFF -DCOHORT_BUILD_BENCH=OFF -DCOHORT_BUILD_EXAMPLES=OFF -DCOHORT_USE_PCH=OFF >/dev/null
fi
cmake --build build-fuzz --parallel "${COHORT_BUILD_JOBS:-$(nproc)}" --target "${targets[@]/%/_fuzz}"
mkdir -p build-fuzz/artifacts
for target in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$target"
  echo "fuzz.sh: $target for ${seconds}s" >&2
  # Warnings (unknown ds_config keys) would flood the log. Leaks are LibTorch's static caches, not the
  # readers'; a 2 GB RSS cap turns a runaway allocation
  # (a header declaring a huge shape) into a finding.
  log="build-fuzz/$target.log"
  if ! COHORT_LOG_LEVEL=error ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 "build-fuzz/fuzz/${target}_fuzz" \
      -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 "${seed[@]}" \
      -artifact_prefix="build-fuzz/artifacts/${target}-" "build-fuzz/corpus/$target" "fuzz/corpus/$target" >"$log" 2>&1; then
    tail -40 "$log"
    echo "fuzz.sh: $target found a failure (above); the input is in build-fuzz/artifacts/" >&2
    exit 1
  fi
  grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb|INFO: seed corpus)" "$log" || true
done
