# Scenario faults: examples/fashion_mnist on 2 hosts x 2 ranks (cohortrun started on each host, the
# by-hand shape), 16 steps with a checkpoint every 8, meets after step 8 (a) a partition of n2
# (iptables DROP both ways), (b) SIGKILL of every process of n2 (its cohortrun and workers), and from
# the start (c) a 50 Mbit/s link (tbf). After (a) and (b) every worker on both hosts is gone within
# COHORT_TIMEOUT plus a margin, the ranks name the ranks they lost and their hosts, each host's
# cohortrun exits (n1's with status 1, none aborts), nothing of the job is left on either host, the
# newest checkpoint verifies, and the same job submitted again resumes from step 8 and ends with the
# digest of the uninterrupted job. (c) ends with that digest too; its step time is logged.

FAULT_TIMEOUT=15   # COHORT_TIMEOUT of the faulted jobs, seconds
scenario_hosts() { echo 2; }

scenario_faults() {
  local out="$CL_DIR/out" data="$CL_DIR/data" whole
  mkdir -p "$out"
  make_data "$data" || { fail "could not write the data slice into $data"; return 1; }
  export COHORTRUN="$BUILD/tools/cohortrun" TRAIN="$BUILD/examples/fashion_mnist"
  export NNODES=2 MASTER_ADDR=n1 COHORT_TIMEOUT=$FAULT_TIMEOUT COHORTRUN_FLAGS="--monitor-interval 1 --stop-timeout 5"
  FAULT_FLAGS=(--batch-size 16 --threads 1 --progress off --data "$data" --checkpoint-every 8)

  job_on_both "$out/whole" "$CL_DIR/ckpt-whole" || { fail "the uninterrupted run failed"; return 1; }
  whole=$(digest_of "$out/whole.n1.log")
  [ -n "$whole" ] || { fail "the uninterrupted run printed no params-sha256"; return 1; }
  cl_log "uninterrupted: params-sha256 $whole, $(train_seconds "$out/whole.n1.log") s of training"

  fault_partition "$out" "$whole"
  fault_kill_host "$out" "$whole"
  fault_slow_link "$out" "$whole"
  [ "$FAILURES" = 0 ]
}

# Starts the job on n2 and n1 (cohortrun_node.sh) in the background; OUT.n1.log, OUT.n2.log.
start_job() {
  local out=$1 ckpt=$2
  RDZV_ID="faults-$(basename "$out")" run_on n2 240 "$out.n2.log" "$here/jobs/cohortrun_node.sh" \
    "${FAULT_FLAGS[@]}" --max-steps "${MAX_STEPS:-16}" --checkpoint-dir "$ckpt" &
  JOB_N2=$!
  RDZV_ID="faults-$(basename "$out")" run_on n1 240 "$out.n1.log" "$here/jobs/cohortrun_node.sh" \
    "${FAULT_FLAGS[@]}" --max-steps "${MAX_STEPS:-16}" --checkpoint-dir "$ckpt" &
  JOB_N1=$!
}

# The whole job on both hosts; 0 when both cohortruns exit 0.
job_on_both() {
  local rc1 rc2
  start_job "$@"
  wait "$JOB_N1"; rc1=$?
  wait "$JOB_N2"; rc2=$?
  [ "$rc1" = 0 ] && [ "$rc2" = 0 ] && return 0
  tail -n 12 "$1.n1.log" "$1.n2.log" >&2
  return 1
}

# Seconds of training in a run's epoch line ("time 3.2 s (train 2.2 s, ...").
train_seconds() { grep -o 'train [0-9.]* s' "$1" | tail -n 1 | awk '{ print $2 }'; }

# Workers (fashion_mnist processes) still alive in HOST's namespaces.
workers_on() {
  local pid
  for pid in $(ip netns pids "$CL_PREFIX$1" 2>/dev/null); do
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = fashion_mnist ] && echo "$pid"
  done
}

# Processes of the job left in HOST's namespaces: all but the host's holder and slurmd.
job_left_on() {
  local pid
  for pid in $(ip netns pids "$CL_PREFIX$1" 2>/dev/null); do
    [ "$pid" = "$(cat "$CL_DIR/$1.holder")" ] || [ "$pid" = "$(cat "$CL_DIR/$1.slurmd")" ] ||
      echo "$pid ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-60))"
  done
}

# Waits until the job has saved step-8 (it trains on), then returns.
wait_for_checkpoint() {
  local i
  for i in $(seq 600); do [ -d "$1/step-8" ] && return 0; sleep 0.1; done
  fail "no checkpoint step-8 in $1 after 60 s"
  return 1
}

