#!/usr/bin/env bash
# Across hosts at full speed (issue 26): 2 hosts x 2 ranks, the hosts made as network namespaces by
# the cluster harness (tests/cluster/lib.sh), each host's link optionally rate-limited (tbf). Interleaved,
# repeated runs of (1) allreduce 4 KiB..64 MiB: cohort as built (timed alone), cohort with
# COHORT_HIERARCHICAL=0 (the flat Gloo ring over all ranks) and Open MPI (mpirun -H, TCP between hosts,
# shared memory within);
# (2) the DDP step of the example CNN and ResNet-18, cohort's LibTorch 2.11 build against PyTorch 2.11's
# DDP (Gloo) under torchrun. Prints markdown tables of medians and ratios for docs/BENCHMARKS.md and
# always tears the hosts down. As root, after building (see docs/benchmarks/hosts.md):
#   bench/hosts/run.sh [REPS]                                  (default 3)
# Variables (defaults in brackets):
#   RATES ["none 1gbit"]   link rates in tc's units, one pass each; none = unshaped veth
#   CONGESTION [reno]  every host's TCP congestion control, for all programs alike (system: the machine's;
#                  this VM's is bbr, whose pacing made both cohort and Open MPI 1.2-4x slower over the
#                  veth from 256 KiB to 4 MiB: docs/benchmarks/hosts.md)
#   PARTS ["allreduce ddp"]; ALLREDUCE_IMPLS ["cohort cohort_flat mpi"]; DDP_IMPLS ["cohort cohort_flat torch"]
#                  PARTS=hsdp: bench/gpt/gpt_step (BUILD's, built with -DCOHORT_BUILD_BENCH=ON) under fsdp,
#                  sharded over all ranks (flat: hierarchical collectives; flat_ring: COHORT_HIERARCHICAL=0)
#                  and HSDP (--replicas = hosts); HSDP_FLAGS [a 4-layer GPT of width 256, batch 4, 6 steps
#                  after 2] replace its model and step flags
#   ALLREDUCE_FLAGS ["--reps 5 --warmup 1"]  to bench/allreduce and bench/allreduce_mpi alike
#                  (--min-bytes B --max-bytes B pick sizes; both programs' defaults are 4 KiB..64 MiB)
#   MODELS ["cnn resnet18"]; BATCH per rank [cnn 64, resnet18 16]; STEPS [10]; WARMUP [3]; DDP_FLAGS [""]
#                  more flags to both sides
#   HOOKS ["none"]  DDP communication hooks, one row each: a hook other than none adds --comm-hook HOOK to
#                  cohort's and PyTorch's command (e.g. HOOKS="none powersgd")
#   HOST_CPUS [shared]  split: each host's ranks bound to its own share of this machine's CPUs (as
#                  separate machines; with 2 CPUs one each), for every implementation alike; shared: any CPU
#   PER_HOST [2]   ranks per host; 1: TCP between the hosts alone (cohort's links without a segment, Open MPI's tcp btl)
#   MPI_FLAGS ["--mca mpi_yield_when_idle 1"]  more flags to mpirun (why: bench/hosts/launch.sh)
#   BUILD [build] (allreduce, allreduce_mpi, cohortrun); BUILD2 [build-torch2] (cohort on LibTorch 2.11:
#   cohortrun, scaling_step); PYTHON2 [~/.cache/cohort/torch-2.11.0/bin/python]; LIMIT [1200] s per
#   launch; KEEP=1 keeps the logs (kept anyway on a failure).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
BENCH_REPO=$PWD
command_line="$0 $*"
reps=${1:-3}
read -ra rates <<<"${RATES:-none 1gbit}"
read -ra parts <<<"${PARTS:-allreduce ddp}"
read -ra ar_impls <<<"${ALLREDUCE_IMPLS:-cohort cohort_flat mpi}"
read -ra ddp_impls <<<"${DDP_IMPLS:-cohort cohort_flat torch}"
read -ra models <<<"${MODELS:-cnn resnet18}"
read -ra hooks <<<"${HOOKS:-none}"
ar_flags=${ALLREDUCE_FLAGS:---reps 5 --warmup 1}
ddp_flags="--steps ${STEPS:-10} --warmup ${WARMUP:-3} --threads 1 ${DDP_FLAGS:-}"
hsdp_flags=${HSDP_FLAGS:---n-layer 4 --n-head 4 --n-embd 256 --block-size 64 --batch-size 4 --steps 6 --warmup 2}
python2=${PYTHON2:-$HOME/.cache/cohort/torch-2.11.0/bin/python}
source tests/cluster/lib.sh
source bench/hosts/launch.sh
source bench/hosts/links.sh

