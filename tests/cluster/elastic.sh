# Scenario elastic: examples/fashion_mnist under `cohortrun --nnodes 1:2 --max-restarts 2` on n1 and n2
# (2 ranks each, the by-hand shape), 32 steps of 64 samples with a checkpoint every 8. (a) Scale-down:
# once step-8 is saved, every process of n2 gets SIGKILL; n1's workers fail on the dead peer, its
# cohortrun restarts them alone after last_call_timeout (round 1, world 2), and they resume from step-8
# saved by 4 ranks, each step accumulating 2 batches per rank so that it still takes 64 samples.
# (b) Scale-up: once the 2-rank group saved step-16, a new cohortrun on n2 waits for the next round;
# n1 sees it within --monitor-interval and restarts into round 2 (world 4), which resumes from the
# newest checkpoint the 2 ranks saved. The 2 ranks are held (SIGSTOP) from step-16 until n1 restarts
# them, as a slower model would be: unheld they can finish all 32 steps before n1 notices n2. The job ends with 32 steps, a test accuracy within 0.5 points of
# an uninterrupted 4-rank run (2048 test images), both restarts and their causes in n1's summary, the
# times logged ("timing: ..."), and nothing left on either host.

ELASTIC_LAST_CALL=3   # last_call_timeout, seconds: how long n1 waits for more nodes after losing n2
scenario_hosts() { echo 2; }

scenario_elastic() {
  local out="$CL_DIR/out" data="$CL_DIR/data" ckpt="$CL_DIR/ckpt-elastic" whole rc1 rc2 rc3
  mkdir -p "$out"
  make_data "$data" 2048 2048 || { fail "could not write the data slice into $data"; return 1; }
  export COHORTRUN="$BUILD/tools/cohortrun" TRAIN="$BUILD/examples/fashion_mnist" MASTER_ADDR=n1 COHORT_TIMEOUT=30
  export COHORTRUN_FLAGS="--max-restarts 2 --monitor-interval 1 --stop-timeout 5 --rdzv-conf last_call_timeout=$ELASTIC_LAST_CALL"
  ELASTIC_FLAGS=(--batch-size 16 --threads 1 --progress off --data "$data" --max-steps 32 --checkpoint-every 8)

  # The uninterrupted run: 4 ranks on both hosts throughout.
  NNODES=2 elastic_node n2 "$out/whole.n2.log" "$CL_DIR/ckpt-whole" &
  JOB_N2=$!
  NNODES=2 elastic_node n1 "$out/whole.n1.log" "$CL_DIR/ckpt-whole"
  rc1=$?
  wait "$JOB_N2"; rc2=$?
  if [ "$rc1" != 0 ] || [ "$rc2" != 0 ]; then
    fail "the uninterrupted run failed (n1 $rc1, n2 $rc2)"
    tail -n 12 "$out"/whole.*.log >&2
    return 1
  fi
  whole=$(accuracy_of "$out/whole.n1.log")
  [ -n "$whole" ] || { fail "the uninterrupted run printed no test accuracy"; return 1; }
  cl_log "uninterrupted: test accuracy $whole% after 32 steps at 4 ranks"

  # Its timeout dies with the SIGKILL below: 2>/dev/null keeps the shell's "Killed" line out of the log.
  NNODES=1:2 elastic_node n2 "$out/first.n2.log" "$ckpt" 2>/dev/null &
  JOB_N2=$!
  NNODES=1:2 elastic_node n1 "$out/n1.log" "$ckpt" &
  JOB_N1=$!
  scale_down "$out" "$ckpt" || return 1
  scale_up "$out" "$ckpt" || return 1
  wait "$JOB_N1"; rc1=$?
  wait "$JOB_N3"; rc3=$?
  [ "$rc1" = 0 ] || { fail "cohortrun on n1 exited with status $rc1"; tail -n 20 "$out/n1.log" >&2; }
  [ "$rc3" = 0 ] || { fail "the cohortrun started later on n2 exited with status $rc3"; tail -n 20 "$out/later.n2.log" >&2; }
  check_summary "$out/n1.log"
  check_result "$out/n1.log" "$whole"
  local host left
  for host in n1 n2; do
    left=$(elastic_left_on "$host")
    [ -z "$left" ] || fail "processes left on $host: $left"
  done
  [ "$FAILURES" = 0 ]
}

