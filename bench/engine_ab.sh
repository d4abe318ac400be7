#!/usr/bin/env bash
# Two builds of cohort side by side on the ZeRO engine's benchmarks (bench/zero's zero_step, bench/gpt's
# gpt_step at 2 ranks), interleaved: each repetition runs every case with A then B, the next with B then
# A, so drift of the machine falls on both. Prints a markdown table of medians (and the range) of
# samples/s and B / A. Used for the engine split (issue 40): A = the commit before it, B = main.
#   bench/engine_ab.sh BUILD_A BUILD_B [reps]
# Each build needs COHORT_BUILD_BENCH=ON (Release, not COHORT_QUICK_PROGRAMS): targets cohortrun,
# zero_step, gpt_step. CASES picks rows by name (default: all); run it on an otherwise quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
[ $# -ge 2 ] || { echo "usage: bench/engine_ab.sh BUILD_A BUILD_B [reps]" >&2; exit 2; }
builds=("$1" "$2")
reps=${3:-5}
for b in "${builds[@]}"; do
  for t in tools/cohortrun bench/zero/zero_step bench/gpt/gpt_step; do
    [ -x "$b/$t" ] || { echo "bench/engine_ab.sh: $b/$t is missing (build with COHORT_BUILD_BENCH=ON)" >&2; exit 2; }
  done
done
gpt=(--n-layer 4 --n-embd 384 --n-head 6 --block-size 64 --batch-size 2 --steps 4 --warmup 1)
declare -A cases=(
  [zero_mlp_ddp]="zero/zero_step --model mlp --batch 32 --steps 30 --bucket 0 --mode ddp"
  [zero_mlp_zero1]="zero/zero_step --model mlp --batch 32 --steps 30 --bucket 0 --mode zero1"
  [zero_mlp_zero2]="zero/zero_step --model mlp --batch 32 --steps 30 --bucket 0 --mode zero2"
  [zero_mlp_zero3]="zero/zero_step --model mlp --batch 32 --steps 30 --bucket 0 --mode zero3"
  [zero_cnn_zero1]="zero/zero_step --model cnn --batch 64 --steps 30 --bucket 0 --mode zero1"
  [zero_cnn_zero2_overlap]="zero/zero_step --model cnn --batch 64 --steps 30 --bucket 262144 --mode zero2"
  [zero_cnn_zero3]="zero/zero_step --model cnn --batch 64 --steps 30 --bucket 0 --mode zero3"
  [gpt_zero1]="gpt/gpt_step --mode zero1 ${gpt[*]}"
  [gpt_zero2]="gpt/gpt_step --mode zero2 ${gpt[*]}"
  [gpt_zero3]="gpt/gpt_step --mode zero3 ${gpt[*]}"
  [gpt_fsdp]="gpt/gpt_step --mode fsdp ${gpt[*]}"
)
names=(${CASES:-$(printf '%s\n' "${!cases[@]}" | sort)})
out=$(mktemp)
for rep in $(seq "$reps"); do
  order=(0 1)
  [ $((rep % 2)) -eq 0 ] && order=(1 0)
  for name in "${names[@]}"; do
    [ -n "${cases[$name]:-}" ] || { echo "bench/engine_ab.sh: no case '$name'" >&2; exit 2; }
    for side in "${order[@]}"; do
      b=${builds[$side]}
      line=$("$b/tools/cohortrun" --standalone --nproc-per-node 2 "$b/bench/"${cases[$name]} 2>/dev/null |
        sed 's/^\[rank0\]: //' | grep RESULT || true)
      [ -n "$line" ] || { echo "bench/engine_ab.sh: $name on $b printed no RESULT" >&2; exit 1; }
      rate=$(sed -E 's/.*samples_per_s=([0-9.]+).*/\1/' <<<"$line")
      echo "$name $side $rate" >>"$out"
    done
  done
  echo "rep $rep/$reps done" >&2
done
python3 - "$out" "${builds[@]}" <<'PY'
import statistics, sys
rates = {}
for line in open(sys.argv[1]):
    name, side, rate = line.split()
    rates.setdefault(name, ([], []))[int(side)].append(float(rate))
print(f"A = {sys.argv[2]}, B = {sys.argv[3]}\n")
print("| case | A samples/s (range) | B samples/s (range) | B / A |")
print("|---|---|---|---|")
for name in sorted(rates):
    a, b = rates[name]
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"| {name} | {ma:.1f} ({min(a):.1f}-{max(a):.1f}) | {mb:.1f} ({min(b):.1f}-{max(b):.1f}) | {mb / ma:.3f} |")
print(f"\n(medians of {len(next(iter(rates.values()))[0])} interleaved runs each, 2 ranks)")
PY
rm -f "$out"
