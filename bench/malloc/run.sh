#!/usr/bin/env bash
# Page faults per step and samples/s of a training step under each allocator choice, for cohort and for
# PyTorch's Python given the same treatment (issue 16). Each run is timed by /usr/bin/time (%R minor
# faults, %e wall seconds, %M peak RSS of the largest process) twice, at STEPS steps and at 1 step;
# per step = (long - short) / (STEPS - 1), so start-up (loading LibTorch, the data, Python) cancels.
#   cohort   build/examples/fashion_mnist (the example, batch 64 per rank), 1 rank and, under
#            cohortrun --standalone, 2 ranks
#   pytorch  bench/ddp/ddp_step.py --model cnn --batch 64 (the same FashionCNN, synthetic input), Debian's
#            /usr/bin/python3, 1 and 2 ranks (fork)
# Allocators: glibc (its defaults; COHORT_MALLOC_TUNING=0), policy (cohort's default: init() raises
# glibc's mmap and trim thresholds; for Python the same thresholds through GLIBC_TUNABLES), jemalloc and
# tcmalloc (LD_PRELOAD of Debian's libjemalloc2 / libtcmalloc-minimal4, skipped when not installed).
# Usage: bench/malloc/run.sh [reps] [steps]   (defaults 2 and 200; configurations interleaved per rep)
set -euo pipefail
cd "$(dirname "$0")/../.."
reps=${1:-2}
steps=${2:-200}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
data=${COHORT_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
example=build/examples/fashion_mnist
run=build/tools/cohortrun
tunables=glibc.malloc.mmap_threshold=67108864:glibc.malloc.trim_threshold=268435456
libdir=/usr/lib/$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
declare -A preload=([glibc]="" [policy]="" [jemalloc]="$libdir/libjemalloc.so.2" [tcmalloc]="$libdir/libtcmalloc_minimal.so.4")
allocators=(glibc policy)
for a in jemalloc tcmalloc; do [ -e "${preload[$a]}" ] && allocators+=("$a"); done
out=$(mktemp)
trap 'rm -f "$out" "$out.time"' EXIT

# One measured run: prints "faults seconds peak_kib" of /usr/bin/time.
measure() {
  local allocator=$1 impl=$2 ranks=$3 n=$4
  local env=(env)
  case "$allocator" in
    glibc) env+=(COHORT_MALLOC_TUNING=0) ;;
    policy) [ "$impl" = pytorch ] && env+=(GLIBC_TUNABLES=$tunables) ;;
    *) env+=(COHORT_MALLOC_TUNING=0 LD_PRELOAD="${preload[$allocator]}") ;;
  esac
  local cmd
  if [ "$impl" = cohort ] && [ "$ranks" = 1 ]; then
    cmd=("$example" --data "$data" --max-steps "$n" --progress off --threads 1)
  elif [ "$impl" = cohort ]; then
    cmd=("$run" --standalone --nproc-per-node "$ranks" "$example" --data "$data" --max-steps "$n" --progress off)
  else
    cmd=(/usr/bin/python3 bench/ddp/ddp_step.py --model cnn --batch 64 --nproc "$ranks" --steps "$n" --warmup 0)
  fi
  "${env[@]}" /usr/bin/time -f "%R %e %M" -o "$out.time" "${cmd[@]}" >/dev/null 2>&1
  cat "$out.time"
}

echo "# bench/malloc/run.sh $reps $steps: $(date -u '+%Y-%m-%d %H:%M') UTC, $(getconf _NPROCESSORS_ONLN) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
for rep in $(seq "$reps"); do
  for impl in cohort pytorch; do
    for ranks in 1 2; do
      for allocator in "${allocators[@]}"; do
        read -r f1 s1 m1 < <(measure "$allocator" "$impl" "$ranks" 1)
        read -r fn sn mn < <(measure "$allocator" "$impl" "$ranks" "$steps")
        echo "RESULT impl=$impl ranks=$ranks allocator=$allocator faults_1=$f1 faults_n=$fn seconds_1=$s1 seconds_n=$sn peak_kib=$mn" >>"$out"
        echo "rep $rep: $impl $ranks rank(s) $allocator done" >&2
      done
    done
  done
done
python3 - "$out" "$steps" <<'PY'
import re, statistics, sys
steps = int(sys.argv[2])
rows = {}
for line in open(sys.argv[1]):
    f = dict(re.findall(r"(\w+)=([\w.]+)", line))
    key = (f["impl"], int(f["ranks"]), f["allocator"])
    per_step = (int(f["faults_n"]) - int(f["faults_1"])) / (steps - 1)
    seconds = float(f["seconds_n"]) - float(f["seconds_1"])
    samples = 64 * int(f["ranks"]) * (steps - 1) / seconds if seconds > 0 else float("nan")
    rows.setdefault(key, []).append((per_step, samples, int(f["peak_kib"]) / 1024))
print("\n| program | ranks | allocator | faults per step (all ranks) | samples/s | peak RSS MiB (largest process) |")
print("|---|---|---|---|---|---|")
for (impl, ranks, allocator), values in rows.items():
    med = [statistics.median(v[i] for v in values) for i in range(3)]
    print(f"| {impl} | {ranks} | {allocator} | {med[0]:.0f} | {med[1]:.0f} | {med[2]:.0f} |")
print(f"\n(medians of {len(next(iter(rows.values())))} runs; per step = ({steps}-step run - 1-step run) / {steps - 1})")
PY
