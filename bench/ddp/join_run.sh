#!/usr/bin/env bash
# Join's cost per step while no rank has joined: ddp_step --mode join-ab times blocks of DDP steps
# outside and inside a cohort::Join in one run (A B B A, same processes and placement), on shared
# memory and on Gloo (COHORT_SHM=0), repeated; prints the medians over runs and the median of the
# per-run ratios as a markdown table for docs/BENCHMARKS.md.
# Usage: bench/ddp/join_run.sh [reps] [steps] [ranks]   (defaults 9 400 2; MODELS="mlp cnn")
# Needs build/tools/cohortrun and build/bench/ddp/ddp_step (scripts/build.sh). Run it on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
reps=${1:-9}
steps=${2:-400}
ranks=${3:-2}
run=build/tools/cohortrun
step=build/bench/ddp/ddp_step
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for rep in $(seq "$reps"); do
  for model in ${MODELS:-mlp cnn}; do
    batch=32; [ "$model" = cnn ] && batch=64
    for shm in 1 0; do
      COHORT_SHM=$shm $run --standalone --nproc-per-node "$ranks" $step --mode join-ab --model $model \
        --batch $batch --steps "$steps" --warmup 20 --threads 1 2>/dev/null |
        sed "s/^\[rank0\]: //; s/\$/ shm=$shm rep=$rep/" | grep RESULT >>"$out"
    done
  done
  echo "rep $rep/$reps done" >&2
done
/usr/bin/python3 - "$out" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = dict(re.findall(r"(\w+)=([\w.]+)", line))
    runs.setdefault((f["model"], f["shm"], f["rep"]), {})[f["impl"]] = float(f["step_ms"])
print("| model | transport | DDP step ms | DDP in a Join step ms | Join / DDP (median of per-run ratios) |")
print("|---|---|---|---|---|")
for model in sorted({k[0] for k in runs}, reverse=True):
    for shm, name in (("1", "shared memory"), ("0", "Gloo")):
        pairs = [v for k, v in runs.items() if k[:2] == (model, shm) and len(v) == 2]
        a = statistics.median(p["cohort"] for p in pairs)
        b = statistics.median(p["join"] for p in pairs)
        r = sorted(p["join"] / p["cohort"] for p in pairs)
        print(f"| {model} | {name} | {a:.3f} | {b:.3f} | {statistics.median(r):.3f} [{r[0]:.3f}, {r[-1]:.3f}] |")
print(f"\n(ddp_step --mode join-ab: {len(pairs)} runs, each timing alternating blocks outside and inside a Join; "
      "ratio: median [min, max] over runs)")
PY
