#!/usr/bin/env bash
# The GPT memory benchmark: models/gpt.h under cohort's DDP and ZeRO-1/2/3, with and without
# activation checkpointing, against PyTorch 2.11's DDP and FSDP2 (fully_shard per block, then the
# root) on the same model, batch, sequence length and AdamW; 2 and 4 ranks, interleaved, medians.
# Prints a markdown table for docs/BENCHMARKS.md: peak resident memory per rank, the formula
# (16 bytes/param / N sharded + 2 gathered blocks), samples/s and the ratios. Cohort's "fsdp" is its
# stage 3 prefetching one block, as FSDP2 does; "zero3" keeps DeepSpeed's default prefetch bucket
# (5e7 elements: here the whole model). MODES / TORCH_MODES pick rows; KEEP=file keeps the raw lines.
#   bench/gpt/run.sh [reps] [steps]    (BUILD=build-torch2 by default: cohort's 2.11 build)
# RANKS="2" limits the rank counts (default "2 4").
# Run it on an otherwise quiet machine; the 2.11 venv comes from scripts/install-torch.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
reps=${1:-2}
steps=${2:-3}
build=${BUILD:-build-torch2}
python=${COHORT_PYTHON2:-$HOME/.cache/cohort/torch-2.11.0/bin/python}
model=(--n-layer "${N_LAYER:-8}" --n-embd "${N_EMBD:-768}" --n-head 12 --block-size 64 --batch-size 2)
out=$(mktemp)
for rep in $(seq "$reps"); do
  for ranks in ${RANKS:-2 4}; do
    for mode in ${MODES:-ddp zero1 zero2 zero3 fsdp}; do
      for ckpt in "" --activation-checkpointing; do
        "$build/tools/cohortrun" --standalone --nproc-per-node "$ranks" "$build/bench/gpt/gpt_step" --mode "$mode" $ckpt \
          "${model[@]}" --steps "$steps" --warmup 1 2>/dev/null | sed 's/^\[rank0\]: //' | grep RESULT >>"$out"
      done
    done
    for mode in ${TORCH_MODES:-ddp fsdp}; do
      for ckpt in "" --activation-checkpointing; do
        "$python" bench/gpt/gpt_step.py --nproc "$ranks" --mode "$mode" $ckpt "${model[@]}" --steps "$steps" --warmup 1 \
          2>/dev/null | grep RESULT >>"$out"
      done
    done
    echo "rep $rep/$reps, $ranks ranks done" >&2
  done
done
cp "$out" "${KEEP:-/dev/null}"
"$python" bench/gpt/report.py "$out"
rm -f "$out"
