#!/usr/bin/env bash
# ZeRO-Offload on one GPU (issue 40), with bench/gpt/gpt_step --device cuda:
# 1. speed at a size that fits both ways: the GPT step at stage 2 in fp32 without offload and with
#    offload_optimizer cpu (masters, AdamW state and the step on the host's cores, gradients down and
#    parameters up through the bounded page-locked staging), interleaved ROUNDS times;
# 2. the largest model: the GPU held to CAP_GIB (the caching allocator's fraction, as a cgroup holds
#    host memory), bf16 with activation checkpointing, stage 3 without offload at growing depth until
#    one does not fit, then with optimizer and parameters on the host at FACTOR times the largest
#    that fitted (and at that size too, beside the run without offload); each prints its first and
#    last loss.
# Prints RESULT lines. Usage: bench/gpu/offload.sh [build-dir]  (the build's LibTorch libraries are
# found through COHORT_PYTHON's torch, else python3's; PARTS="speed largest" chooses what runs)
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-torch2}
python=${COHORT_PYTHON:-python3}
torch_lib=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')/lib
# the CUDA runtime the wheel brought (nvidia/*/lib), which the programs link directly
cuda_libs=$("$python" - <<'PY' 2>/dev/null
import glob, os
try:
    import nvidia
    roots = list(nvidia.__path__)
except ImportError:
    roots = []
print(":".join(sorted({os.path.dirname(p) for r in roots for p in glob.glob(os.path.join(r, "**", "libcudart.so*"), recursive=True)})))
PY
)
export LD_LIBRARY_PATH="$torch_lib:${cuda_libs:+$cuda_libs:}$build/src:${LD_LIBRARY_PATH:-}"
threads=${THREADS:-$(nproc)}
rounds=${ROUNDS:-2} cap=${CAP_GIB:-8} factor=${FACTOR:-5}
step() {  # flags...: one RESULT line, or "FAILED <reason>"
  local out
  out=$(timeout "${RUN_TIMEOUT:-240}" "$build/bench/gpt/gpt_step" --device cuda --threads "$threads" "$@" 2>&1)
  grep '^RESULT' <<<"$out" || echo "FAILED $(grep -iE 'error|out of memory|what\(\)' <<<"$out" | head -3 | cut -c1-400)"
}
speed=(--n-layer "${LAYERS:-12}" --n-embd "${EMBD:-1024}" --n-head 16 --block-size 512 --batch-size "${BATCH:-32}"
       --steps "${STEPS:-5}" --warmup 2 --mode "${MODE:-zero2}" ${EXTRA:-})
parts=${PARTS:-speed largest}
if [[ $parts == *speed* ]]; then
echo "== speed: fp32, ${speed[*]}"
for round in $(seq "$rounds"); do
  for offload in none cpu; do
    echo "round $round offload_optimizer=$offload: $(step "${speed[@]}" --offload-optimizer "$offload")"
  done
done
fi
[[ $parts == *largest* ]] || exit 0
echo "== largest in $cap GiB: zero3 bf16, activation checkpointing, n_embd 2048"
big=(--n-embd 2048 --n-head 16 --block-size 256 --batch-size 4 --steps "${BIG_STEPS:-4}" --warmup 1 --mode zero3
     --precision bf16 --activation-checkpointing --device-memory-gib "$cap")
fits=0
for layers in ${DEPTHS:-4 6 8 10 12 14}; do
  line=$(step "${big[@]}" --n-layer "$layers")
  echo "no offload n_layer=$layers: $line"
  [[ $line == RESULT* ]] || break
  fits=$layers
done
if [ "$fits" -gt 0 ]; then
  echo "offload cpu n_layer=$fits (the same model): $(step "${big[@]}" --n-layer "$fits" \
    --offload-optimizer cpu --offload-params cpu)"
  layers=$((fits * factor))
  echo "offload cpu n_layer=$layers ($factor x $fits): $(RUN_TIMEOUT=400 step "${big[@]}" --n-layer "$layers" \
    --offload-optimizer cpu --offload-params cpu)"
fi
