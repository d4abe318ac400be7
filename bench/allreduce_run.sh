#!/usr/bin/env bash
# cohort's allreduce next to Open MPI's on 2 local ranks: bench/allreduce --nproc 2 --mode sizes and
# bench/allreduce_mpi under mpirun -np 2 (ranks bound to cores, see BIND), taking turns run by run (the order flips
# each repetition), then one markdown table for docs/BENCHMARKS.md: per size the median over runs of
# each program's per-run median, and the median of the per-run ratios cohort / Open MPI.
# Usage: bench/allreduce_run.sh [runs] [flags for both programs, e.g. --reps 11 --max-bytes 16777216]
# MODE=pingpong compares send/recv instead (both programs' --mode pingpong: 8 B to 2 MiB, one-way us).
# (COHORT_BUILD_DIR names the build folder, default build/; allreduce_mpi needs CMake to find MPI.)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
[ $# -gt 0 ] && shift
build=${COHORT_BUILD_DIR:-build}
cohort=$build/bench/allreduce
mpi=$build/bench/allreduce_mpi
for program in "$cohort" "$mpi"; do
  [ -x "$program" ] || { echo "allreduce_run.sh: $program is not built (allreduce_mpi needs MPI: libopenmpi-dev)" >&2; exit 2; }
done
# BIND=1 (default) gives each rank a core of its own in both programs (cohortrun --bind-cores, mpirun
# --bind-to core): unbound, this VM's scheduler now and then puts both ranks on one vCPU after they slept
# (a ping-pong then takes ~10 us instead of ~2), which spinning cannot help. BIND=0: neither is bound.
bind=${BIND:-1}
mode=${MODE:-sizes}
mpirun=(mpirun --bind-to none --oversubscribe -np 2)
[ "$bind" = 1 ] && mpirun=(mpirun --bind-to core -np 2)
[ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)  # Open MPI refuses root without it
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1      # what bench/allreduce --nproc sets for its ranks
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "# bench/allreduce_run.sh $runs $* (MODE=$mode BIND=$bind)"
echo "# $(date -u '+%Y-%m-%d %H:%M') UTC, $(getconf _NPROCESSORS_ONLN) CPUs, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
# cohort's `alone` mode times its allreduce by itself, blocks lined up by its own barrier, as
# allreduce_mpi does with MPI_Barrier (`sizes` interleaves Gloo variants, whose sleeps move the ranks).
cohort_mode=$mode; [ "$mode" = sizes ] && cohort_mode=alone
run_cohort() {
  if [ "$bind" = 1 ]; then
    "$build/tools/cohortrun" --standalone --nproc-per-node 2 --bind-cores "$cohort" --mode "$cohort_mode" "$@" 2>/dev/null |
      sed 's/^\[rank0\]: //' >"$out/cohort.$run"
  else
    "$cohort" --nproc 2 --mode "$cohort_mode" "$@" >"$out/cohort.$run"
  fi
}
run_mpi() { "${mpirun[@]}" "$mpi" --mode "$mode" "$@" >"$out/mpi.$run"; }
for run in $(seq "$runs"); do
  if [ $((run % 2)) = 1 ]; then run_cohort "$@"; run_mpi "$@"; else run_mpi "$@"; run_cohort "$@"; fi
  echo "run $run/$runs done" >&2
done
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg); $(grep -m1 '^# bench/allreduce_mpi' "$out/mpi.1" | cut -c3-)"
python3 - "$out" "$runs" <<'PY'
import statistics, sys
folder, runs = sys.argv[1], int(sys.argv[2])

def rows(path):  # size in bytes -> the first time column (us): cohort's, or MPI's
    table = {}
    for line in open(path):
        parts = line.split("|")
        if line.startswith("#") or len(parts) < 2 or not parts[0].split():
            continue
        table[int(parts[0].split()[0])] = float(parts[1].split()[0])
    return table

cohort = [rows(f"{folder}/cohort.{r}") for r in range(1, runs + 1)]
mpi = [rows(f"{folder}/mpi.{r}") for r in range(1, runs + 1)]

def size_name(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB" if b >= 1 << 10 else f"{b} B"

print(f"\n| size | cohort median us | Open MPI median us | cohort / Open MPI |")
print("|---|---|---|---|")
for size in sorted(cohort[0]):
    c = statistics.median(t[size] for t in cohort)
    m = statistics.median(t[size] for t in mpi)
    ratio = statistics.median(a[size] / b[size] for a, b in zip(cohort, mpi))
    print(f"| {size_name(size)} | {c:.1f} | {m:.1f} | {ratio:.2f} |")
print(f"\n({runs} runs of each program, taking turns; ratio: median of the per-run ratios)")
PY
