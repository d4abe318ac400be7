#!/usr/bin/env bash
# Configures (once) and builds cohort with Ninja and ccache. Which LibTorch:
#   COHORT_LIBTORCH unset or "debian"  Debian's libtorch-dev (1.13, CPU)   -> build/
#   COHORT_LIBTORCH=pip                PyPI's torch 2.x in ~/.cache/cohort  -> build-torch2/
#                                      (scripts/install-torch.sh installs it once)
#   COHORT_LIBTORCH=/path/to/libtorch  any LibTorch: the pytorch.org zip, a cluster module's
#                                      site-packages/torch, ...             -> build-<name>/
# COHORT_BUILD_DIR overrides the folder; COHORT_BUILD_TARGETS="a b" builds only those targets; extra
# arguments go to CMake (e.g. -DCOHORT_CUDA=OFF).
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
choice="${COHORT_LIBTORCH:-debian}"
prefix=()
case "$choice" in
  debian) dir=build ;;
  pip)
    torch_dir="$(scripts/install-torch.sh | tail -1)"
    venv_python="$(cd "$torch_dir/../../../.." && pwd)/bin/python"
    prefix=(-DCMAKE_PREFIX_PATH="$torch_dir" -DCOHORT_PYTHON="$venv_python")
    dir=build-torch2 ;;
  *)
    [ -d "$choice" ] || { echo "build.sh: COHORT_LIBTORCH=$choice is neither debian, pip nor a directory" >&2; exit 2; }
    torch_dir="$(cd "$choice" && pwd)"
    prefix=(-DCMAKE_PREFIX_PATH="$torch_dir")
    dir="build-$(basename "$torch_dir")" ;;
esac
dir="${COHORT_BUILD_DIR:-$dir}"
if [ ! -f "$dir/build.ninja" ]; then
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${prefix[@]}" "$@"
elif [ $# -gt 0 ]; then
  cmake -S . -B "$dir" "$@"  # new settings for an existing build folder
fi
targets=()
[ -n "${COHORT_BUILD_TARGETS:-}" ] && targets=(--target ${COHORT_BUILD_TARGETS})
cmake --build "$dir" --parallel "${COHORT_BUILD_JOBS:-$(nproc)}" "${targets[@]}"
echo "build.sh: built in $dir" >&2
