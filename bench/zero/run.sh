#!/usr/bin/env bash
# The ZeRO engine against cohort's DDP on 2 ranks, interleaved (ddp, zero1, zero2, zero3; repeated),
# printing medians as a markdown table for docs/BENCHMARKS.md. The _overlap rows set reduce_bucket_size
# 262144 (1 MiB of fp32) and overlap_comm, so gradients are reduced while backward runs, as DDP does. Usage: bench/zero/run.sh [reps] [steps]
# Loopback bytes count every rank's traffic, so run it on an otherwise quiet machine, and with
# COHORT_SHM=0 (Gloo over loopback): the shared-memory transport moves no bytes over loopback.
set -euo pipefail
cd "$(dirname "$0")/../.."
# One thread per process everywhere, the 1-rank runs included (cohortrun sets OMP_NUM_THREADS only for
# several workers, and Debian's LibTorch multiplies with OpenBLAS, which torch::set_num_threads misses).
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
reps=${1:-5}
steps=${2:-30}
run=build/tools/cohortrun
step=build/bench/zero/zero_step
out=$(mktemp)
# PyTorch's anchors (bench/zero/zero_step.py: DDP+Adam and ZeroRedundancyOptimizer) under 1.13 and, when
# installed (scripts/install-torch.sh, or COHORT_PYTHON2), 2.11.
python2="${COHORT_PYTHON2:-$HOME/.cache/cohort/torch-2.11.0/bin/python}"
pythons=(/usr/bin/python3)
[ -x "$python2" ] && pythons+=("$python2")
for model in mlp cnn; do
  batch=32; [ "$model" = cnn ] && batch=64
  for rep in $(seq "$reps"); do
    for mode in ddp zero1 zero2 zero3 zero1:262144 zero2:262144; do
      $run --standalone --nproc-per-node 2 $step --mode ${mode%%:*} --bucket $( [ "${mode#*:}" != "$mode" ] && echo "${mode#*:}" || echo 0) \
        --model $model --batch $batch --steps "$steps" 2>/dev/null | sed 's/^\[rank0\]: //' | grep RESULT >>"$out"
    done
    for python in "${pythons[@]}"; do
      for mode in ddp zero1; do
        "$python" bench/zero/zero_step.py --mode $mode --model $model --batch $batch --steps "$steps" 2>/dev/null |
          grep RESULT | sed -E 's/mode=torch_([a-z0-9]+)(.*) torch=([0-9]+)\.([0-9]+).*/mode=torch\3.\4_\1\2/' >>"$out"
      done
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
anchors = sorted({m for (_, m) in rows if m.startswith("torch")})
if anchors:
    print("\n| model | anchor | samples/s | cohort zero1 / anchor | cohort ddp / anchor |")
    print("|---|---|---|---|---|")
    for model in ("mlp", "cnn"):
        for anchor in anchors:
            a = med((model, anchor), "samples_per_s")
            print(f"| {model} | {anchor} | {a:.0f} | {med((model, 'zero1'), 'samples_per_s') / a:.2f} | "
                  f"{med((model, 'ddp'), 'samples_per_s') / a:.2f} |")
print(f"\n(medians of {len(rows[('mlp', 'ddp')])} interleaved runs each; psi = "
      f"{rows[('mlp', 'ddp')][0]['psi']} (mlp), {rows[('cnn', 'ddp')][0]['psi']} (cnn))")
PY
rm -f "$out"
