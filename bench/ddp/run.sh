#!/usr/bin/env bash
# Side-by-side DDP benchmark, interleaved (cohort, cohort on Gloo only, PyTorch, naive, 1-rank cohort,
# two 1-rank processes at once; repeated), printing medians and ratios as markdown tables for
# docs/BENCHMARKS.md. Usage: bench/ddp/run.sh [reps] [steps]
# With PyPI's torch 2.11 installed (scripts/install-torch.sh; COHORT_PYTHON2 names another Python) the
# same anchor also runs under PyTorch 2.11, and cohort built against it (build-torch2/) beside it.
# "two 1-rank processes at once" share nothing: their summed samples/s is what 2 ranks could reach on
# this machine with free communication (the cores' and memory's own scaling), the ceiling for DDP.
set -euo pipefail
cd "$(dirname "$0")/../.."
# One thread per process everywhere, the 1-rank runs included (cohortrun sets OMP_NUM_THREADS only for
# several workers, and Debian's LibTorch multiplies with OpenBLAS, which torch::set_num_threads misses).
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
reps=${1:-5}
steps=${2:-40}
run=build/tools/cohortrun
step=build/bench/ddp/ddp_step
out=$(mktemp)
python2="${COHORT_PYTHON2:-$HOME/.cache/cohort/torch-2.11.0/bin/python}"
step2=build-torch2/bench/ddp/ddp_step
for model in cnn mlp; do
  batch=32; [ "$model" = cnn ] && batch=64
  for rep in $(seq "$reps"); do
    common="--model $model --batch $batch --steps $steps --threads 1"
    $run --standalone --nproc-per-node 2 $step --mode cohort $common 2>/dev/null | sed 's/^\[rank0\]: //' | grep RESULT >>"$out"
    COHORT_SHM=0 $run --standalone --nproc-per-node 2 $step --mode cohort $common 2>/dev/null |
      sed 's/^\[rank0\]: //; s/impl=cohort/impl=cohort_gloo/' | grep RESULT >>"$out"
    /usr/bin/python3 bench/ddp/ddp_step.py --nproc 2 $common 2>/dev/null | grep RESULT >>"$out"
    if [ -x "$python2" ]; then
      "$python2" bench/ddp/ddp_step.py --nproc 2 $common 2>/dev/null | sed 's/impl=pytorch/impl=pytorch2/' |
        grep RESULT >>"$out"
    fi
    if [ -x "$step2" ]; then
      $run --standalone --nproc-per-node 2 $step2 --mode cohort $common 2>/dev/null |
        sed 's/^\[rank0\]: //; s/impl=cohort/impl=cohort2/' | grep RESULT >>"$out"
    fi
    $run --standalone --nproc-per-node 2 $step --mode naive $common 2>/dev/null | sed 's/^\[rank0\]: //' | grep RESULT >>"$out"
    $run --standalone --nproc-per-node 1 $step --mode cohort $common 2>/dev/null | sed 's/^\[rank0\]: //' | grep RESULT >>"$out"
    pair=$( ($run --standalone --nproc-per-node 1 $step --mode cohort $common 2>/dev/null &
             $run --standalone --nproc-per-node 1 $step --mode cohort $common 2>/dev/null; wait) |
            grep -o 'samples_per_s=[0-9.]*' | cut -d= -f2 | awk '{ s += $1 } END { print s }')
    echo "RESULT impl=pair model=$model ranks=2 samples_per_s=$pair" >>"$out"
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
print("| model | cohort DDP samples/s | cohort, Gloo only | PyTorch DDP samples/s | naive C++ samples/s | cohort / PyTorch | cohort (Gloo only) / PyTorch | cohort / naive | scaling 1->2 ranks | ceiling: 2 lone ranks at once | cohort / ceiling |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for model in ("cnn", "mlp"):
    c, g, p, n, one, pair = (med((model, i, r), "samples_per_s") for i, r in
                             (("cohort", 2), ("cohort_gloo", 2), ("pytorch", 2), ("naive", 2), ("cohort", 1),
                              ("pair", 2)))
    print(f"| {model} | {c:.0f} | {g:.0f} | {p:.0f} | {n:.0f} | {c / p:.2f} | {g / p:.2f} | {c / n:.2f} | "
          f"{c / (2 * one):.1%} | {pair / (2 * one):.1%} | {c / pair:.1%} |")
print("\n| model | transport | bucket wait ms | buckets alone ms | hidden |")
print("|---|---|---|---|---|")
for model in ("cnn", "mlp"):
    for impl, name in (("cohort", "shared memory"), ("cohort_gloo", "Gloo")):
        wait, comm = med((model, impl, 2), "wait_ms"), med((model, impl, 2), "comm_ms")
        hidden = 1 - wait / comm if comm > 0 else float("nan")
        print(f"| {model} | {name} | {wait:.2f} | {comm:.2f} | {hidden:.0%} |")
if ("cnn", "pytorch2", 2) in rows:
    print("\n| model | PyTorch 1.13 DDP | PyTorch 2.11 DDP | cohort (1.13 build) | cohort (2.11 build) | cohort 1.13 / PyTorch 1.13 | cohort 1.13 / PyTorch 2.11 | cohort 2.11 / PyTorch 2.11 |")
    print("|---|---|---|---|---|---|---|---|")
    for model in ("cnn", "mlp"):
        p1, p2, c1 = (med((model, i, 2), "samples_per_s") for i in ("pytorch", "pytorch2", "cohort"))
        c2 = med((model, "cohort2", 2), "samples_per_s") if (model, "cohort2", 2) in rows else float("nan")
        print(f"| {model} | {p1:.0f} | {p2:.0f} | {c1:.0f} | {c2:.0f} | {c1 / p1:.2f} | {c1 / p2:.2f} | {c2 / p2:.2f} |")
print(f"\n(medians of {len(rows[('mlp', 'cohort', 2)])} interleaved runs each)")
PY
rm -f "$out"
