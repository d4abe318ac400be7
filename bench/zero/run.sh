#!/usr/bin/env bash
# The ZeRO engine against cohort's DDP on 2 ranks, interleaved (ddp, zero1, zero2, zero3; repeated),
# printing medians as a markdown table for docs/BENCHMARKS.md. The _overlap rows set reduce_bucket_size
# 262144 (1 MiB of fp32) and overlap_comm, so gradients are reduced while backward runs, as DDP does. Usage: bench/zero/run.sh [reps] [steps]
# Loopback bytes count every rank's traffic, so run it on an otherwise quiet machine, and with
# COHORT_SHM=0 (Gloo over loopback): the shared-memory transport moves no bytes over loopback.
set -euo pipefail
cd "$(dirname "$0")/../.."
reps=${1:-5}
steps=${2:-30}
run=build/tools/cohortrun
step=build/bench/zero/zero_step
out=$(mktemp)
for model in mlp cnn; do
  batch=32; [ "$model" = cnn ] && batch=64
  for rep in $(seq "$reps"); do
    for mode in ddp zero1 zero2 zero3 zero1:262144 zero2:262144; do
      $run --standalone --nproc-per-node 2 $step --mode ${mode%%:*} --bucket $( [ "${mode#*:}" != "$mode" ] && echo "${mode#*:}" || echo 0) \
        --model $model --batch $batch --steps "$steps" 2>/dev/null | sed 's/^\[rank0\]: //' | grep RESULT >>"$out"
    done
    echo "rep $rep/$reps $model done" >&2
  done
done
/usr/bin/python3 - "$out" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = dict(re.findall(r"(\w+)=([\w.]+)", line))
    rows.setdefault((f["model"], f["mode"]), []).append(f)
def med(key, field):
    return statistics.median(float(r[field]) for r in rows[key])
print("| model | mode | samples/s | vs DDP | loopback bytes/step | vs DDP | model-state bytes/rank |")
print("|---|---|---|---|---|---|---|")
for model in ("mlp", "cnn"):
    base_s, base_b = med((model, "ddp"), "samples_per_s"), med((model, "ddp"), "lo_bytes_per_step")
    for mode in ("ddp", "zero1", "zero2", "zero3", "zero1_overlap", "zero2_overlap"):
        s, b, m = (med((model, mode), k) for k in ("samples_per_s", "lo_bytes_per_step", "state_bytes"))
        print(f"| {model} | {mode} | {s:.0f} | {s / base_s:.2f} | {b / 1e6:.2f} MB | {b / base_b:.2f} | {m / 1e6:.2f} MB |")
print(f"\n(medians of {len(rows[('mlp', 'ddp')])} interleaved runs each; psi = "
      f"{rows[('mlp', 'ddp')][0]['psi']} (mlp), {rows[('cnn', 'ddp')][0]['psi']} (cnn))")
PY
rm -f "$out"