# One node's cohortrun (jobs/cohortrun_node.sh) on HOST, in the foreground; its output in LOG.
elastic_node() {
  local host=$1 log=$2 ckpt=$3
  RDZV_ID="elastic-$(basename "$ckpt")" run_on "$host" 200 "$log" "$here/jobs/cohortrun_node.sh" \
    "${ELASTIC_FLAGS[@]}" --checkpoint-dir "$ckpt"
}

# Waits up to SECONDS for a line matching the extended regex PATTERN in FILE; 1 (and a failure) if none.
wait_for_line() {
  local file=$1 pattern=$2 seconds=$3 what=$4 i
  for ((i = 0; i < seconds * 10; i++)); do
    grep -Eq -- "$pattern" "$file" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "$what: no line matching '$pattern' in $(basename "$file") after $seconds s"
  tail -n 15 "$file" >&2
  return 1
}

# Processes of the job in HOST's namespaces: all but the host's holder and slurmd.
elastic_left_on() {
  local pid
  for pid in $(ip netns pids "$CL_PREFIX$1" 2>/dev/null); do
    [ "$pid" = "$(cat "$CL_DIR/$1.holder")" ] || [ "$pid" = "$(cat "$CL_DIR/$1.slurmd")" ] ||
      echo "$pid ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-60))"
  done
}

# The last test accuracy a run printed, in percent ("test accuracy 71.48% (...)").
accuracy_of() { grep -o 'test accuracy [0-9.]*%' "$1" | tail -n 1 | grep -o '[0-9.]*'; }

# (a) SIGKILL of every process of n2 after step-8: n1 restarts alone, world 2, from step-8.
scale_down() {
  local out=$1 ckpt=$2 t0 pid rc
  wait_for_line "$out/n1.log" "round 0: node 0 of 2, ranks 0\.\.1 of 4" 60 "(a) the first round" || return 1
  local i; for i in $(seq 900); do [ -d "$ckpt/step-8" ] && break; sleep 0.1; done
  [ -d "$ckpt/step-8" ] || { fail "(a) no checkpoint step-8 after 90 s"; tail -n 15 "$out/n1.log" >&2; return 1; }
  t0=$(now)
  for pid in $(elastic_left_on n2 | cut -d' ' -f1); do kill -KILL "$pid" 2>/dev/null; done
  wait "$JOB_N2"; rc=$?
  [ "$rc" -ge 124 ] || fail "(a) the killed cohortrun on n2 exited with status $rc, expected death by SIGKILL"
  wait_for_line "$out/n1.log" "restarting it \(restart 1 of 2\)" 30 "(a) n1 noticing the lost node" || return 1
  cl_log "timing: (a) n1's cohortrun stopped its workers to restart $(elapsed "$t0") s after the kill"
  wait_for_line "$out/n1.log" "round 1: node 0 of 1, ranks 0\.\.1 of 2" $((ELASTIC_LAST_CALL + 30)) \
    "(a) the rendezvous of 1 node" || return 1
  cl_log "timing: (a) round 1 (1 node, world 2) closed $(elapsed "$t0") s after the kill (last_call_timeout=$ELASTIC_LAST_CALL)"
  wait_for_line "$out/n1.log" "\[rank0\]: resumed from $ckpt/step-8 \(step 8, saved by 4 rank\(s\)\)" 60 \
    "(a) resuming at 2 ranks" || return 1
  cl_log "timing: (a) 2 ranks resumed training from step-8 $(elapsed "$t0") s after the kill"
  grep -q "\[rank0\]: world size 4 -> 2: each optimizer step accumulates 2 batches of 16 samples per rank, keeping the checkpoint's 64 samples per step" "$out/n1.log" ||
    fail "(a) the 2 ranks did not say they keep the global batch by accumulation"
  [ "$(grep -c 'joined a world of 2 via cohortrun/torchrun' "$out/n1.log")" = 2 ] ||
    fail "(a) not 2 ranks joined a world of 2 on n1"
  # The 2-rank group's own checkpoint: step-16 is the first it saves.
  for i in $(seq 900); do [ -d "$ckpt/step-16" ] && break; sleep 0.1; done
  [ -d "$ckpt/step-16" ] || { fail "(a) the 2 ranks saved no step-16 after 90 s"; tail -n 15 "$out/n1.log" >&2; return 1; }
  signal_workers STOP n1
}

