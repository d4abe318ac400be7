#!/usr/bin/env bash
# A pretrained GPT loaded into fsdp on 4 ranks (issue 42, "pretrained weights streamed into shards"):
# peak RSS per rank when each rank reads only its shards' bytes (ShardedInit + cohort::load_pretrained
# from Hugging Face's sharded layout, 4 files and model.safetensors.index.json) against building the
# whole model on every rank and reading the whole file into it first (load_safetensors +
# load_state_dict, then the engine shards it); interleaved, medians. Both print the sum of |w| over the
# loaded parameters: the same in each when both loaded the file. The peak is the load's (after the
# engine took the model: its own state, the shards of parameters, gradients and AdamW's moments, is made
# either way), before anything else runs.
#   bench/gpt/pretrained.sh [reps]    (BUILD=build by default; N_LAYER, N_EMBD, N_HEAD for another GPT)
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
reps=${1:-3}
build=${BUILD:-build}
model=(--n-layer "${N_LAYER:-12}" --n-embd "${N_EMBD:-1024}" --n-head "${N_HEAD:-16}" --block-size 64 --vocab-size 256)
dir=$(mktemp -d)
out=$(mktemp)
trap 'rm -rf "$dir" "$out"' EXIT
"$build/bench/gpt/pretrained_load" --write "$dir" --files 4 "${model[@]}" >&2
for rep in $(seq "$reps"); do
  for mode in streamed whole; do
    "$build/tools/cohortrun" --standalone --nproc-per-node 4 "$build/bench/gpt/pretrained_load" \
      --load "$dir/model.safetensors.index.json" --mode "$mode" "${model[@]}" 2>/dev/null |
      sed 's/^\[rank0\]: //' | grep RESULT >>"$out"
  done
  echo "rep $rep/$reps done" >&2
done
python3 - "$out" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = dict(re.findall(r"(\w+)=([\w.+-]+)", line))
    rows.setdefault(f["mode"], []).append(f)
med = lambda mode, key: statistics.median(float(r[key]) for r in rows[mode])
print("| load (4 ranks) | peak RSS MiB/rank | runtime + engine state + 2 units | runtime | engine state | one unit | sum of abs(w) |")
print("|---|---|---|---|---|---|---|")
for mode in ("streamed", "whole"):
    bound = med(mode, "runtime_mib") + med(mode, "state_mib") + 2 * med(mode, "unit_mib")
    print(f"| {mode} | {med(mode, 'peak_max_mib'):.0f} | {bound:.0f} | {med(mode, 'runtime_mib'):.0f} | "
          f"{med(mode, 'state_mib'):.0f} | {med(mode, 'unit_mib'):.0f} | {rows[mode][0]['abs_sum']} |")
first = rows["streamed"][0]
print(f"\n{first['params']} parameters ({first['n_layer']} layers of {first['n_embd']}), "
      f"streamed peak = {med('streamed', 'peak_max_mib') / med('whole', 'peak_max_mib'):.2f}x whole's")
PY