# After a fault at time T0: every worker gone within COHORT_TIMEOUT + 20 s (both sides wait out one
# timeout in the collective, then at most 2 s for the failure report), both cohortruns exit, n1's with
# status 1, nothing left of the job; the times are logged ("timing: ...").
check_job_ends() {
  local name=$1 t0=$2 out=$3 i rc1 rc2 left host
  local bound=$((FAULT_TIMEOUT + 20))
  for i in $(seq $((bound * 10))); do
    [ -z "$(workers_on n1)$(workers_on n2)" ] && break
    sleep 0.1
  done
  [ -z "$(workers_on n1)$(workers_on n2)" ] ||
    fail "$name: workers still running $bound s after the fault: $(workers_on n1) $(workers_on n2)"
  cl_log "timing: $name: every worker gone $(elapsed "$t0") s after the fault (COHORT_TIMEOUT=$FAULT_TIMEOUT)"
  wait "$JOB_N1"; rc1=$?
  wait "$JOB_N2"; rc2=$?
  cl_log "timing: $name: both cohortruns exited $(elapsed "$t0") s after the fault (status n1 $rc1, n2 $rc2)"
  [ "$rc1" != 0 ] && [ "$rc1" -lt 124 ] || fail "$name: cohortrun on n1 exited with status $rc1, expected a failure (1)"
  for host in n1 n2; do
    left=$(job_left_on "$host")
    [ -z "$left" ] || fail "$name: processes left on $host: $left"
  done
  grep -q "terminate called" "$out.n1.log" "$out.n2.log" && fail "$name: a cohortrun aborted: $(grep -h -A1 "terminate called" "$out".n?.log)"
  return 0
}

# The newest checkpoint verifies, and the same job again resumes from it and ends with the digest.
check_resume() {
  local name=$1 out=$2 ckpt=$3 reference=$4
  "$BUILD/tools/cohort_ckpt/cohort-ckpt" verify "$ckpt" >"$out.verify.log" 2>&1 ||
    fail "$name: the newest checkpoint does not verify: $(tail -n 3 "$out.verify.log")"
  job_on_both "$out.again" "$ckpt" || { fail "$name: the resubmitted job failed"; return; }
  grep -q "resumed from $ckpt/step-8 " "$out.again.n1.log" || fail "$name: the resubmitted job did not resume from $ckpt/step-8"
  [ "$(digest_of "$out.again.n1.log")" = "$reference" ] ||
    fail "$name: resumed run printed params-sha256 '$(digest_of "$out.again.n1.log")', expected $reference"
  cl_log "$name: $(grep -o "resumed from [^ ]*" "$out.again.n1.log"), params-sha256 of the uninterrupted run"
}

fault_partition() {
  local out="$1/partition" reference=$2 ckpt="$CL_DIR/ckpt-partition" t0
  start_job "$out" "$ckpt"
  wait_for_checkpoint "$ckpt" || return
  t0=$(now)
  on_host n2 iptables -A INPUT -i eth0 -j DROP
  on_host n2 iptables -A OUTPUT -o eth0 -j DROP
  check_job_ends "(a) partition of n2" "$t0" "$out"
  # The cut-off ranks get no report from anyone (the store is on n1), so they name every other rank.
  grep -q "ranks 2, 3 (host n2) never arrived" "$out.n1.log" ||
    fail "(a) the ranks on n1 did not name ranks 2, 3 (host n2) as lost: $(grep -h "error:" "$out.n1.log" | head -n 1)"
  grep -Eq "ranks 0, 1 \(host n1\), [23] \(host n2\) never arrived" "$out.n2.log" ||
    fail "(a) the ranks on n2 did not name ranks 0, 1 (host n1) as lost: $(grep -h "error:" "$out.n2.log" | head -n 1)"
  on_host n2 iptables -F
  check_resume "(a) partition of n2" "$out" "$ckpt" "$reference"
}

fault_kill_host() {
  local out="$1/kill" reference=$2 ckpt="$CL_DIR/ckpt-kill" t0 pid
  start_job "$out" "$ckpt"
  wait_for_checkpoint "$ckpt" || return
  t0=$(now)
  for pid in $(job_left_on n2 | cut -d' ' -f1); do kill -KILL "$pid" 2>/dev/null; done
  check_job_ends "(b) SIGKILL of n2" "$t0" "$out"
  grep -Eq "rank [23] \(host n2\) (died|left)" "$out.n1.log" ||
    fail "(b) the ranks on n1 did not name rank 2 or 3 (host n2) as dead: $(grep -h "error:" "$out.n1.log" | head -n 1)"
  check_resume "(b) SIGKILL of n2" "$out" "$ckpt" "$reference"
}

fault_slow_link() {
  local out="$1/slow" reference=$2 ckpt="$CL_DIR/ckpt-slow" whole slow
  on_host n2 tc qdisc add dev eth0 root tbf rate 50mbit burst 64kb latency 100ms
  nsenter --net="/run/netns/${CL_PREFIX}bridge" tc qdisc add dev pn2 root tbf rate 50mbit burst 64kb latency 100ms
  job_on_both "$out" "$ckpt" || { fail "(c) the job over a 50 Mbit/s link failed"; return; }
  [ "$(digest_of "$out.n1.log")" = "$reference" ] ||
    fail "(c) 50 Mbit/s link: params-sha256 '$(digest_of "$out.n1.log")', expected $reference"
  whole=$(train_seconds "$CL_DIR/out/whole.n1.log")
  slow=$(train_seconds "$out.n1.log")
  cl_log "timing: (c) 50 Mbit/s link: $slow s of training against $whole s (16 steps, 4 ranks), same params-sha256"
}
