#!/usr/bin/env bash
# Cohort's ZeRO-3 beside DeepSpeed's on the CPU (issue 40, "Beyond memory"): the same GPT, batch, fp32
# AdamW (lr 1e-4) and threads, stage 3 without offload, with optimizer and parameters offloaded to cpu,
# and to nvme (ZeRO-Infinity: both on swap files under NVME_DIR); cohort's gpt_step under cohortrun
# and DeepSpeed's ZeRO-3 on its CPU accelerator with Gloo (bench/gpt/deepspeed_step.py, DeepSpeed
# installed in the 2.11 venv), interleaved ROUNDS times. Prints every RESULT line, then a markdown table
# of medians: step time, peak resident memory per rank (max VmHWM over ranks) and cohort / DeepSpeed.
# Usage: bench/gpt/deepspeed.sh [NVME_DIR]
#   env: BUILD (build-torch2), ROUNDS (3), RANKS (2), LAYERS (6), EMBD (384), BATCH (4), STEPS (3),
#        OFFLOADS ("none cpu nvme"), KEEP=file keeps the raw lines, COHORT_PYTHON2 (the venv's python).
# The first DeepSpeed run JIT-compiles its ops (fused_adam, cpu_adam, async_io, shm_comm) into
# ~/.cache/torch_extensions, minutes each; run each offload once before timing (WARM=1 does).
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 DS_ACCELERATOR=cpu
nvme=${1:-/tmp/cohort-deepspeed-bench}
build=${BUILD:-build-torch2}
python=${COHORT_PYTHON2:-$HOME/.cache/cohort/torch-2.11.0/bin/python}
ranks=${RANKS:-2} rounds=${ROUNDS:-3} layers=${LAYERS:-6} embd=${EMBD:-384} batch=${BATCH:-4} steps=${STEPS:-3}
model=(--n-layer "$layers" --n-embd "$embd" --n-head 6 --block-size 128 --batch-size "$batch" --steps "$steps" --warmup 1)

flags_of() {  # offload -> the flags both sides take
  case $1 in
    none) ;;
    cpu) echo --offload-optimizer cpu --offload-params cpu ;;
    nvme) echo --offload-optimizer nvme --offload-params nvme --nvme-path "$nvme/$2" ;;
  esac
}
run_cohort() {  # offload
  rm -rf "$nvme/cohort" && mkdir -p "$nvme/cohort"
  "$build/tools/cohortrun" --standalone --nproc-per-node "$ranks" "$build/bench/gpt/gpt_step" --mode zero3 \
    "${model[@]}" $(flags_of "$1" cohort) 2>/dev/null | sed 's/^\[rank0\]: //' | grep '^RESULT'
}
run_deepspeed() {  # offload
  rm -rf "$nvme/deepspeed" && mkdir -p "$nvme/deepspeed"
  "$python" bench/gpt/deepspeed_step.py --nproc "$ranks" "${model[@]}" $(flags_of "$1" deepspeed) 2>/dev/null |
    grep '^RESULT'
}
results=$(mktemp)
trap 'rm -f "$results"; rm -rf "$nvme/cohort" "$nvme/deepspeed"' EXIT
if [[ -n ${WARM:-} ]]; then
  for offload in ${OFFLOADS:-none cpu nvme}; do run_deepspeed "$offload" >/dev/null || true; done
fi
for round in $(seq "$rounds"); do
  for offload in ${OFFLOADS:-none cpu nvme}; do
    for impl in cohort deepspeed; do
      if line=$("run_$impl" "$offload"); then
        echo "round $round $offload $impl: $line"
        echo "$offload $impl $line" >>"$results"
      else
        echo "round $round $offload $impl: FAILED (rerun by hand to see why)"
      fi
    done
  done
done
cp "$results" "${KEEP:-/dev/null}"
"$python" - "$results" <<'EOF'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    offload, impl, rest = line.split(' ', 2)
    fields = dict(re.findall(r'(\w+)=([^ ]+)', rest))
    runs.setdefault((offload, impl), []).append(
        (float(fields['step_s']), float(fields['peak_max_mib']), float(fields['samples_per_s'])))
first = next(iter(open(sys.argv[1]))).split(' ', 2)[2]
f = dict(re.findall(r'(\w+)=([^ ]+)', first))
print(f"\nmedians: GPT {f['n_layer']} blocks x {f['n_embd']} ({int(f['params']) / 1e6:.1f} M parameters), "
      f"{f['ranks']} ranks, stage 3, fp32 AdamW")
print("| offload | cohort step (s) | DeepSpeed step (s) | step cohort / DeepSpeed | cohort peak/rank (MiB) "
      "| DeepSpeed peak/rank (MiB) | peak cohort / DeepSpeed | runs |")
print("|---|---|---|---|---|---|---|---|")
for offload in dict.fromkeys(k[0] for k in runs):
    c, d = runs.get((offload, 'cohort'), []), runs.get((offload, 'deepspeed'), [])
    med = lambda rows, i: statistics.median(r[i] for r in rows) if rows else float('nan')
    name = {'none': 'none', 'cpu': 'optimizer + params -> cpu', 'nvme': 'optimizer + params -> nvme'}.get(offload, offload)
    print(f"| {name} | {med(c, 0):.3f} | {med(d, 0):.3f} | {med(c, 0) / med(d, 0):.2f} | {med(c, 1):.0f} | "
          f"{med(d, 1):.0f} | {med(c, 1) / med(d, 1):.2f} | {len(c)} / {len(d)} |")
EOF