die() { echo "bench/hosts/run.sh: $*" >&2; exit 2; }
has_part() { [[ " ${parts[*]} " == *" $1 "* ]]; }

[ "$(id -u)" = 0 ] || die "needs root (network namespaces, tc)"
[[ "$reps" =~ ^[1-9][0-9]*$ ]] || die "REPS must be a positive number, got '$reps'"
[[ "$PER_HOST" =~ ^[1-9][0-9]*$ ]] || die "PER_HOST must be a positive number, got '$PER_HOST'"
for tool in unshare nsenter tc; do command -v "$tool" >/dev/null || die "missing $tool (scripts/install-deps.sh)"; done
build=$(cd "${BUILD:-build}" 2>/dev/null && pwd) || die "no build folder '${BUILD:-build}' (BUILD=)"
need=("$build/tools/cohortrun")
if has_part allreduce; then
  need+=("$build/bench/allreduce")
  [[ " ${ar_impls[*]} " != *" mpi "* ]] || need+=("$build/bench/allreduce_mpi" "$(command -v mpirun || echo mpirun)")
fi
if has_part ddp; then
  build2=$(cd "${BUILD2:-build-torch2}" 2>/dev/null && pwd) ||
    die "no LibTorch 2.11 build '${BUILD2:-build-torch2}' (COHORT_LIBTORCH=pip scripts/build.sh; BUILD2=)"
  need+=("$build2/tools/cohortrun" "$build2/bench/scaling/scaling_step")
  [[ " ${ddp_impls[*]} " != *" torch "* ]] || need+=("$python2")
fi
has_part hsdp && need+=("$build/bench/gpt/gpt_step")
for file in "${need[@]}"; do [ -x "$file" ] || die "no $file: build it first (docs/benchmarks/hosts.md)"; done
if has_part ddp && [[ " ${ddp_impls[*]} " == *" torch "* ]]; then
  "$python2" -c 'import torch.distributed' 2>/dev/null || die "$python2 has no torch (scripts/install-torch.sh; PYTHON2=)"
fi

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

# The environment of a cohort variant: as built (hierarchical once it is there), or the flat ring.
cohort_env() { [ "$1" = cohort_flat ] && echo "COHORT_HIERARCHICAL=0" || echo ""; }

# A model's batch per rank: BATCH, else what keeps a ResNet-18 step to seconds on 2 CPUs shared by 4 ranks.
batch_of() {
  if [ -n "${BATCH:-}" ]; then echo "$BATCH"; elif [ "$1" = resnet18 ]; then echo 16; else echo 64; fi
}

# How the hosts' ranks share this machine's CPUs, for the report.
cpus_note() {
  local i
  [ "$HOST_CPUS" = split ] || { echo "shared by both hosts"; return; }
  echo -n "split:"
  for i in "${!BENCH_HOSTS[@]}"; do echo -n " ${BENCH_HOSTS[$i]} on CPU $(host_cpu_list "$i")"; done
  echo
}

# The impls in turn order for repetition REP: rotated by one each repetition, so none is always first.
in_turn() {
  local rep=$1; shift
  local list=("$@") i n=$#
  for ((i = 0; i < n; i++)); do echo "${list[$(((i + rep) % n))]}"; done
}