# Sends signal SIG to the training processes (not cohortrun) in HOST's namespaces.
signal_workers() {
  local pid
  for pid in $(ip netns pids "$CL_PREFIX$2" 2>/dev/null); do
    # argv[0] only: cohortrun's own command line names the program too.
    [ "$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -n 1)" = "$TRAIN" ] && kill -"$1" "$pid" 2>/dev/null
  done
  return 0
}

# (b) A new cohortrun on n2 joins at the restart it causes: round 2, world 4, from the 2 ranks' checkpoint.
scale_up() {
  local out=$1 ckpt=$2 t0 resumed
  t0=$(now)
  NNODES=1:2 elastic_node n2 "$out/later.n2.log" "$ckpt" &
  JOB_N3=$!
  wait_for_line "$out/n1.log" "\[cohortrun\] 1 node waiting to join: restarting the worker group" 60 \
    "(b) n1 seeing the waiting node" || { signal_workers CONT n1; return 1; }
  signal_workers CONT n1   # the stop cohortrun sent them is delivered now
  cl_log "timing: (b) n1 stopped its workers for the waiting node $(elapsed "$t0") s after n2's cohortrun started"
  wait_for_line "$out/n1.log" "round 2: node 0 of 2, ranks 0\.\.1 of 4" 30 "(b) the rendezvous of 2 nodes" || return 1
  wait_for_line "$out/n1.log" "\[rank0\]: resumed from $ckpt/step-(16|24) \(step (16|24), saved by 2 rank\(s\)\)" 60 \
    "(b) resuming at 4 ranks" || return 1
  resumed=$(grep -o "resumed from $ckpt/step-[0-9]* (step [0-9]*, saved by 2" "$out/n1.log" | tail -n 1)
  cl_log "timing: (b) 4 ranks $resumed rank(s)) $(elapsed "$t0") s after n2's cohortrun started"
  grep -q "round 2: node 1 of 2, ranks 2\.\.3 of 4" "$out/later.n2.log" || fail "(b) n2 did not join round 2 as node 1"
  [ "$(grep -c 'joined a world of 4 via cohortrun/torchrun at [^ ]* (this host: 10.77.0.2)' "$out/later.n2.log")" = 2 ] ||
    fail "(b) not 2 ranks on n2 joined the world of 4"
}

# n1's summary: both restarts, their causes and the worlds they made.
check_summary() {
  local log=$1 line
  for line in \
    "[cohortrun] restarts: 2 (1 after a worker failure, of --max-restarts=2; 1 to take in joining nodes)" \
    "[cohortrun]   restart 2 (scale-up): 1 node waiting to join; 1 node (world 2) -> 2 nodes (world 4)"; do
    grep -qxF -- "$line" "$log" || fail "n1's summary has no line '$line'"
  done
  grep -Eqx -- "\[cohortrun\]   restart 1 \(worker failure\): rank [01] \(local rank [01]\) exited with code 1 on node 0; 2 nodes \(world 4\) -> 1 node \(world 2\)" "$log" ||
    fail "n1's summary has no line for restart 1 (worker failure, 2 nodes -> 1)"
  grep "\[cohortrun\] *restart" "$log" | sed 's/^/[cluster]   /' >&2
}

# 32 steps in all, one params-sha256, the accuracy within 0.5 points of the uninterrupted run's.
check_result() {
  local log=$1 whole=$2 got
  grep -q "^\[rank0\]: stopped after 32 steps (--max-steps)" "$log" || fail "the job did not end after 32 steps"
  [ -n "$(digest_of "$log")" ] || fail "the job printed no params-sha256 (or several)"
  got=$(accuracy_of "$log")
  awk -v a="$got" -v b="$whole" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 0.5) }' ||
    fail "test accuracy ${got:-none}% after the restarts, uninterrupted $whole%: more than 0.5 points apart"
  cl_log "elastic job: test accuracy $got% against $whole% uninterrupted, 32 steps"
}
