#!/usr/bin/env bash
# The largest GPT that trains on this machine with 4 ranks under one mode: doubling then bisection over
# the depth (blocks of width 1024, 12.6M parameters each), a warm-up step and one more at batch 1 x 64
# tokens each, all ranks inside one memory cgroup of LIMIT_GIB (22 of the 24 GiB: the rest is the
# system's). A depth trains when every rank exits 0 under the limit. Prints one line per try and the
# answer. Usage: bench/gpt/largest.sh cohort ddp|zero1|zero2|zero3|fsdp [first-guess-layers [--sharded-init]]
#                bench/gpt/largest.sh torch ddp|fsdp [first-guess-layers [--meta-init]]
# (arguments after the guess go to each try's gpt_step).
# Root and cgroup v1's memory controller (/sys/fs/cgroup/memory) are needed for the limit.
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
impl=$1 mode=$2 guess=${3:-8}
extra=("${@:4}")
build=${BUILD:-build-torch2}
python=${COHORT_PYTHON2:-$HOME/.cache/cohort/torch-2.11.0/bin/python}
limit_gib=${LIMIT_GIB:-22}
resolution=${RESOLUTION:-2}
group=/sys/fs/cgroup/memory/cohort-gpt-largest-$$
[ -d /sys/fs/cgroup/memory ] && [ "$(id -u)" = 0 ] || { echo "largest.sh: needs root and /sys/fs/cgroup/memory" >&2; exit 2; }
mkdir "$group"
trap 'rmdir "$group" 2>/dev/null || true' EXIT
echo $((limit_gib << 30)) >"$group/memory.limit_in_bytes"
trains() {  # $1 = layers; 0 = trained under the limit
  local cmd
  if [ "$impl" = cohort ]; then
    cmd=("$build/tools/cohortrun" --standalone --nproc-per-node 4 "$build/bench/gpt/gpt_step" --mode "$mode")
  else
    cmd=("$python" bench/gpt/gpt_step.py --nproc 4 --mode "$mode")
  fi
  local line
  line=$(sh -c 'echo $$ >"$0/cgroup.procs"; exec "$@"' "$group" "${cmd[@]}" --n-layer "$1" --n-embd 1024 --n-head 16 \
         --block-size 64 --batch-size 1 --steps 1 --warmup 1 "${extra[@]}" 2>/dev/null | sed 's/^\[rank0\]: //' | grep RESULT) || true
  echo "try $impl $mode${extra[*]:+ ${extra[*]}} n_layer=$1: ${line:-did not train (killed at the ${limit_gib} GiB limit or failed)}" >&2
  [ -n "$line" ]
}
lo=0 hi=0
n=$guess
while trains "$n"; do lo=$n; n=$((n * 2)); done
hi=$n
while [ $((hi - lo)) -gt "$resolution" ]; do
  mid=$(((lo + hi) / 2))
  if trains "$mid"; then lo=$mid; else hi=$mid; fi
done
[ "$lo" -gt 0 ] || { echo "LARGEST impl=$impl mode=$mode${extra[*]:+ ${extra[*]}} none trained (fails at n_layer=$hi) limit_gib=$limit_gib"; exit 0; }
params=$(python3 -c "e=1024; print(round((256*e + 64*e + $lo*(12*e*e+13*e) + 2*e)/1e6, 1))")
echo "LARGEST impl=$impl mode=$mode${extra[*]:+ ${extra[*]}} n_layer=$lo (fails at $hi) params_millions=$params limit_gib=$limit_gib"
