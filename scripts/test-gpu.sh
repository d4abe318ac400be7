#!/usr/bin/env bash
# The GPU tests: builds cohort against the torch of this machine's python3 (or COHORT_PYTHON) with CUDA
# on, in build-gpu/, and runs the GPU-labelled ctest set (tests/gpu: NCCL, DDP/ZeRO on CUDA, autocast,
# CUDA checkpoints) and the example on cuda. On a machine without a GPU it says so and exits 0.
# COHORT_KEEP_GOING=1: build what compiles and test that, after a compile error elsewhere.
# COHORT_DEPS_PREFIX: a folder made by scripts/pack-build-deps.sh, for a node without Debian packages.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${COHORT_PYTHON:-python3}"
python="$(command -v "$python")"
torch_dir="$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')"
if ! "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "test-gpu: skipped: $python's torch sees no CUDA device on this machine"
  exit 0
fi
prefix="$torch_dir"
[ -n "${COHORT_DEPS_PREFIX:-}" ] && prefix="$prefix;$(cd "$COHORT_DEPS_PREFIX" && pwd)"
dir="${COHORT_BUILD_DIR:-build-gpu}"
data=/usr/share/datasets/fashion-mnist  # the example test's data: Debian's package, or the deps folder's copy
[ -n "${COHORT_DEPS_PREFIX:-}" ] && [ -d "$COHORT_DEPS_PREFIX/fashion-mnist" ] && data="$(cd "$COHORT_DEPS_PREFIX/fashion-mnist" && pwd)"
if [ ! -f "$dir/build.ninja" ]; then
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$prefix" \
    -DCOHORT_PYTHON="$python" -DCOHORT_CUDA=ON -DCOHORT_BUILD_BENCH="${COHORT_BUILD_BENCH:-OFF}" \
    -DCOHORT_USE_PCH=ON -DCOHORT_FASHION_MNIST_DIR="$data"
fi
keep_going=(); [ "${COHORT_KEEP_GOING:-0}" = 1 ] && keep_going=(-- -k 0)  # report every error at once
cmake --build "$dir" --parallel "${COHORT_BUILD_JOBS:-$(nproc)}" "${keep_going[@]}" || [ "${COHORT_KEEP_GOING:-0}" = 1 ]
cd "$dir"
ctest -L gpu --output-on-failure --timeout 600 "$@"
