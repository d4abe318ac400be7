#!/usr/bin/env bash
# The scaling study: each model (ResNet-18 with the CIFAR stem, the small ViT, the Fashion-MNIST CNN) at
# 1 and 2 ranks with cohort's DDP and ZeRO stages 1 and 2, PyTorch's Python DDP on the same model, batch
# and threads, and 2 ranks training alone at once (no communication: the ceiling of what 2 ranks can
# reach on this machine), interleaved and repeated. Data: SYNTHETIC CIFAR-shaped batches (no CIFAR-10
# here). Prints samples/s, speedup 1 -> 2 ranks, efficiency against the ceiling and the time backward
# waited for DDP's buckets; writes every run to a CSV and a PNG of speedups (gnuplot).
# Usage: bench/scaling/run.sh [reps] [steps] [batch] [csv]    (a short smoke run: run.sh 1 2 4)
# ZeRO stage 3 needs a torch::nn::Sequential model (docs/zero.md); these models are not, so it is left out.
set -euo pipefail
cd "$(dirname "$0")/../.."
reps=${1:-3}
steps=${2:-20}
batch=${3:-32}
csv=${4:-scaling.csv}
threads=${COHORT_BENCH_THREADS:-1}
# The same threads everywhere, BLAS included: cohortrun sets OMP_NUM_THREADS only for several workers,
# and torch.set_num_threads / --threads leave OpenBLAS's own pool alone.
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
run=build/tools/cohortrun
step=build/bench/scaling/scaling_step
# PyPI's torch 2.11 (scripts/install-torch.sh) runs the same Python anchor too when it is there.
python2="${COHORT_PYTHON2:-$HOME/.cache/cohort/torch-2.11.0/bin/python}"
out=$(mktemp)
common="--batch $batch --steps $steps --threads $threads"
# Every rank on a core of its own, cohort's (cohortrun --bind-cores) and PyTorch's alike: unbound, 2
# ranks on a 2-vCPU VM run fast or slow by where the scheduler puts them (docs/BENCHMARKS.md). BIND=0
# leaves placement to the kernel for both.
bind=--bind-cores; [ "${BIND:-1}" = 0 ] && bind=''
cohort() {  # ranks mode model
  $run --standalone $bind --nproc-per-node "$1" $step --mode "$2" --model "$3" $common 2>/dev/null | sed 's/^\[rank[0-9]*\]: //' |
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
      /usr/bin/python3 bench/scaling/scaling_step.py --nproc $n --model $model $common $bind 2>/dev/null | grep RESULT >>"$out"
      if [ -x "$python2" ]; then
        "$python2" bench/scaling/scaling_step.py --nproc $n --model $model $common $bind 2>/dev/null | grep RESULT |
          sed 's/impl=pytorch_ddp/impl=pytorch2_ddp/' >>"$out"
      fi
    done
    echo "rep $rep/$reps $model done" >&2
  done
done
plot_data=$(mktemp)
/usr/bin/python3 - "$out" "$csv" "$plot_data" <<'PY'
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
                        ("pytorch_ddp", "PyTorch 1.13 DDP (Python)"), ("pytorch2_ddp", "PyTorch 2.11 DDP (Python)")):
        if impl == "pytorch2_ddp" and not any(r["impl"] == impl for r in runs):
            continue
        base = med(model, impl, 1) if impl.startswith("pytorch") else one
        two = med(model, impl, 2)
        wait = med(model, impl, 2, "wait_ms") if impl == "cohort_ddp" else float("nan")
        print(f"| {model} | {label} | {base:.1f} | {two:.1f} | {two / base:.2f} | {two / ceiling:.0%} | {wait:.1f} |")
    print(f"| {model} | ceiling: 2 ranks alone at once | {one:.1f} | {ceiling:.1f} | {ceiling / one:.2f} | 100% | |")
# The plot's data: per model, the speedup 1 -> 2 ranks and the 2-rank throughput relative to PyTorch DDP.
impls = ("cohort_ddp", "cohort_zero1", "cohort_zero2", "pytorch_ddp", "ceiling")
with open(sys.argv[3], "w") as f:
    for model in ("resnet18", "vit", "cnn"):
        row = [model]
        for impl in impls:
            base = med(model, impl if impl == "pytorch_ddp" else "cohort_ddp", 1)
            two = med(model, impl, 2)
            row += [f"{two / base:.3f}", f"{two / med(model, 'pytorch_ddp', 2):.3f}"]
        f.write(" ".join(row) + "\n")
for model in ("resnet18", "vit", "cnn"):
    c, p, p2 = med(model, "cohort_ddp", 2), med(model, "pytorch_ddp", 2), med(model, "pytorch2_ddp", 2)
    print(f"\n{model}: cohort DDP / PyTorch 1.13 DDP at 2 ranks = {c / p:.2f}; / PyTorch 2.11 DDP = {c / p2:.2f}", end="")
print(f"\n\n(medians of {len([r for r in runs if r['impl'] == 'cohort_ddp' and r['model'] == 'cnn' and r['ranks'] == '2'])} "
      f"interleaved runs; batch {runs[0]['batch'] if runs else '?'} per rank; data: synthetic; CSV: {sys.argv[2]})")
PY
png=${csv%.csv}.png
if command -v gnuplot >/dev/null; then
  gnuplot -e "data='$plot_data'; out='$png'" bench/scaling/plot.gp && echo "plot: $png"
else
  echo "no plot: gnuplot is not installed (apt-get install gnuplot-nox)" >&2
fi
rm -f "$out" "$plot_data"
