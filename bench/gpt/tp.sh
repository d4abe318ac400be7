#!/usr/bin/env bash
# Tensor parallel x FSDP side by side (issue 41): the GPT of bench/gpt/run.sh on 4 ranks, cut over
# tp groups of 2 (models/gpt.h's plan) and sharded over the 2 data-parallel ranks, under cohort
# (gpt_step --mode fsdp --tp 2: the engine over the mesh's data_parallel group) and PyTorch 2.11
# (gpt_step.py --tp 2: parallelize_module on a 2-D init_device_mesh's "tp", then fully_shard on its
# "dp"), with flat fsdp on 4 ranks of each for reference; interleaved, medians. Both print each run's
# first and last loss: at the same mesh the same model and batch give the same curve in each.
#   bench/gpt/tp.sh [reps] [steps]    (BUILD=build-torch2 by default: cohort's 2.11 build)
# Run it on an otherwise quiet machine; the 2.11 venv comes from scripts/install-torch.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
reps=${1:-3}
steps=${2:-3}
build=${BUILD:-build-torch2}
python=${COHORT_PYTHON2:-$HOME/.cache/cohort/torch-2.11.0/bin/python}
model=(--n-layer "${N_LAYER:-8}" --n-embd "${N_EMBD:-768}" --n-head "${N_HEAD:-12}" --block-size 64 --batch-size 2)
out=$(mktemp)
for rep in $(seq "$reps"); do
  for tp in 2 1; do
    "$build/tools/cohortrun" --standalone --nproc-per-node 4 "$build/bench/gpt/gpt_step" --mode fsdp --tp "$tp" \
      "${model[@]}" --steps "$steps" --warmup 1 2>/dev/null | sed 's/^\[rank0\]: //' | grep RESULT >>"$out"
    "$python" bench/gpt/gpt_step.py --nproc 4 --mode fsdp --tp "$tp" "${model[@]}" --steps "$steps" --warmup 1 \
      2>/dev/null | grep RESULT >>"$out"
  done
  echo "rep $rep/$reps done" >&2
done
cp "$out" "${KEEP:-/dev/null}"
"$python" - "$out" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = dict(re.findall(r"(\w+)=([\w.+-]+)", line))
    rows.setdefault(f["mode"], []).append(f)
med = lambda mode, key: statistics.median(float(r[key]) for r in rows[mode])
torch_of = lambda mode: next(m for m in rows if m.startswith("torch") and m.endswith("+tp2") == mode.endswith("+tp2"))
print("| mode (4 ranks) | samples/s | vs PyTorch, same mesh | peak MiB/rank | vs PyTorch | first loss | last loss |")
print("|---|---|---|---|---|---|---|")
for mode in sorted(rows, key=lambda m: (m.startswith("torch"), m)):
    s, peak, other = med(mode, "samples_per_s"), med(mode, "peak_max_mib"), torch_of(mode)
    print(f"| {mode} | {s:.3f} | {s / med(other, 'samples_per_s'):.2f} | {peak:.0f} | "
          f"{peak / med(other, 'peak_max_mib'):.2f} | {rows[mode][0]['first_loss']} | {rows[mode][0]['last_loss']} |")
any_row = next(iter(rows.values()))[0]
print(f"\n(medians of {len(next(iter(rows.values())))} interleaved runs; GPT n_layer={any_row['n_layer']} "
      f"n_embd={any_row['n_embd']}, {int(any_row['params']) / 1e6:.1f}M parameters)")
PY
rm -f "$out"
