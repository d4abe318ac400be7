#!/usr/bin/env bash
# kill -9 during background writes: each trial trains the GPT under fsdp at 2 ranks, saving async after
# every step (bench/checkpoint/save_step.cpp --kill-loop), and SIGKILLs one rank, chosen at random, a
# random time (0 to MAX_DELAY seconds) after the background write of step K started (K = 2, 3 or 4 in
# turn). Then `cohort-ckpt verify` must pass on the checkpoint `latest` names, and a load on one process
# (resharded) must give step N-1 or N, N being the last save started before the kill: the one before the
# write that was cut, or that one when its commit ended first. Prints one line per trial and the count.
#   bench/checkpoint/kill.sh [trials]   (BUILD=build-torch2; MODEL="--n-layer 16 --n-embd 1024" for ~200M)
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
trials=${1:-20}
build=${BUILD:-build-torch2}
model=(${MODEL:---n-layer 8 --n-head 8 --n-embd 512})
max_delay=${MAX_DELAY:-1.0}
dir=${DIR:-/tmp/cohort-kill-bench}
held=0
for trial in $(seq "$trials"); do
  k=$((2 + trial % 3))
  rm -rf "$dir" "$dir.log"
  "$build/tools/cohortrun" --standalone --nproc-per-node 2 --max-restarts 0 "$build/bench/checkpoint/save_step" \
    --dir "$dir" --kill-loop "${model[@]}" >"$dir.log" 2>&1 &
  launcher=$!
  until grep -q "snapshot $k\$" "$dir.log" 2>/dev/null; do
    kill -0 "$launcher" 2>/dev/null || { echo "trial $trial: the run ended before step $k"; exit 1; }
    sleep 0.02
  done
  delay=$(/usr/bin/python3 -c "import random; print(round(random.uniform(0, $max_delay), 3))")
  sleep "$delay"
  mapfile -t workers < <(pgrep -P "$launcher" -f "save_step --dir $dir --kill-loop")
  victim=${workers[$((RANDOM % ${#workers[@]}))]}
  kill -9 "$victim"
  wait "$launcher" || true
  latest=$(cat "$dir/latest" 2>/dev/null || echo none)
  n=$(grep -o "snapshot [0-9]*$" "$dir.log" | tail -1 | cut -d' ' -f2)  # the write in flight at the kill
  verdict=ok
  "$build/tools/cohort_ckpt/cohort-ckpt" verify "$dir" >/dev/null 2>&1 || verdict="verify failed"
  loaded=$("$build/bench/checkpoint/save_step" --dir "$dir" --load-only "${model[@]}" 2>/dev/null | sed -n 's/^loaded step //p')
  [[ "$loaded" == $((n - 1)) || "$loaded" == "$n" ]] || verdict="$verdict; loaded '${loaded}', in flight $n"
  [[ "$verdict" == ok ]] && held=$((held + 1))
  echo "trial $trial: killed pid $victim ${delay} s after the write of step $k began (step $n in flight); latest $latest, loaded step $loaded: $verdict"
done
rm -rf "$dir" "$dir.log"
echo "$held of $trials trials resumed from a verified checkpoint (step N-1 or N)"
