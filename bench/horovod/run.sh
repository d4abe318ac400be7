#!/usr/bin/env bash
# The cost of matching hvd operations by name: hvd::DistributedOptimizer's step with the negotiation
# (the default) against operations started in submission order (COHORT_HVD_ORDERED=1, cohort's rule
# before names were matched), on 2 ranks, interleaved (ordered, negotiated, ordered, ...; repeated),
# with fused gradients (one group a step) and without (HOROVOD_FUSION_THRESHOLD=0: one allreduce per
# parameter, the most rounds). Prints a markdown table of medians for docs/BENCHMARKS.md.
# Usage: bench/horovod/run.sh [reps] [steps]
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
reps=${1:-7}
steps=${2:-60}
run=${COHORTRUN:-build/tools/cohortrun}
bind=--bind-cores; [ "${BIND:-1}" = 0 ] && bind=''
step=build/bench/horovod/hvd_step
out=$(mktemp)
for rep in $(seq "$reps"); do
  for model in mlp cnn; do
    batch=32; [ "$model" = cnn ] && batch=64
    for fusion in on off; do
      threshold=$((128 << 20)); [ "$fusion" = off ] && threshold=0
      for ordered in 1 0; do
        COHORT_HVD_ORDERED=$ordered HOROVOD_FUSION_THRESHOLD=$threshold \
          $run --standalone $bind --nproc-per-node 2 $step --model $model --batch $batch --steps "$steps" 2>/dev/null |
          sed 's/^\[rank0\]: //' | grep RESULT >>"$out"
      done
    done
  done
  echo "rep $rep/$reps done" >&2
done
/usr/bin/python3 - "$out" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = dict(re.findall(r"(\w+)=([\w.]+)", line))
    rows.setdefault((f["model"], f["fusion"], f["mode"]), []).append(float(f["step_ms"]))
print("| model | fusion | ordered ms/step | negotiated ms/step | negotiation cost |")
print("|---|---|---|---|---|")
for model in ("mlp", "cnn"):
    for fusion in ("on", "off"):
        a, b = (statistics.median(rows[(model, fusion, m)]) for m in ("ordered", "negotiated"))
        print(f"| {model} | {fusion} | {a:.3f} | {b:.3f} | {b / a - 1:+.1%} ({1000 * (b - a):+.0f} us) |")
print(f"\n(medians over {len(rows[('mlp', 'on', 'ordered')])} interleaved runs of the per-run median step)")
PY
rm -f "$out"
