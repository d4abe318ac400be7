#!/usr/bin/env bash
# Async checkpoint saves against synchronous ones: cohort's save_checkpoint (SaveOptions::async) under
# fsdp (ZeRO-3) and PyTorch 2.11's dcp.save / dcp.async_save under FSDP2, on the same ~200M-parameter
# GPT (16 layers, 1024 wide, block 64, batch 1) with AdamW at 2 ranks, interleaved, each run doing
# `rounds` rounds of: plain steps, a sync save, an async save with the steps during its write, plain
# steps again. Prints every RESULT line and, per implementation, the medians: the time an async save
# blocks against a sync one, and a step during the write against a plain step.
#   bench/checkpoint/run.sh [reps] [rounds]    (BUILD=build-torch2: cohort's 2.11 build, bench on)
# DIR (default /tmp/cohort-save-bench) holds the checkpoints: a local disk, ~10 GB free.
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
reps=${1:-2}
rounds=${2:-3}
build=${BUILD:-build-torch2}
python=${COHORT_PYTHON2:-$HOME/.cache/cohort/torch-2.11.0/bin/python}
dir=${DIR:-/tmp/cohort-save-bench}
out=$(mktemp)
for rep in $(seq "$reps"); do
  rm -rf "$dir" && "$build/tools/cohortrun" --standalone --nproc-per-node 2 "$build/bench/checkpoint/save_step" \
    --dir "$dir" --rounds "$rounds" 2>/dev/null | sed 's/^\[rank0\]: //' | grep RESULT >>"$out"
  rm -rf "$dir" && "$python" bench/checkpoint/save_step.py --dir "$dir" --rounds "$rounds" 2>/dev/null | grep RESULT >>"$out"
  echo "rep $rep/$reps done" >&2
done
rm -rf "$dir"
cat "$out"
/usr/bin/python3 - "$out" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    fields = dict(f.split("=", 1) for f in line.split()[1:])
    if fields["mode"] == "fsdp":
        fields["mode"] = "cohort_fsdp"
    rows.setdefault(fields["mode"], []).append({k: float(v) for k, v in fields.items() if k not in ("mode",)})
print("| implementation | rounds | step | sync save blocks | async save blocks | async / sync | step during the write | during / plain | write |")
print("|---|---|---|---|---|---|---|---|---|")
for mode, rs in rows.items():
    m = lambda key: statistics.median(r[key] for r in rs)
    print(f"| {mode} | {len(rs)} | {m('step_s'):.2f} s | {m('sync_blocked_s'):.2f} s | {m('async_blocked_s'):.2f} s | "
          f"{statistics.median(r['async_blocked_s'] / r['sync_blocked_s'] for r in rs):.0%} | {m('step_during_s'):.2f} s | "
          f"{statistics.median(r['step_during_s'] / r['step_s'] for r in rs):.2f}x | {m('write_s'):.1f} s |")
PY
rm -f "$out"
