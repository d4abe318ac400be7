#!/usr/bin/env bash
# The scaling study: each model (ResNet-18 with the CIFAR stem, the small ViT, the Fashion-MNIST CNN) at
# 1 and 2 ranks with cohort's DDP and ZeRO stages 1 and 2, PyTorch's Python DDP on the same model, batch
# and threads, and 2 ranks training alone at once (no communication: the ceiling of what 2 ranks can
# reach on this machine), interleaved and repeated. Data: SYNTHETIC CIFAR-shaped batches (no CIFAR-10
# here). Prints samples/s, speedup 1 -> 2 ranks, efficiency against the ceiling and the time backward
# waited for DDP's buckets; writes every run to a CSV.
# Usage: bench/scaling/run.sh [reps] [steps] [batch] [csv]    (a short smoke run: run.sh 1 2 4)
# ZeRO stage 3 needs a torch::nn::Sequential model (docs/zero.md); these models are not, so it is left out.
set -euo pipefail
cd "$(dirname "$0")/../.."
reps=${1:-3}
steps=${2:-20}
batch=${3:-32}
csv=${4:-scaling.csv}
threads=${COHORT_BENCH_THREADS:-1}
run=build/tools/cohortrun
step=build/bench/scaling/scaling_step
out=$(mktemp)
common="--batch $batch --steps $steps --threads $threads"
cohort() {  # ranks mode model
  $run --standalone --nproc-per-node "$1" $step --mode "$2" --model "$3" $common 2>/dev/null | sed 's/^\[rank[0-9]*\]: //' |
    grep RESULT
}
for rep in $(seq "$reps"); do
  for model in resnet18 vit cnn; do
    cohort 1 ddp $model >>"$out"
    for mode in ddp zero1 zero2; do cohort 2 $mode $model >>"$out"; done
    # The ceiling: both ranks' samples/s summed, each training alone.
    cohort 2 alone $model | grep -o 'samples_per_s=[0-9.]*' | cut -d= -f2 | awk -v m=$model -v b=$batch '
      { s += $1 } END { printf "RESULT impl=ceiling model=%s ranks=2 batch=%s samples_per_s=%.1f\n", m, b, s }' >>"$out"
    for n in 1 2; do
      /usr/bin/python3 bench/scaling/scaling_step.py --nproc $n --model $model $common 2>/dev/null | grep RESULT >>"$out"
    done
    echo "rep $rep/$reps $model done" >&2
  done
done
/usr/bin/python3 - "$out" "$csv" <<'PY'
import csv, re, statistics, sys
runs = [dict(re.findall(r"(\w+)=([\w.]+)", line)) for line in open(sys.argv[1])]
with open(sys.argv[2], "w", newline="") as f:
    fields = ["model", "impl", "ranks", "batch", "threads", "samples_per_s", "step_ms", "wait_ms", "torch", "data"]
    w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
    w.writeheader()
    w.writerows(runs)
def med(model, impl, ranks, field="samples_per_s"):
    v = [float(r[field]) for r in runs if r["model"] == model and r["impl"] == impl and int(r["ranks"]) == ranks and field in r]
    return statistics.median(v) if v else float("nan")
print("| model | implementation | 1 rank samples/s | 2 ranks samples/s | speedup | efficiency vs ceiling | bucket wait ms/step |")
print("|---|---|---|---|---|---|---|")
for model in ("resnet18", "vit", "cnn"):
    one, ceiling = med(model, "cohort_ddp", 1), med(model, "ceiling", 2)
    for impl, label in (("cohort_ddp", "cohort DDP"), ("cohort_zero1", "cohort ZeRO-1"), ("cohort_zero2", "cohort ZeRO-2"),
                        ("pytorch_ddp", "PyTorch DDP (Python)")):
        base = med(model, impl, 1) if impl == "pytorch_ddp" else one
        two = med(model, impl, 2)
        wait = med(model, impl, 2, "wait_ms") if impl == "cohort_ddp" else float("nan")
        print(f"| {model} | {label} | {base:.1f} | {two:.1f} | {two / base:.2f} | {two / ceiling:.0%} | {wait:.1f} |")
    print(f"| {model} | ceiling: 2 ranks alone at once | {one:.1f} | {ceiling:.1f} | {ceiling / one:.2f} | 100% | |")
for model in ("resnet18", "vit", "cnn"):
    c, p = med(model, "cohort_ddp", 2), med(model, "pytorch_ddp", 2)
    print(f"\n{model}: cohort DDP / PyTorch DDP at 2 ranks = {c / p:.2f}", end="")
print(f"\n\n(medians of {len([r for r in runs if r['impl'] == 'cohort_ddp' and r['model'] == 'cnn' and r['ranks'] == '2'])} "
      f"interleaved runs; batch {runs[0]['batch'] if runs else '?'} per rank; data: synthetic; CSV: {sys.argv[2]})")
PY
rm -f "$out"
