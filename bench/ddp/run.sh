#!/usr/bin/env bash
# Side-by-side DDP benchmark, interleaved (cohort, PyTorch, naive, 1-rank cohort; repeated), printing
# medians and ratios as a markdown table for docs/BENCHMARKS.md. Usage: bench/ddp/run.sh [reps] [steps]
set -euo pipefail
cd "$(dirname "$0")/../.."
reps=${1:-5}
steps=${2:-40}
run=build/tools/cohortrun
step=build/bench/ddp/ddp_step
out=$(mktemp)
for model in cnn mlp; do
  batch=32; [ "$model" = cnn ] && batch=64
  for rep in $(seq "$reps"); do
    common="--model $model --batch $batch --steps $steps --threads 1"
    $run --standalone --nproc-per-node 2 $step --mode cohort $common 2>/dev/null | sed 's/^\[rank0\]: //' | grep RESULT >>"$out"
    /usr/bin/python3 bench/ddp/ddp_step.py --nproc 2 $common 2>/dev/null | grep RESULT >>"$out"
    $run --standalone --nproc-per-node 2 $step --mode naive $common 2>/dev/null | sed 's/^\[rank0\]: //' | grep RESULT >>"$out"
    $run --standalone --nproc-per-node 1 $step --mode cohort $common 2>/dev/null | sed 's/^\[rank0\]: //' | grep RESULT >>"$out"
    echo "rep $rep/$reps $model done" >&2
  done
done
/usr/bin/python3 - "$out" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = dict(re.findall(r"(\w+)=([\w.]+)", line))
    key = (f["model"], f["impl"], int(f["ranks"]))
    rows.setdefault(key, []).append(f)
def med(key, field):
    return statistics.median(float(r[field]) for r in rows[key] if field in r)
print("| model | cohort DDP samples/s | PyTorch DDP samples/s | naive C++ samples/s | cohort / PyTorch | cohort / naive | scaling 1->2 ranks | bucket wait ms | buckets alone ms | hidden |")
print("|---|---|---|---|---|---|---|---|---|---|")
for model in ("cnn", "mlp"):
    c, p, n, one = (med((model, i, r), "samples_per_s") for i, r in
                    (("cohort", 2), ("pytorch", 2), ("naive", 2), ("cohort", 1)))
    wait, comm = med((model, "cohort", 2), "wait_ms"), med((model, "cohort", 2), "comm_ms")
    hidden = 1 - wait / comm if comm > 0 else float("nan")
    print(f"| {model} | {c:.0f} | {p:.0f} | {n:.0f} | {c / p:.2f} | {c / n:.2f} | {c / (2 * one):.1%} | "
          f"{wait:.2f} | {comm:.2f} | {hidden:.0%} |")
print(f"\n(medians of {len(rows[('mlp', 'cohort', 2)])} interleaved runs each)")
PY
rm -f "$out"
