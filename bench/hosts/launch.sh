# How bench/hosts/run.sh starts one job across its hosts (sourced after tests/cluster/lib.sh): cohortrun
# or torchrun once per host with the static rendezvous at n1 (n1 is node 0, so rank 0 and its output
# are on n1), or mpirun -H from n1 through the cluster harness's namespace agent instead of ssh. Each
# launch runs under a time limit, writes one log per host, and on failure kills what it left behind.

BENCH_HOSTS=(n1 n2)
PER_HOST=${PER_HOST:-2}          # ranks per host (run.sh: PER_HOST)
LAUNCH_LIMIT=${LIMIT:-1200}       # seconds one launch may take
BENCH_PORT=29600                  # node 0's port; a fresh one per launch (nothing lingers in TIME_WAIT)
# Every rank in a session of its own, as torchrun starts its workers (start_new_session): with CFS
# autogroup (kernel.sched_autogroup_enabled=1, as here) the CPU is shared per session, so cohortrun's
# and mpirun's ranks, all in this script's session, got one share between them while each PyTorch rank
# got its own: 0.44-0.62x PyTorch's DDP samples/s on a loaded machine, whose single ranks ran alike.
RANK_SESSION="setsid --wait"

# HOST_CPUS=split: this machine's online CPUs divided evenly among the hosts, host i's launcher (and so
# every rank, worker and daemon it starts) bound to share i, as separate machines have CPUs of their own;
# shared (default): every rank may run on any CPU, so the hosts' ranks take CPU time from one another.
HOST_CPUS=${HOST_CPUS:-shared}

# Host INDEX's CPU list for taskset under HOST_CPUS=split ("" when shared).
host_cpu_list() {
  local cpus first last n=${#BENCH_HOSTS[@]}
  [ "$HOST_CPUS" = split ] || return 0
  cpus=$(getconf _NPROCESSORS_ONLN)
  first=$(($1 * cpus / n)) last=$((($1 + 1) * cpus / n - 1))
  [ "$first" = "$last" ] && echo "$first" || echo "$first-$last"
}

# Checks HOST_CPUS and, under split, tells the harness's Open MPI agent (tests/cluster/ns_agent.sh) each
# host's CPUs, for the daemon mpirun starts there. Status 1 with a message when HOST_CPUS is not valid.
launch_cpus_setup() {
  local i
  case "$HOST_CPUS" in
    shared) return 0 ;;
    split) ;;
    *) echo "HOST_CPUS must be shared or split, got '$HOST_CPUS'" >&2; return 1 ;;
  esac
  if [ "$(getconf _NPROCESSORS_ONLN)" -lt "${#BENCH_HOSTS[@]}" ]; then
    echo "HOST_CPUS=split needs a CPU per host: $(getconf _NPROCESSORS_ONLN) CPUs for ${#BENCH_HOSTS[@]} hosts" >&2
    return 1
  fi
  for i in "${!BENCH_HOSTS[@]}"; do host_cpu_list "$i" >"$CL_DIR/${BENCH_HOSTS[$i]}.cpus"; done
}

# The command prefix that binds host INDEX's launcher to its CPUs (nothing when shared).
host_pin() { local list; list=$(host_cpu_list "$1"); [ -z "$list" ] || echo "taskset -c $list"; }

# Processes in our namespaces other than the hosts' holders: what a failed launch left.
launch_strays() {
  local holders pid
  holders=" $(cat "$CL_DIR"/*.holder | tr '\n' ' ') "
  for pid in $(cl_ns_pids); do [[ "$holders" == *" $pid "* ]] || echo "$pid"; done
}