# One allreduce launch of IMPL; appends "AR rate= impl= rep= bytes= us=" lines to $results. bench/allreduce
# also times raw c10d Gloo over all ranks (the flat ring without cohort's agreement): kept, as
# impl=gloo_raw, from the cohort_flat runs (no such column when cohort_flat is not run). cohort runs
# alone, as Open MPI's loop: with raw Gloo calls between its own, its small sizes read slower.
allreduce_once() {
  local impl=$1 rate=$2 rep=$3 out="$CL_DIR/logs/ar-$2-$1-$3" tag="AR rate=$2 rep=$3"
  # shellcheck disable=SC2086  # the flags are a list of words
  if [ "$impl" = mpi ]; then
    launch launch_mpi "$out" "$build/bench/allreduce_mpi" --mode sizes $ar_flags || return 1
    awk -F'|' -v tag="$tag" '/^ +[0-9]/ { split($1, a, " "); split($2, b, " ");
      print tag " impl=mpi bytes=" a[1] " us=" b[1] }' "$out.n1.log" >>"$results"
  else
    local mode=alone raw=""
    [ "$impl" = cohort_flat ] && mode=sizes && raw=1
    launch launch_cohort "$out" "$(cohort_env "$impl")" "$build" "$build/bench/allreduce" --mode $mode $ar_flags ||
      return 1
    sed -n 's/^\[rank0\]: //p' "$out.n1.log" | awk -F'|' -v tag="$tag" -v impl="$impl" -v raw="$raw" '
      /^ +[0-9]/ { split($1, a, " "); split($2, b, " "); split($3, c, " ");
                   print tag " impl=" impl " bytes=" a[1] " us=" b[1]
                   if (raw) print tag " impl=gloo_raw bytes=" a[1] " us=" c[1] }' >>"$results"
  fi
}

