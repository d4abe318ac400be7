#!/usr/bin/env bash
# The scale rehearsal (issue 29): N ranks of a model-free worker across 4 hosts made as network
# namespaces by tests/cluster/lib.sh, cohortrun + bench/scale/scale_step against torchrun +
# bench/scale/scale_step.py (Gloo), both with the c10d rendezvous at n1, interleaved and repeated.
# Times joining the world, creating the {node, local} groups and a few allreduces, counts each worker's
# established TCP connections (ss inside its host), prints a markdown table of medians, and always
# tears the hosts down. Usage, as root after
#   COHORT_BUILD_TARGETS="cohort cohortrun scale_step" scripts/build.sh:
#     bench/scale/run.sh [REPS] [SIZES...]       (default: 3 8 16 32; sizes divisible by 4)
# BUILD=dir picks another build folder, IMPLS=cohort or IMPLS=torch runs one side only; a size that
# memory cannot hold (MemAvailable) is skipped, said; KEEP=1 keeps the logs (kept anyway on a failure).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
reps=${1:-3}
shift $(($# > 0 ? 1 : 0))
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(8 16 32)
build=$(cd "${BUILD:-build}" && pwd)
python=/usr/bin/python3  # Debian's, with torch 1.13 (not a pyenv python on PATH)
read -ra impls <<<"${IMPLS:-cohort torch}"
hosts=4
limit=300                # seconds one launch may take, hold included
source tests/cluster/lib.sh

[ "$(id -u)" = 0 ] || { echo "bench/scale/run.sh: needs root (network namespaces)" >&2; exit 2; }
for file in "$build/tools/cohortrun" "$build/bench/scale/scale_step"; do
  [[ " ${impls[*]} " != *" cohort "* ]] || [ -x "$file" ] ||
    { echo "bench/scale/run.sh: no $file: build the targets cohortrun scale_step" >&2; exit 2; }
done
"$python" -c 'import torch.distributed' 2>/dev/null || { echo "bench/scale/run.sh: $python has no torch" >&2; exit 2; }
for size in "${sizes[@]}"; do
  [ $((size % hosts)) = 0 ] || { echo "bench/scale/run.sh: size $size is not divisible by $hosts hosts" >&2; exit 2; }
done

finish() {
  local rc=$?
  trap - EXIT TERM INT
  cluster_down
  cluster_check_clean || rc=1
  if [ -n "$CL_DIR" ]; then
    if [ "$rc" = 0 ] && [ -z "${KEEP:-}" ]; then rm -rf "$CL_DIR"; else cl_log "logs kept in $CL_DIR"; fi
  fi
  exit "$rc"
}
trap finish EXIT
trap 'cl_log "interrupted"; exit 130' TERM INT

now() { date +%s.%N; }

# Processes in our namespaces other than the hosts' holders: what a failed launch left.
strays() {
  local holders
  holders=" $(cat "$CL_DIR"/*.holder | tr '\n' ' ') "
  for pid in $(cl_ns_pids); do [[ "$holders" == *" $pid "* ]] || echo "$pid"; done
}

# The launcher line of one host: IMPL SIZE PORT ID OUT.
launcher() {
  local impl=$1 per=$(($2 / hosts)) port=$3 id=$4 out=$5 host=$6
  # torch 1.13's torchrun spells its flags with _ only (cohortrun takes both).
  local rdzv="--nnodes $hosts --nproc_per_node $per --rdzv_id $id --rdzv_backend c10d --rdzv_endpoint n1:$port"
  if [ "$impl" = cohort ]; then
    echo "$build/tools/cohortrun $rdzv $build/bench/scale/scale_step --release $out/release"
  else
    echo "$python -m torch.distributed.run $rdzv --redirects 2 --tee 2 --log_dir $out/logs.$host" \
         "bench/scale/scale_step.py --release $out/release"
  fi
}

# One launch: IMPL SIZE PORT; appends its ranks' SCALE lines (with conns= and launch_at=) to $results.
launch() {
  local impl=$1 size=$2 port=$3 out="$CL_DIR/$1-$2-$3" pids=() host i ready=0 launch_at rc=0 line pid alive
  mkdir -p "$out"
  launch_at=$(now)
  for i in $(seq "$hosts"); do
    host=n$i
    # shellcheck disable=SC2046  # the launcher line is a list of words without spaces inside
    on_host_bg "$host" "$out/$host.log" timeout -k 5 "$limit" \
      $(launcher "$impl" "$size" "$port" "scale-$port" "$out" "$host")
    pids+=($!)
  done
  SECONDS=0
  while [ "$ready" -lt "$size" ] && [ "$SECONDS" -lt "$limit" ]; do
    ready=$(cat "$out"/n*.log | grep -o 'SCALE impl=' | wc -l)  # two ranks' lines may share one
    alive=0
    for i in "${pids[@]}"; do kill -0 "$i" 2>/dev/null && alive=1; done
    [ "$alive" = 1 ] || break  # every launcher ended before all ranks were ready
    sleep 0.2
  done
  for i in $(seq "$hosts"); do on_host "n$i" ss -tanpH state established >"$out/ss.n$i"; done
  touch "$out/release"
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || rc=$?; done
  if [ "$ready" -lt "$size" ] || [ "$rc" != 0 ]; then
    cl_log "$impl at $size ranks failed ($ready of $size ranks ready, exit status $rc); its logs end:"
    tail -n 5 "$out"/n*.log >&2
    for pid in $(strays); do kill -KILL "$pid" 2>/dev/null; done
    return 1
  fi
  grep -ho 'SCALE impl=[^S]*' "$out"/n*.log | while read -r line; do
    pid=${line#*pid=}; pid=${pid%% *}
    echo "$line conns=$(cat "$out"/ss.n* | grep -c "pid=$pid,") launch_at=$launch_at"
  done >>"$results"
}

cluster_up "$hosts" || exit 1
results="$CL_DIR/results"
cl_log "hosts up: ${CL_HOSTS[*]}; sizes ${sizes[*]}, $reps repetitions"
port=29400
failures=0
for rep in $(seq "$reps"); do
  for size in "${sizes[@]}"; do
    avail=$(awk '/MemAvailable/ { print int($2 / 1024) }' /proc/meminfo)
    if [ "$avail" -lt $((size * 400 + 1024)) ]; then
      cl_log "skipping $size ranks: $avail MB available, at least $((size * 400 + 1024)) MB wanted"
      continue
    fi
    order=("${impls[@]}")
    [ $((rep % 2)) = 0 ] && mapfile -t order < <(printf '%s\n' "${impls[@]}" | tac)
    for impl in "${order[@]}"; do
      port=$((port + 1))
      launch "$impl" "$size" "$port" || failures=$((failures + 1))
      cl_log "rep $rep/$reps: $impl at $size ranks done"
    done
  done
done

"$python" - "$results" "$hosts" <<'PY'
import re, statistics, sys
from collections import defaultdict
rows = [dict(re.findall(r"(\w+)=([\w.]+)", line)) for line in open(sys.argv[1])]
runs = defaultdict(list)  # (impl, size, launch_at) -> its ranks' lines
for r in rows:
    runs[(r["impl"], int(r["size"]), r["launch_at"])].append(r)
per = defaultdict(list)  # (impl, size) -> per-run aggregates
for (impl, size, launch_at), ranks in runs.items():
    top = lambda k: max(float(r[k]) for r in ranks)
    conns = [int(r["conns"]) for r in ranks]
    per[(impl, size)].append(dict(
        joined=top("joined_at") - float(launch_at), started=top("started_at") - float(launch_at),
        init=top("init_s"), groups=top("groups_s"), world=top("world_ms"), node=top("node_ms"),
        local=top("local_ms"), barrier=top("barrier_ms"),
        cmin=min(conns), cmax=max(conns), cmed=statistics.median(conns),
        rss=statistics.median(float(r["rss_mb"]) for r in ranks)))
med = lambda runs, k: statistics.median(r[k] for r in runs)
names = {"cohort": "cohortrun + cohort", "torch": "torchrun + torch 1.13 Gloo"}
print(f"| ranks ({sys.argv[2]} hosts) | launcher + worker | runs | launch to last rank started s | launch to all joined s "
      "| init (slowest rank) s | groups s | world allreduce ms | node-group allreduce ms | local-group allreduce ms "
      "| barrier ms | TCP connections per rank: median (min-max) | RSS MB per rank |")
print("|" + "---|" * 13)
for (impl, size) in sorted(per, key=lambda k: (k[1], k[0])):
    r = per[(impl, size)]
    lo, hi = min(x["cmin"] for x in r), max(x["cmax"] for x in r)
    conns = f"{med(r, 'cmed'):.0f} ({lo}-{hi})" if lo != hi else f"{lo}"
    print(f"| {size} | {names[impl]} | {len(r)} | {med(r, 'started'):.2f} | {med(r, 'joined'):.2f} | {med(r, 'init'):.2f} "
          f"| {med(r, 'groups'):.2f} | {med(r, 'world'):.2f} | {med(r, 'node'):.2f} | {med(r, 'local'):.2f} "
          f"| {med(r, 'barrier'):.2f} | {conns} | {med(r, 'rss'):.0f} |")
print("\n(medians over runs; each run's time is its slowest rank's; allreduces: 4 KiB float32, ms per call)")
PY
[ "$failures" = 0 ] || { cl_log "$failures launches failed"; exit 1; }