# Runs LAUNCHER-LINE on every host at once (@NODE@ in it is replaced by the host's node rank), each under
# the time limit with ENV (a list of VAR=value) set; logs OUT.n1.log, OUT.n2.log. Status: the worst.
on_every_host() {
  local out=$1 env=$2 line=$3 pids=() i rc=0 status
  for i in "${!BENCH_HOSTS[@]}"; do
    # shellcheck disable=SC2086,SC2046  # env, the pin and the launcher line are lists of words without spaces inside
    on_host_bg "${BENCH_HOSTS[$i]}" "$out.${BENCH_HOSTS[$i]}.log" \
      env $env timeout -k 5 "$LAUNCH_LIMIT" $(host_pin "$i") ${line//@NODE@/$i}
    pids+=($!)
  done
  for i in "${pids[@]}"; do
    wait "$i"; status=$?
    [ "$status" = 0 ] || rc=$status
  done
  return "$rc"
}

# cohortrun of BUILD_DIR on every host: launch_cohort OUT "ENV" BUILD_DIR PROGRAM ARGS...
launch_cohort() {
  local out=$1 env=$2 dir=$3; shift 3
  BENCH_PORT=$((BENCH_PORT + 1))
  on_every_host "$out" "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $env" \
    "$dir/tools/cohortrun --nnodes ${#BENCH_HOSTS[@]} --node-rank @NODE@ --master-addr ${BENCH_HOSTS[0]}
     --master-port $BENCH_PORT --nproc-per-node $PER_HOST $RANK_SESSION $*"
}

# PyTorch's torchrun (PYTHON's torch) on every host: launch_torch OUT "ENV" PYTHON SCRIPT ARGS...
launch_torch() {
  local out=$1 env=$2 python=$3; shift 3
  BENCH_PORT=$((BENCH_PORT + 1))
  on_every_host "$out" "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $env" \
    "$python -m torch.distributed.run --nnodes ${#BENCH_HOSTS[@]} --node_rank @NODE@
     --master_addr ${BENCH_HOSTS[0]} --master_port $BENCH_PORT --nproc_per_node $PER_HOST $*"
}

# Open MPI from n1 across the hosts: ob1 with the TCP BTL between hosts (on the hosts' subnet only) and
# vader (shared memory) within one; ranks unbound (--bind-to none: every host shares this machine's
# CPUs, and Open MPI's binding would put the two hosts' ranks on the same cores). MPI_FLAGS, default
# "--mca mpi_yield_when_idle 1": each host's slots look free to mpirun, so its ranks would busy-poll
# without yielding, 4 spinning ranks on this machine's 2 CPUs (80-280 ms per allreduce here against
# Gloo's 8); yielding is what Open MPI does itself when it knows the CPUs are shared. One log, OUT.n1.log.
launch_mpi() {
  local out=$1 hosts="" host; shift
  for host in "${BENCH_HOSTS[@]}"; do hosts+="${hosts:+,}$host:$PER_HOST"; done
  # shellcheck disable=SC2086,SC2046  # MPI_FLAGS, RANK_SESSION and the pin are lists of words
  OMPI_MCA_plm_rsh_agent="$BENCH_REPO/tests/cluster/ns_agent.sh" COHORT_CLUSTER_DIR="$CL_DIR" \
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    on_host_bg "${BENCH_HOSTS[0]}" "$out.${BENCH_HOSTS[0]}.log" timeout -k 5 "$LAUNCH_LIMIT" $(host_pin 0) \
    mpirun --bind-to none -np $((PER_HOST * ${#BENCH_HOSTS[@]})) -H "$hosts" \
    --mca pml ob1 --mca btl self,vader,tcp --mca btl_tcp_if_include "$CL_SUBNET.0/24" \
    --mca oob_tcp_if_include "$CL_SUBNET.0/24" ${MPI_FLAGS---mca mpi_yield_when_idle 1} \
    -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 $RANK_SESSION "$@"
  wait $!  # in the background and waited for, so that an interrupt stops the run at once
}

# Runs one launch (launch_cohort, launch_torch or launch_mpi with their arguments); on failure says so
# with the logs' last lines and kills whatever it left in the hosts. Status: the launch's.
launch() {
  local out=$2 rc pid why
  "$@"
  rc=$?
  [ "$rc" = 0 ] && return 0
  why="status $rc"
  [ "$rc" = 124 ] && why="ran past LIMIT=$LAUNCH_LIMIT s"
  cl_log "$1 failed ($why); its logs ($out.*.log) end:"
  tail -n 6 "$out".*.log >&2
  for pid in $(launch_strays); do kill -KILL "$pid" 2>/dev/null; done
  return "$rc"
}
