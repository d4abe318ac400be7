#!/usr/bin/env bash
# C++ against PyTorch eager on one GPU, interleaved (cohort plain, PyTorch plain, cohort DDP, PyTorch
# DDP; repeated): the FashionCNN (batch 128) and ResNet-18 with the CIFAR stem (batch 256, 32x32).
# Prints medians and ratios as markdown for docs/BENCHMARKS.md.
# Usage: bench/gpu/run.sh [build-dir] [reps] [steps]   (python: COHORT_PYTHON, else python3)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-gpu}
reps=${2:-5}
steps=${3:-50}
python=${COHORT_PYTHON:-python3}
out=$(mktemp)
for model in cnn resnet18; do
  batch=128; [ "$model" = resnet18 ] && batch=256
  for rep in $(seq "$reps"); do
    for mode in plain ddp; do
      "$build/bench/gpu/gpu_step" --model $model --mode $mode --batch $batch --steps "$steps" | grep RESULT >>"$out"
      "$python" bench/gpu/gpu_step.py --model $model --mode $mode --batch $batch --steps "$steps" 2>/dev/null |
        grep RESULT >>"$out"
    done
  done
done
"$python" - "$out" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = dict(re.findall(r"(\w+)=([\w.+-]+)", line))
    rows.setdefault((f["model"], f["impl"]), []).append(f)
med = lambda k, field: statistics.median(float(r[field]) for r in rows[k])
print("| model | batch | cohort C++ samples/s | PyTorch eager samples/s | C++ / PyTorch | cohort DDP (world of 1) | PyTorch DDP (world of 1) | cohort DDP overhead | PyTorch DDP overhead |")
print("|---|---|---|---|---|---|---|---|---|")
for model in ("cnn", "resnet18"):
    c, p = med((model, "cohort_plain"), "samples_per_s"), med((model, "pytorch_plain"), "samples_per_s")
    cd, pd = med((model, "cohort_ddp"), "samples_per_s"), med((model, "pytorch_ddp"), "samples_per_s")
    b = rows[(model, "cohort_plain")][0]["batch"]
    print(f"| {model} | {b} | {c:.0f} | {p:.0f} | {c / p:.2f} | {cd:.0f} | {pd:.0f} | {c / cd - 1:+.1%} | {p / pd - 1:+.1%} |")
r = rows[("cnn", "cohort_plain")][0]
print(f"\n(medians of {len(rows[('cnn', 'cohort_plain')])} interleaved runs; LibTorch {r['torch']})")
PY
rm -f "$out"
