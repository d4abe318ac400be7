#!/usr/bin/env bash
# Join's cost per step while no rank has joined: cohort DDP with and without a cohort::Join around the
# loop (--mode cohort / --mode join of ddp_step), interleaved A B A B on the same machine, on shared
# memory and on Gloo (COHORT_SHM=0); prints the median step times and their ratio as a markdown table
# for docs/BENCHMARKS.md. Usage: bench/ddp/join_run.sh [reps] [steps] [ranks]   (defaults 9 200 2)
# Needs build/tools/cohortrun and build/bench/ddp/ddp_step (scripts/build.sh). Run it on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
reps=${1:-9}
steps=${2:-200}
ranks=${3:-2}
run=build/tools/cohortrun
step=build/bench/ddp/ddp_step
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for rep in $(seq "$reps"); do
  for model in ${MODELS:-mlp cnn}; do
    batch=32; [ "$model" = cnn ] && batch=64
    common="--model $model --batch $batch --steps $steps --warmup 20 --threads 1"
    for shm in 1 0; do
      for mode in cohort join; do
        COHORT_SHM=$shm $run --standalone --nproc-per-node "$ranks" $step --mode $mode $common 2>/dev/null |
          sed "s/^\[rank0\]: //; s/\$/ shm=$shm/" | grep RESULT >>"$out"
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
    rows.setdefault((f["model"], f["shm"], f["impl"]), []).append(float(f["step_ms"]))
print("| model | transport | DDP step ms | DDP in a Join step ms | Join / DDP |")
print("|---|---|---|---|---|")
for model in sorted({k[0] for k in rows}, reverse=True):
    for shm, name in (("1", "shared memory"), ("0", "Gloo")):
        a, b = (statistics.median(rows[(model, shm, m)]) for m in ("cohort", "join"))
        print(f"| {model} | {name} | {a:.3f} | {b:.3f} | {b / a:.3f} |")
print(f"\n(medians of {len(rows[('mlp', '1', 'cohort')])} interleaved runs each)")
PY
