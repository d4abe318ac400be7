#!/usr/bin/env bash
# Pipeline benchmark, interleaved: for 2 and 4 ranks and GPipe, 1F1B and interleaved 1F1B (2 stages per
# rank), cohort's Pipeline (build/bench/pipeline/pipeline_step) and torch.distributed.pipelining
# (bench/pipeline/pipeline_step.py under PyTorch 2.x) one after the other, and the whole model in one
# process under each; repeated, the order of the two flipped every repetition. Prints medians and
# ratios as markdown tables for docs/BENCHMARKS.md. Usage: bench/pipeline/run.sh [reps] [steps]
# COHORT_PYTHON2 names the Python with torch 2.x (default: the cached 2.11 venv); without one the torch
# columns are skipped. cohort built against that torch (build-torch2/, if built) runs beside them.
# Every rank has 1 intra-op thread; 4 ranks on a 2-core machine are oversubscribed (then the compute
# of one rank includes the time it was not scheduled, and throughput cannot scale).
set -euo pipefail
# torch::set_num_threads(1) does not reach the BLAS's own thread pool (Debian's LibTorch calls OpenBLAS),
# and cohortrun sets OMP_NUM_THREADS=1 only for more than one worker: without these the one-process run
# spreads its matrix products over every core (20x slower on the loaded 2-core machine).
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
cd "$(dirname "$0")/../.."
reps=${1:-5}
steps=${2:-20}
run=build/tools/cohortrun
step=build/bench/pipeline/pipeline_step
step2=build-torch2/bench/pipeline/pipeline_step
python2="${COHORT_PYTHON2:-$HOME/.cache/cohort/torch-2.11.0/bin/python}"
common="--blocks 16 --width 512 --batch 64 --chunks 8 --stages-per-rank 2 --steps $steps --warmup 5 --threads 1"
out=$(mktemp)
trap 'rm -f "$out"' EXIT

cohort() {  # binary ranks args...
  local binary=$1 ranks=$2 impl=$3
  shift 3
  $run --standalone --nproc-per-node "$ranks" "$binary" $common "$@" 2>/dev/null |
    sed 's/^\[rank0\]: //' | grep RESULT | sed "s/impl=cohort/impl=$impl/" >>"$out" || echo "cohort $* failed" >&2
}
torch_run() {  # ranks args...
  local ranks=$1
  shift
  [ -x "$python2" ] || return 0
  "$python2" bench/pipeline/pipeline_step.py --nproc "$ranks" $common "$@" 2>/dev/null | grep RESULT >>"$out" ||
    echo "torch $* failed" >&2
}
one_config() {  # rep ranks args...
  local rep=$1 ranks=$2
  shift 2
  if [ $((rep % 2)) -eq 1 ]; then
    cohort $step "$ranks" cohort "$@"; torch_run "$ranks" "$@"
  else
    torch_run "$ranks" "$@"; cohort $step "$ranks" cohort "$@"
  fi
  if [ -x "$step2" ]; then cohort $step2 "$ranks" cohort2 "$@"; fi
}

for rep in $(seq "$reps"); do
  one_config "$rep" 1 --mode single
  for ranks in 2 4; do
    for schedule in gpipe 1f1b interleaved; do one_config "$rep" "$ranks" --schedule "$schedule"; done
  done
  echo "rep $rep/$reps done" >&2
done
/usr/bin/python3 bench/pipeline/summary.py "$out" "$(getconf _NPROCESSORS_ONLN)"
