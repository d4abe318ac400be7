#!/usr/bin/env bash
# The timeline's cost and what it shows, for the DDP and ZeRO benchmarks (bench/ddp, bench/zero) on
# 2 ranks: each configuration runs with the timeline off and on (COHORT_TIMELINE), interleaved; the
# tables give median samples/s off and on, the overhead, and the medians over every rank's steps of
# `cohort-trace summary` (compute, communication, overlap, exposed communication, idle) of the "on" runs.
# Usage: bench/timeline/run.sh [reps] [steps]   (needs -DCOHORT_BUILD_BENCH=ON)
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
reps=${1:-5}
steps=${2:-40}
run=build/tools/cohortrun
# Each rank on a core of its own (cohortrun --bind-cores): unbound, 2 ranks on this 2-vCPU VM run in a
# fast or a slow mode by where the scheduler puts them (docs/BENCHMARKS.md), which would swamp a 2%
# effect. BIND=0 leaves placement to the kernel.
bind=--bind-cores; [ "${BIND:-1}" = 0 ] && bind=''
trace_tool=build/tools/cohort_trace/cohort-trace
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results="$work/results"
summaries="$work/summaries.csv"
: >"$summaries"
# config name -> command (the step programs take --steps; batch as in their own run.sh)
declare -A commands=(
  [ddp_cnn]="build/bench/ddp/ddp_step --mode cohort --model cnn --batch 64 --threads 1 --steps $steps"
  [ddp_mlp]="build/bench/ddp/ddp_step --mode cohort --model mlp --batch 32 --threads 1 --steps $steps"
  [zero2_cnn]="build/bench/zero/zero_step --mode zero2 --bucket 262144 --model cnn --batch 64 --steps $steps"
  [zero2_mlp]="build/bench/zero/zero_step --mode zero2 --bucket 262144 --model mlp --batch 32 --steps $steps"
)
for rep in $(seq "$reps"); do
  for config in ddp_cnn ddp_mlp zero2_cnn zero2_mlp; do
    for timeline in off on; do
      trace="$work/$config-$rep.json"
      if [ "$timeline" = on ]; then export COHORT_TIMELINE="$trace"; else unset COHORT_TIMELINE; fi
      rate=$($run --standalone $bind --nproc-per-node 2 ${commands[$config]} 2>/dev/null | grep -o 'samples_per_s=[0-9.]*' | cut -d= -f2)
      echo "$config $timeline $rate" >>"$results"
      if [ "$timeline" = on ]; then
        $trace_tool summary "$trace" --csv | tail -n +2 | sed "s/^/$config,/" >>"$summaries"
        rm -f "$trace"
      fi
    done
  done
  echo "rep $rep/$reps done" >&2
done
unset COHORT_TIMELINE
/usr/bin/python3 - "$results" "$summaries" <<'PY'
import statistics, sys
from collections import defaultdict
rates = defaultdict(list)
for line in open(sys.argv[1]):
    config, timeline, rate = line.split()
    rates[(config, timeline)].append(float(rate))
steps = defaultdict(list)
for line in open(sys.argv[2]):
    f = line.strip().split(",")
    steps[f[0]].append([float(x) for x in f[3:10]])  # wall, compute, comm, hidden, overlap %, exposed, idle
configs = ["ddp_cnn", "ddp_mlp", "zero2_cnn", "zero2_mlp"]
print("| run | samples/s, timeline off | samples/s, on | overhead |")
print("|---|---|---|---|")
for c in configs:
    off, on = statistics.median(rates[(c, "off")]), statistics.median(rates[(c, "on")])
    print(f"| {c} | {off:.0f} | {on:.0f} | {100 * (off - on) / off:+.1f}% |")
print("\n| run | step ms | compute ms | comm ms | hidden ms | overlap % | exposed ms | idle ms |")
print("|---|---|---|---|---|---|---|---|")
for c in configs:
    m = [statistics.median(col) for col in zip(*steps[c])]
    print(f"| {c} | {m[0]:.2f} | {m[1]:.2f} | {m[2]:.2f} | {m[3]:.2f} | {m[4]:.0f} | {m[5]:.2f} | {m[6]:.2f} |")
print(f"\n(medians of {len(rates[('ddp_cnn', 'off')])} interleaved runs each; summary columns: medians over both ranks' steps)")
PY