# One DDP launch of IMPL on MODEL with HOOK; appends "DDP <rank 0's RESULT fields> rate= impl= hook= rep=".
ddp_once() {
  local impl=$1 rate=$2 rep=$3 model=$4 hook=$5 out="$CL_DIR/logs/ddp-$2-$1-$4-$5-$3" flags line
  flags="--model $model --batch $(batch_of "$model") $ddp_flags"
  [ "$hook" = none ] || flags+=" --comm-hook $hook"
  # shellcheck disable=SC2086  # the flags are a list of words
  if [ "$impl" = torch ]; then
    launch launch_torch "$out" "" "$python2" "$BENCH_REPO/bench/scaling/scaling_step.py" $flags || return 1
  else
    launch launch_cohort "$out" "$(cohort_env "$impl")" "$build2" "$build2/bench/scaling/scaling_step" --mode ddp \
      $flags || return 1
  fi
  # Rank 0's RESULT, less its own impl= (the program's name for it), then ours, which the tables read.
  line=$(sed 's/^\[rank0\]: //' "$out.n1.log" | grep -m1 '^RESULT ') ||
    { cl_log "$impl on $model printed no RESULT line (see $out.n1.log)"; return 1; }
  echo "DDP $(echo "${line#RESULT }" | sed 's/impl=[^ ]* //') rate=$rate impl=$impl hook=$hook rep=$rep" >>"$results"
}

# One GPT fsdp launch: flat (one shard group over every rank, cohort's collectives hierarchical: each
# host's ranks first), flat_ring (the same over the flat Gloo ring, COHORT_HIERARCHICAL=0, as PyTorch's
# FSDP runs) or hsdp (a host's ranks shard, the hosts replicate); appends "HSDP <rank 0's RESULT fields>
# rate= impl= rep=".
hsdp_once() {
  local impl=$1 rate=$2 rep=$3 out="$CL_DIR/logs/hsdp-$2-$1-$3" replicas=1 line env=""
  [ "$impl" = hsdp ] && replicas=${#BENCH_HOSTS[@]}
  [ "$impl" = flat_ring ] && env=$(cohort_env cohort_flat)
  # shellcheck disable=SC2086  # the flags are a list of words
  launch launch_cohort "$out" "$env" "$build" "$build/bench/gpt/gpt_step" --mode fsdp --replicas "$replicas" \
    --threads 1 $hsdp_flags || return 1
  line=$(sed 's/^\[rank0\]: //' "$out.n1.log" | grep -m1 '^RESULT ') ||
    { cl_log "$impl printed no RESULT line (see $out.n1.log)"; return 1; }
  echo "HSDP $(echo "${line#RESULT }" | sed 's/impl=[^ ]* //') rate=$rate impl=$impl rep=$rep" >>"$results"
}

# Every part, impl, model and hook once, in this repetition's turn order.
one_repetition() {
  local rate=$1 rep=$2 impl model hook status
  if has_part allreduce; then
    for impl in $(in_turn "$rep" "${ar_impls[@]}"); do
      allreduce_once "$impl" "$rate" "$rep" && status="done" || { status=FAILED; failures=$((failures + 1)); }
      cl_log "rate $rate, rep $rep/$reps: allreduce $impl $status"
    done
  fi
  if has_part hsdp; then
    for impl in $(in_turn "$rep" flat flat_ring hsdp); do
      hsdp_once "$impl" "$rate" "$rep" && status="done" || { status=FAILED; failures=$((failures + 1)); }
      cl_log "rate $rate, rep $rep/$reps: GPT fsdp $impl $status"
    done
  fi
  if has_part ddp; then
    for model in "${models[@]}"; do
      for hook in "${hooks[@]}"; do
        for impl in $(in_turn "$rep" "${ddp_impls[@]}"); do
          ddp_once "$impl" "$rate" "$rep" "$model" "$hook" && status="done" || { status=FAILED; failures=$((failures + 1)); }
          cl_log "rate $rate, rep $rep/$reps: DDP $model ($hook) $impl $status"
        done
      done
    done
  fi
}

cluster_up "${#BENCH_HOSTS[@]}" || exit 1
links_congestion "${CONGESTION:-reno}" || exit 1
launch_cpus_setup || exit 2
mkdir -p "$CL_DIR/logs"
results="$CL_DIR/results"
: >"$results"
failures=0
settings="RATES='${rates[*]}' CONGESTION='${CONGESTION:-reno}' HOST_CPUS='$HOST_CPUS' PARTS='${parts[*]}' ALLREDUCE_IMPLS='${ar_impls[*]}' DDP_IMPLS='${ddp_impls[*]}'"
settings+=" ALLREDUCE_FLAGS='$ar_flags' MODELS='${models[*]}' HOOKS='${hooks[*]}' BATCH='${BATCH:-}'"
settings+=" MPI_FLAGS='${MPI_FLAGS---mca mpi_yield_when_idle 1}'; DDP flags: $ddp_flags"
report="$CL_DIR/report"
{
  echo "# $command_line"
  echo "# $settings"
  echo "# $(date -u '+%Y-%m-%d %H:%M') UTC; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')," \
       "$(getconf _NPROCESSORS_ONLN) CPUs $(cpus_note); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$report"
cl_log "hosts up: ${BENCH_HOSTS[*]} ($PER_HOST ranks each); rates ${rates[*]}; $reps repetitions of ${parts[*]}"
SECONDS=0
for rate in "${rates[@]}"; do
  links_rate "$rate" || exit 1
  for rep in $(seq "$reps"); do one_repetition "$rate" "$rep"; done
  links_stats | sed "s/^/# rate $rate: /" >>"$report"
done
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg); $((SECONDS / 60)) min in all" >>"$report"
mpi_version=$(grep -h -m1 '^# bench/allreduce_mpi' "$CL_DIR"/logs/ar-*-mpi-*.n1.log 2>/dev/null | head -n1 | cut -c3-)
[ -z "$mpi_version" ] || echo "# $mpi_version" >>"$report"
cat "$report"
python3 bench/hosts/tables.py "$results" "$reps" "$PER_HOST" "$HOST_CPUS"
[ "$failures" = 0 ] || { cl_log "$failures launches failed"; exit 1; }
