#!/usr/bin/env bash
# The Trainer's per-step overhead: cohort::Trainer against the hand-written loop doing the same work
# (same network, synthetic data, sampler order, SGD), DDP on 2 ranks and "single" on 1, interleaved
# (loop, Trainer, loop, Trainer, ...; repeated), printing the medians and the overhead as a markdown
# table for docs/BENCHMARKS.md. Usage: bench/trainer/run.sh [reps] [steps]
set -euo pipefail
cd "$(dirname "$0")/../.."
# One thread per process everywhere (cohortrun sets OMP_NUM_THREADS only for several workers, and
# Debian's LibTorch multiplies with OpenBLAS, which torch::set_num_threads misses).
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
reps=${1:-7}
steps=${2:-60}
run=${COHORTRUN:-build/tools/cohortrun}  # COHORTRUN: another build's launcher
# Each rank on its own core: unbound, 2 ranks on this 2-vCPU VM ran 104 or 137 ms a CNN step by where
# the scheduler put them, whatever the code (docs/BENCHMARKS.md). BIND=0 leaves placement to the kernel.
bind=--bind-cores; [ "${BIND:-1}" = 0 ] && bind=''
step=build/bench/trainer/trainer_step
out=$(mktemp)
for rep in $(seq "$reps"); do
  for model in cnn mlp; do
    batch=32; [ "$model" = cnn ] && batch=64
    common="--model $model --batch $batch --steps $steps --threads 1"
    for strategy in ddp single; do
      nproc=2; [ "$strategy" = single ] && nproc=1
      for mode in loop trainer; do
        $run --standalone $bind --nproc-per-node $nproc $step --mode $mode --strategy $strategy $common 2>/dev/null |
          sed 's/^\[rank0\]: //' | grep RESULT >>"$out"
      done
    done
  done
  echo "rep $rep/$reps done" >&2
done
/usr/bin/python3 - "$out" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = dict(re.findall(r"(\w+)=([\w.]+)", line))
    rows.setdefault((f["model"], f["strategy"], f["impl"]), []).append(float(f["step_ms"]))
print("| model | strategy | ranks | hand-written loop ms/step | Trainer ms/step | Trainer overhead | per step |")
print("|---|---|---|---|---|---|---|")
for model in ("cnn", "mlp"):
    for strategy, ranks in (("ddp", 2), ("single", 1)):
        loop, trainer = (statistics.median(rows[(model, strategy, i)]) for i in ("loop", "trainer"))
        print(f"| {model} | {strategy} | {ranks} | {loop:.2f} | {trainer:.2f} | {trainer / loop - 1:+.1%} | "
              f"{1000 * (trainer - loop):+.0f} us |")
print(f"\n(medians of {len(rows[('mlp', 'ddp', 'loop')])} interleaved runs each)")
PY
rm -f "$out"
