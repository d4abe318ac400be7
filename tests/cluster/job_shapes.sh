# Scenario job_shapes: the guides' job shapes (docs/cluster.md), each 2 hosts x 2 ranks of
# examples/fashion_mnist, must print the params-sha256 of 4 ranks on one host: (a) sbatch with srun
# one task per worker, (b) sbatch with srun one cohortrun per node (c10d rendezvous), (c) cohortrun
# started on each host by hand, (d) mpirun -H across the hosts; and examples/horovod_mnist under (d)
# against its own 4 ranks on one host. The job scripts run are tests/cluster/jobs/, as the guide shows.
# Across hosts the collectives are hierarchical (docs/design/transports.md): each host's ranks first,
# then the hosts. The one-host runs group their 4 ranks as 2 hosts x 2 (COHORT_TEST_HOSTS_SPLIT=2) so
# they sum in that order too: any other transport there differs in the last bits, so the 2 x 2 jobs
# printing the reference digest proves they took the hierarchy across the namespaces.

scenario_hosts() { echo 2; }

scenario_job_shapes() {
  local out="$CL_DIR/out" data="$CL_DIR/data" jobs="$here/jobs" two_hosts="10.77.0.1 10.77.0.2"
  local reference start rc
  mkdir -p "$out"
  make_data "$data" || { fail "could not write the data slice into $data"; return 1; }
  export COHORTRUN="$BUILD/tools/cohortrun" TRAIN="$BUILD/examples/fashion_mnist"
  local flags=("${TRAIN_FLAGS[@]}" --data "$data")

  start=$(now)
  COHORT_TEST_HOSTS_SPLIT=2 run_on n1 180 "$out/one_host.log" "$COHORTRUN" --standalone --nproc-per-node 4 "$TRAIN" "${flags[@]}"
  rc=$?
  reference=$(digest_of "$out/one_host.log")
  check_run "4 ranks on one host" "$out/one_host.log" "$rc" "$reference" "cohortrun/torchrun" 127.0.0.1
  [ -n "$reference" ] || { fail "4 ranks on one host printed no params-sha256"; return 1; }
  cl_log "timing: 4 ranks on one host $(elapsed "$start") s"

  start=$(now)
  sbatch_wait 240 "$out/a.log" "$jobs/srun_tasks.sbatch" "${flags[@]}"
  rc=$?
  check_run "(a) sbatch, srun one task per worker" "$out/a.log" "$rc" "$reference" slurm "$two_hosts"
  cl_log "timing: (a) $(elapsed "$start") s"

  start=$(now)
  sbatch_wait 240 "$out/b.log" "$jobs/cohortrun_nodes.sbatch" "${flags[@]}"
  rc=$?
  check_run "(b) sbatch, srun one cohortrun per node" "$out/b.log" "$rc" "$reference" "cohortrun/torchrun" "$two_hosts"
  cl_log "timing: (b) $(elapsed "$start") s"

  shape_by_hand "$out" "$reference" "${flags[@]}"

  start=$(now)
  HOSTS=n1:2,n2:2 run_on n1 240 "$out/d.log" "$jobs/mpirun_hosts.sh" "${flags[@]}"
  rc=$?
  check_run "(d) mpirun -H n1:2,n2:2" "$out/d.log" "$rc" "$reference" openmpi "$two_hosts"
  grep -qx n2 "$CL_DIR/agent.log" 2>/dev/null || fail "(d) mpirun never started its daemon on n2"
  cl_log "timing: (d) $(elapsed "$start") s"

  shape_horovod "$out" "$data"
  [ "$FAILURES" = 0 ]
}

# (c): cohortrun_node.sh on each host by hand (pbsdsh's shape), the client host first.
shape_by_hand() {
  local out=$1 reference=$2 start rc1 rc2 p1 p2
  shift 2
  export NNODES=2 MASTER_ADDR=n1 RDZV_ID="rendezvous-$$"
  # The rendezvous alone: workers that exit at once (/bin/true), timed from start to both exits.
  start=$(now)
  TRAIN=/bin/true run_on n2 60 "$out/rdzv.n2.log" "$here/jobs/cohortrun_node.sh" &
  p2=$!
  TRAIN=/bin/true run_on n1 60 "$out/rdzv.n1.log" "$here/jobs/cohortrun_node.sh"
  rc1=$?
  wait "$p2"; rc2=$?
  [ "$rc1$rc2" = 00 ] || fail "cohortrun with /bin/true on n1 and n2 exited with $rc1 and $rc2"
  cl_log "timing: rendezvous of cohortrun on 2 hosts, workers /bin/true: $(elapsed "$start") s in all"
  start=$(now)
  export RDZV_ID="by-hand-$$"
  run_on n2 240 "$out/c.n2.log" "$here/jobs/cohortrun_node.sh" "$@" &
  p2=$!
  run_on n1 240 "$out/c.n1.log" "$here/jobs/cohortrun_node.sh" "$@" &
  p1=$!
  wait "$p1"; rc1=$?
  wait "$p2"; rc2=$?
  unset NNODES MASTER_ADDR RDZV_ID
  cat "$out/c.n1.log" "$out/c.n2.log" >"$out/c.log"
  [ "$rc2" = 0 ] || { fail "(c) cohortrun on n2 exited with status $rc2:"; tail -n 15 "$out/c.n2.log" >&2; }
  check_run "(c) cohortrun on each host by hand" "$out/c.log" "$rc1" "$reference" "cohortrun/torchrun" "10.77.0.1 10.77.0.2"
  cl_log "timing: (c) $(elapsed "$start") s"
}

# examples/horovod_mnist under mpirun -H across the hosts, against 4 ranks on one host.
shape_horovod() {
  local out=$1 data=$2 reference rc start
  local flags=("${HOROVOD_FLAGS[@]}" --data-dir "$data")
  local horovod="$BUILD/examples/horovod_mnist"
  COHORT_TEST_HOSTS_SPLIT=2 run_on n1 180 "$out/hvd_one_host.log" "$COHORTRUN" --standalone --nproc-per-node 4 "$horovod" "${flags[@]}"
  rc=$?
  reference=$(digest_of "$out/hvd_one_host.log")
  check_run "horovod_mnist, 4 ranks on one host" "$out/hvd_one_host.log" "$rc" "$reference" "cohortrun/torchrun" 127.0.0.1
  [ -n "$reference" ] || { fail "horovod_mnist on one host printed no params-sha256"; return; }
  start=$(now)
  TRAIN="$horovod" HOSTS=n1:2,n2:2 run_on n1 240 "$out/hvd.log" "$here/jobs/mpirun_hosts.sh" "${flags[@]}"
  rc=$?
  check_run "(d) horovod_mnist, mpirun -H n1:2,n2:2" "$out/hvd.log" "$rc" "$reference" openmpi "10.77.0.1 10.77.0.2"
  cl_log "timing: (d) horovod_mnist $(elapsed "$start") s"
}
