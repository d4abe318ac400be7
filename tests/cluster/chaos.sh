# Scenario chaos (issue 39): examples/fashion_mnist on 2 hosts x 2 ranks, `cohortrun --nnodes 2
# --max-restarts 1000` on each host (the by-hand shape, jobs/cohortrun_node.sh), a checkpoint every 8
# steps on a small disk both hosts share, while faults drawn from a seeded RNG hit it at random moments:
#   kill-worker      SIGKILL of one worker
#   kill-host        SIGKILL of every process of a host, its cohortrun and workers (n1 holds the rendezvous)
#   kill-in-save     SIGKILL of a worker or a host 0-40 ms after a save began (inotify sees `.step-N.tmp`)
#   kill-in-restart  SIGKILL of a worker, then again (a worker or a host) 0-4 s after the restart it
#                    caused began (cohortrun's `round N:` line): workers starting, joining, loading
#   freeze           SIGSTOP of every process of a host for 1 s to CHAOS_HOLD s, then SIGCONT
#   cut-link         iptables DROP on a host's link, both ways, for 1 s to CHAOS_HOLD s, then removed
#   disk-full        the checkpoint disk filled for 2 s to 2/3 x CHAOS_HOLD s, then freed
# Each fault is logged with its time and kind (out/faults.log). A host whose cohortrun ended badly gets
# a new one 1-5 s later, as a node's service manager (or a requeue) would start it: the node coming
# back. The world is 4 ranks at every step, so the job must end with the params-sha256 of the same job
# never disturbed, run first. After each fault the job must save a newer checkpoint within CHAOS_STALL
# s, and no cohortrun may exit badly unless it was killed or lost the rendezvous host to a kill, else
# the scenario stops at once naming the fault and the lines that show it. At the end: both hosts' last
# cohortrun exited 0; every params-sha256 printed is the undisturbed one; every cohortrun that ended by
# itself lists each of its restarts with its cause; no process of the job, no /dev/shm/cohort-*
# segment on either host, nothing but step-N, latest and .lock in the checkpoint directory (whose
# newest checkpoint verifies), no iptables rule and no mount left. The last line says
# "chaos: N faults (kind n, ...), T s, seed S, M steps (undisturbed U s), params-sha256 ...".
#
# CI (ctest cluster_chaos_test): the fixed CHAOS_SEED below, 256 steps, about 10 faults, CHAOS_HOLD 15 s.
# Long: CHAOS_MINUTES=30 (scripts/chaos.sh): a calibration run sizes the job so that undisturbed it
# takes about 0.8 x CHAOS_MINUTES; CHAOS_HOLD 25 s; the faults come until it ends; it fails when it lasted less
# than CHAOS_MINUTES or met fewer than CHAOS_MIN_FAULTS (50) faults. docs/cluster.md, "Chaos".
# CHAOS_KINDS and CHAOS_KILL_HOSTS narrow the faults drawn (to reproduce one kind).

scenario_hosts() { echo 2; }

CHAOS_SEED=${CHAOS_SEED:-3904}
CHAOS_MINUTES=${CHAOS_MINUTES:-}       # empty: the CI variant
CHAOS_TIMEOUT=${CHAOS_TIMEOUT:-10}     # COHORT_TIMEOUT: how long a rank waits for a silent peer
CHAOS_EVERY=8                          # --checkpoint-every: divides the 32-step epoch: saves at epoch ends too
CHAOS_DISK_MB=160                      # the checkpoint disk (ext4 on a loop device, mounted on both hosts)
CHAOS_STALL=${CHAOS_STALL:-150}        # seconds without a newer checkpoint after a fault: the job is stuck
CHAOS_KINDS=${CHAOS_KINDS:-kill-worker kill-host kill-in-save kill-in-restart freeze cut-link disk-full}
CHAOS_KILL_HOSTS=${CHAOS_KILL_HOSTS:-n1 n2}   # the hosts a whole-host kill may hit (n1 holds the rendezvous)

scenario_chaos() {
  out="$CL_DIR/out"
  mkdir -p "$out"
  make_data "$CL_DIR/data" 2048 512 || { fail "could not write the data slice"; return 1; }
  export COHORTRUN="$BUILD/tools/cohortrun" TRAIN="$BUILD/examples/fashion_mnist" NNODES=2 MASTER_ADDR=n1
  export COHORT_TIMEOUT=$CHAOS_TIMEOUT
  export COHORTRUN_FLAGS="--max-restarts 1000 --monitor-interval 1 --stop-timeout 5"
  CHAOS_FLAGS=(--batch-size 16 --threads 1 --progress off --data "$CL_DIR/data" --epochs 100000
               --checkpoint-every "$CHAOS_EVERY")
  if [ -n "$CHAOS_MINUTES" ]; then
    CHAOS_GAP=${CHAOS_GAP:-"3 25"}
    CHAOS_HOLD=${CHAOS_HOLD:-$((CHAOS_TIMEOUT * 5 / 2))}
    CHAOS_MIN_FAULTS=${CHAOS_MIN_FAULTS:-50}
    chaos_calibrate || return 1
  else
    CHAOS_GAP=${CHAOS_GAP:-"1 3"}
    CHAOS_HOLD=${CHAOS_HOLD:-$((CHAOS_TIMEOUT * 3 / 2))}
    CHAOS_STEPS=${CHAOS_STEPS:-256}   # 8 epochs of 32 steps: room for the faults when the machine is quick
    CHAOS_MIN_FAULTS=${CHAOS_MIN_FAULTS:-6}
  fi
  chaos_disk_up || return 1
  local host
  for host in n1 n2; do on_host "$host" iptables -S >"$out/$host.iptables.before"; done

  # The job never disturbed: the same flags, its checkpoints on the ordinary disk.
  local t0 rc1 rc2
  t0=$(now)
  chaos_node_once n2 "$out/ref.n2.log" "$CL_DIR/ckpt-ref" chaos-ref &
  local ref2=$!
  chaos_node_once n1 "$out/ref.n1.log" "$CL_DIR/ckpt-ref" chaos-ref
  rc1=$?
  wait "$ref2"; rc2=$?
  if [ "$rc1" != 0 ] || [ "$rc2" != 0 ]; then
    fail "the undisturbed run failed (n1 $rc1, n2 $rc2)"; tail -n 12 "$out"/ref.n?.log >&2; return 1
  fi
  REFERENCE=$(digest_of "$out/ref.n1.log")
  [ -n "$REFERENCE" ] || { fail "the undisturbed run printed no params-sha256"; return 1; }
  REF_SECONDS=$(elapsed "$t0")
  cl_log "undisturbed: params-sha256 $REFERENCE after $CHAOS_STEPS steps, $REF_SECONDS s"

  # The job under chaos: each host's cohortrun kept running by its node loop, the faults from here.
  CKPT="$CL_DIR/disk/ckpt"
  on_host n1 mkdir -p "$CKPT"
  DISK_VIEW="$(chaos_root n1)$CL_DIR/disk"   # the shared disk as this namespace sees it
  CKPT_VIEW="$DISK_VIEW/ckpt"
  RANDOM=$CHAOS_SEED
  declare -gA FAULTS_BY_KIND=() SEEN_LINES=() REPORTED_EXITS=()
  FAULT_COUNT=0
  CHAOS_START=$(now)
  : >"$out/kills"
  chaos_node_loop n2 &
  LOOP_N2=$!
  chaos_node_loop n1 &
  LOOP_N1=$!
  chaos_inject
  local injected=$?
  if [ "$injected" != 0 ]; then  # stuck: end the job (the failure is said)
    touch "$out/stop"
    chaos_restore
    chaos_kill_host n1; chaos_kill_host n2
  fi
  chaos_wait_loops
  CHAOS_SECONDS=$(elapsed "$CHAOS_START")
  [ "$injected" = 0 ] && chaos_check_end
  chaos_restore
  chaos_check_clean
  local kinds="" kind
  for kind in kill-worker kill-host kill-in-save kill-in-restart freeze cut-link disk-full; do
    kinds+="${kinds:+, }$kind ${FAULTS_BY_KIND[$kind]:-0}"
  done
  cl_log "chaos: $FAULT_COUNT faults ($kinds), $CHAOS_SECONDS s, seed $CHAOS_SEED, $CHAOS_STEPS steps" \
    "(undisturbed $REF_SECONDS s), $([ "$FAILURES" = 0 ] && echo "params-sha256 $REFERENCE" || echo "$FAILURES failure(s)")"
  [ "$FAILURES" = 0 ]
}

# --- the hosts and the job ------------------------------------------------------------------------

# The root of HOST's mount namespace, as seen from here (the checkpoint disk is mounted only there).
chaos_root() { echo "/proc/$(cat "$CL_DIR/$1.holder")/root"; }

# One cohortrun (jobs/cohortrun_node.sh) on HOST in the foreground: LOG CKPT RDZV_ID.
chaos_node_once() {
  local host=$1 log=$2 ckpt=$3 id=$4
  mkdir -p "$CL_DIR/tmp-$host"
  TMPDIR="$CL_DIR/tmp-$host" RDZV_ID=$id run_on "$host" 100000 "$log" "$here/jobs/cohortrun_node.sh" \
    "${CHAOS_FLAGS[@]}" --max-steps "$CHAOS_STEPS" --checkpoint-dir "$ckpt"
}

# A small ext4 disk for the checkpoints (a loop device), mounted at $CL_DIR/disk on both hosts: one
# file system, as a cluster's shared disk. It goes when the hosts' namespaces go (the loop device
# clears itself with its last mount), also when the scenario is cut short.
chaos_disk_up() {
  truncate -s "${CHAOS_DISK_MB}M" "$CL_DIR/disk.img" && mkfs.ext4 -q -F -m 0 "$CL_DIR/disk.img" ||
    { fail "could not make the checkpoint disk"; return 1; }
  mkdir -p "$CL_DIR/disk"
  local host
  for host in n1 n2; do
    on_host "$host" mount -o loop "$CL_DIR/disk.img" "$CL_DIR/disk" ||
      { fail "could not mount the checkpoint disk on $host"; return 1; }
  done
  [ "$(on_host n2 stat -f -c %i "$CL_DIR/disk")" = "$(on_host n1 stat -f -c %i "$CL_DIR/disk")" ] ||
    { fail "n1 and n2 do not share the checkpoint disk"; return 1; }
}

# The long variant: 64 steps undisturbed, timed from the second epoch's line, give the steps that
# take about 0.8 x CHAOS_MINUTES undisturbed (whole epochs).
chaos_calibrate() {
  CHAOS_STEPS=64
  chaos_node_once n2 "$out/calibrate.n2.log" "$CL_DIR/ckpt-calibrate" chaos-calibrate &
  local other=$! per_epoch
  chaos_node_once n1 "$out/calibrate.n1.log" "$CL_DIR/ckpt-calibrate" chaos-calibrate
  wait "$other"
  per_epoch=$(grep -o 'epoch 2/[0-9]*.* time [0-9.]* s' "$out/calibrate.n1.log" | grep -o 'time [0-9.]*' | awk '{ print $2 }')
  [ -n "$per_epoch" ] || { fail "the calibration run printed no second epoch line"; tail -n 12 "$out/calibrate.n1.log" >&2; return 1; }
  CHAOS_STEPS=$(awk -v m="$CHAOS_MINUTES" -v e="$per_epoch" 'BEGIN { n = int(0.8 * m * 60 / e) + 1; print 32 * n }')
  rm -rf "$CL_DIR/ckpt-calibrate"
  cl_log "calibration: an epoch (32 steps) takes $per_epoch s undisturbed: $CHAOS_STEPS steps for $CHAOS_MINUTES minutes"
}

# Keeps HOST's cohortrun going, as a node's service manager would: incarnation K writes
# $out/HOST.K.log; each exit is a line "K STATUS START END" in $out/HOST.exits; after a bad exit a new
# one starts 1-5 s later, until one exits 0 or the job is over (a cohortrun exited 0).
chaos_node_loop() {
  local host=$1 k=0 rc start
  RANDOM=$((CHAOS_SEED + ${host#n} * 7919))
  while :; do
    echo "$k" >"$out/$host.current"
    start=$(now)
    chaos_node_once "$host" "$out/$host.$k.log" "$CKPT" chaos-job 2>/dev/null  # no "Killed" from bash
    rc=$?
    echo "$k $rc $start $(now)" >>"$out/$host.exits"
    if [ "$rc" = 0 ]; then touch "$out/over"; return 0; fi
    [ -e "$out/over" ] || [ -e "$out/stop" ] && return "$rc"
    local delay=$((1000 + RANDOM % 4000))
    cl_log "chaos: $host's cohortrun $k exited with status $rc; a new one in $((delay / 1000)).$((delay % 1000 / 100)) s"
    sleep "$((delay / 1000)).$(printf %03d $((delay % 1000)))"
    [ -e "$out/over" ] || [ -e "$out/stop" ] && return "$rc"
    k=$((k + 1))
  done
}

# Waits for both node loops; one still running 120 s later is stopped (a failure).
chaos_wait_loops() {
  local i
  for ((i = 0; i < 1200; i++)); do
    kill -0 "$LOOP_N1" 2>/dev/null || kill -0 "$LOOP_N2" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$LOOP_N1" 2>/dev/null || kill -0 "$LOOP_N2" 2>/dev/null; then
    fail "a host's cohortrun still ran 120 s after the faults ended: $(chaos_current_logs | xargs -n1 basename | tr '\n' ' ')"
    chaos_tails
    touch "$out/stop"
    chaos_kill_host n1; chaos_kill_host n2
  fi
  wait "$LOOP_N1" "$LOOP_N2" 2>/dev/null
}

# Processes of the job in HOST's namespaces: all but the host's holder and slurmd (the machine).
chaos_job_pids() {
  local pid
  for pid in $(ip netns pids "$CL_PREFIX$1" 2>/dev/null); do
    [ "$pid" = "$(cat "$CL_DIR/$1.holder")" ] || [ "$pid" = "$(cat "$CL_DIR/$1.slurmd")" ] || echo "$pid"
  done
}

# The workers (fashion_mnist processes) running on HOST.
chaos_workers() {
  local pid
  for pid in $(ip netns pids "$CL_PREFIX$1" 2>/dev/null); do
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = fashion_mnist ] && echo "$pid"
  done
}

chaos_current_logs() { local h; for h in n1 n2; do [ -f "$out/$h.current" ] && echo "$out/$h.$(cat "$out/$h.current").log"; done; }

chaos_tails() {
  local log
  for log in $(chaos_current_logs); do
    echo "--- $(basename "$log") ends:" >&2
    tail -n 15 "$log" >&2
  done
}

# The newest step saved in the checkpoint directory (0 when none).
chaos_newest() {
  local newest=0 dir n
  for dir in "$CKPT_VIEW"/step-*; do
    [ -d "$dir" ] || continue
    n=${dir##*step-}
    [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -gt "$newest" ] && newest=$n
  done
  echo "$newest"
}

# The job has ended (a cohortrun exited 0) or is ending (rank 0 printed its digest): no more faults.
chaos_job_ending() {
  [ -e "$out/over" ] && return 0
  grep -q 'params-sha256:' "$out"/n1.*.log 2>/dev/null
}

# --- the faults -----------------------------------------------------------------------------------

# R = a random integer in [LOW, HIGH] (a global: $(...) would draw in a subshell, the same every time).
rnd() { R=$(($1 + (RANDOM * 32768 + RANDOM) % ($2 - $1 + 1))); }

# Counts a fault of KIND (numbered from 1).
fault_begin() {
  FAULT_COUNT=$((FAULT_COUNT + 1))
  FAULTS_BY_KIND[$1]=$((${FAULTS_BY_KIND[$1]:-0} + 1))
}

fault_log() {
  local line
  line="fault $FAULT_COUNT at $(elapsed "$CHAOS_START") s (step $(chaos_newest) saved): $*"
  echo "$line" >>"$out/faults.log"
  cl_log "chaos: $line"
}

# SIGKILL of every process of HOST's job (its cohortrun and workers); its node loop starts a new one.
# Each kill is a line "HOST INCARNATION TIME" in $out/kills (read after the kill: a cohortrun the
# node loop started just before it is the one killed).
chaos_kill_host() {
  local host=$1 pid pids round
  for round in 1 2 3; do  # a worker forked meanwhile dies with its cohortrun (PDEATHSIG); to be sure
    pids=$(chaos_job_pids "$host")
    [ -n "$pids" ] || break
    for pid in $pids; do kill -KILL "$pid" 2>/dev/null; done
    sleep 0.05
  done
  echo "$host $(cat "$out/$host.current") $(now)" >>"$out/kills"
}

# SIGKILL of one worker of HOST (the other host's when HOST has none running); sets KILLED.
chaos_kill_worker() {
  local host=$1 pids pid rank i other
  for ((i = 0; i < 200; i++)); do
    pids=($(chaos_workers "$host"))
    if [ "${#pids[@]}" = 0 ]; then
      other=$([ "$host" = n1 ] && echo n2 || echo n1)
      pids=($(chaos_workers "$other"))
      [ "${#pids[@]}" = 0 ] || host=$other
    fi
    [ "${#pids[@]}" = 0 ] || break
    sleep 0.1
  done
  [ "${#pids[@]}" != 0 ] || { KILLED="no worker running for 20 s"; return 1; }
  rnd 0 $((${#pids[@]} - 1))
  pid=${pids[$R]}
  rank=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | sed -n 's/^RANK=//p')
  kill -KILL "$pid" 2>/dev/null
  KILLED="worker pid $pid (rank ${rank:-?}) on $host"
}

# HOST = a host a whole-host kill may hit (CHAOS_KILL_HOSTS), drawn at random.
chaos_pick_host() {
  local hosts=($CHAOS_KILL_HOSTS)
  rnd 0 $((${#hosts[@]} - 1))
  HOST=${hosts[$R]}
}

# A whole host (one time in 3) or a worker; sets KILLED.
chaos_kill_something() {
  rnd 0 2
  if [ "$R" = 0 ]; then
    chaos_pick_host
    chaos_kill_host "$HOST"
    KILLED="host $HOST (cohortrun $(cat "$out/$HOST.current") and its workers)"
  else
    rnd 1 2
    chaos_kill_worker "n$R"
  fi
}

fault_kill_worker() {
  fault_begin kill-worker
  rnd 1 2
  chaos_kill_worker "n$R"
  fault_log "kill-worker: SIGKILL of $KILLED"
}

fault_kill_host() {
  fault_begin kill-host
  chaos_pick_host
  chaos_kill_host "$HOST"
  fault_log "kill-host: SIGKILL of every process of $HOST (cohortrun $(cat "$out/$HOST.current") and its workers)"
}

# Waits (up to 90 s) for a save to begin (inotify: the moment `.step-N.tmp` is made), then kills a
# worker or a whole host 0-40 ms later, while the shards, the manifest or the rename are under way.
fault_kill_in_save() {
  fault_begin kill-in-save
  local host mode=worker
  rnd 0 2
  if [ "$R" = 0 ]; then mode=host; chaos_pick_host; host=$HOST; else rnd 1 2; host=n$R; fi
  rnd 0 40; local delay=$R
  rnd 0 32767; local seed=$R
  local said
  said=$(python3 - "$CKPT_VIEW" "$mode" "$(stat -L -c %i "/run/netns/$CL_PREFIX$host")" \
    "$(cat "$CL_DIR/$host.holder") $(cat "$CL_DIR/$host.slurmd")" "$delay" 90 "$seed" "$out" "$host" <<'EOF_PY'
import ctypes, glob, os, random, select, signal, struct, sys, time
ckpt, mode, netns, keep, delay_ms, limit, seed, out, host = sys.argv[1:10]
keep, rng = set(keep.split()), random.Random(int(seed))
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(os.O_CLOEXEC)
IN_CREATE, IN_MOVED_TO = 0x100, 0x80
if fd < 0 or libc.inotify_add_watch(fd, ckpt.encode(), IN_CREATE | IN_MOVED_TO) < 0:
    print("cannot watch the checkpoint directory"); sys.exit(1)
def saving():
    for name in os.listdir(ckpt):
        if name.startswith(".step-") and name.endswith(".tmp"):
            return name
def ending():  # chaos_job_ending
    if os.path.exists(out + "/over"):
        return True
    return any("params-sha256:" in open(log, errors="replace").read() for log in glob.glob(out + "/n1.*.log"))
name, end = saving(), time.time() + float(limit)
while name is None and time.time() < end:
    if not select.select([fd], [], [], 0.5)[0]:
        if ending():
            print("none: the job ended before a save began"); sys.exit(0)
        continue
    data, i = os.read(fd, 65536), 0
    while i < len(data):
        _, _, _, size = struct.unpack_from("iIII", data, i)
        entry = data[i + 16:i + 16 + size].rstrip(b"\0").decode()
        i += 16 + size
        if entry.startswith(".step-") and entry.endswith(".tmp"):
            name = entry
if name is None:
    print("no save began in %s s" % limit); sys.exit(1)
seen = time.time()
time.sleep(int(delay_ms) / 1000)
ours = []
for pid in os.listdir("/proc"):
    if not pid.isdigit() or pid in keep:
        continue
    try:
        if os.readlink("/proc/%s/ns/net" % pid) != "net:[%s]" % netns:
            continue
        comm = open("/proc/%s/comm" % pid).read().strip()
    except OSError:
        continue
    ours.append((int(pid), comm))
workers = [p for p, comm in ours if comm == "fashion_mnist"]
targets = [p for p, _ in ours] if mode == "host" else [rng.choice(workers)] if workers else []
for pid in targets:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
state = "still being written" if os.path.exists(os.path.join(ckpt, name)) else "already renamed"
if mode == "host":  # as chaos_kill_host records it
    with open(out + "/kills", "a") as kills:
        kills.write("%s %s %.3f\n" % (host, open("%s/%s.current" % (out, host)).read().strip(), time.time()))
what = "every process of the host (%d)" % len(targets) if mode == "host" else \
    ("worker pid %d" % targets[0] if targets else "no worker (none running)")
print("%s %.0f ms after %s appeared (%s)" % (what, (time.time() - seen) * 1000, name, state))
EOF_PY
  )
  case "$said" in
    none:*) fault_log "kill-in-save: $said" ;;
    *) fault_log "kill-in-save: SIGKILL on $host of $said" ;;
  esac
}

# Kills a worker, waits for the restart it causes to begin (a new `round N:` line), then kills again
# 0-4 s later: while cohortrun starts the workers, the program starts, or it loads the checkpoint.
fault_kill_in_restart() {
  local before i now_rounds
  fault_begin kill-worker
  before=$(cat $(chaos_current_logs) 2>/dev/null | grep -c ' round [0-9]*: node')
  rnd 1 2
  chaos_kill_worker "n$R"
  fault_log "kill-in-restart (1 of 2): SIGKILL of $KILLED, to cause a restart"
  for ((i = 0; i < 600; i++)); do
    now_rounds=$(cat $(chaos_current_logs) 2>/dev/null | grep -c ' round [0-9]*: node')
    [ "$now_rounds" -gt "$before" ] && break
    sleep 0.05
  done
  [ "$now_rounds" -gt "$before" ] || { fault_log "kill-in-restart: no restart began within 30 s"; return; }
  rnd 0 4000
  local wait_ms=$R
  sleep "$((wait_ms / 1000)).$(printf %03d $((wait_ms % 1000)))"
  fault_begin kill-in-restart
  chaos_kill_something
  fault_log "kill-in-restart (2 of 2): SIGKILL of $KILLED $wait_ms ms after the restart's round began"
}

fault_freeze() {
  fault_begin freeze
  rnd 1 2; local host=n$R pid
  rnd 1000 $((1000 * CHAOS_HOLD)); local ms=$R
  fault_log "freeze: SIGSTOP of every process of $host for $((ms / 1000)).$((ms % 1000 / 100)) s (COHORT_TIMEOUT=$CHAOS_TIMEOUT)"
  echo "$host $(now) $ms" >>"$out/freezes"
  chaos_signal_host STOP "$host"
  chaos_sleep_ms "$ms" STOP "$host"
  chaos_signal_host CONT "$host"
}

# Sends SIG to every process of HOST's job, twice (a process forked meanwhile gets it too).
chaos_signal_host() {
  local pid round
  for round in 1 2; do
    for pid in $(chaos_job_pids "$2"); do kill -"$1" "$pid" 2>/dev/null; done
  done
}

# Sleeps MS milliseconds; with STOP HOST, also stops whatever HOST starts meanwhile (a node loop's new
# cohortrun on a frozen machine would not run either).
chaos_sleep_ms() {
  local ms=$1 end
  end=$(awk -v t="$(now)" -v ms="$ms" 'BEGIN { printf "%.3f", t + ms / 1000 }')
  while awk -v t="$(now)" -v e="$end" 'BEGIN { exit !(t < e) }'; do
    [ "${2:-}" = STOP ] && chaos_signal_host STOP "$3"
    sleep 0.2
  done
}

fault_cut_link() {
  fault_begin cut-link
  rnd 1 2; local host=n$R
  rnd 1000 $((1000 * CHAOS_HOLD)); local ms=$R
  fault_log "cut-link: iptables DROP on $host's link, both ways, for $((ms / 1000)).$((ms % 1000 / 100)) s (COHORT_TIMEOUT=$CHAOS_TIMEOUT)"
  on_host "$host" iptables -I INPUT 1 -i eth0 -j DROP
  on_host "$host" iptables -I OUTPUT 1 -o eth0 -j DROP
  chaos_sleep_ms "$ms"
  on_host "$host" iptables -D INPUT -i eth0 -j DROP
  on_host "$host" iptables -D OUTPUT -o eth0 -j DROP
}

fault_disk_full() {
  fault_begin disk-full
  rnd 2000 $((CHAOS_HOLD * 1000 * 2 / 3)); local ms=$R free
  free=$(stat -f -c '%a %S' "$DISK_VIEW" | awk '{ print $1 * $2 }')
  fallocate -l "$free" "$DISK_VIEW/fill" 2>/dev/null
  dd if=/dev/zero of="$DISK_VIEW/fill" bs=64k oflag=append conv=notrunc 2>/dev/null  # what fallocate left
  fault_log "disk-full: the checkpoint disk filled ($((free / 1048576)) MiB, $(stat -f -c %a "$DISK_VIEW") blocks left) for $((ms / 1000)).$((ms % 1000 / 100)) s"
  chaos_sleep_ms "$ms"
  rm -f "$DISK_VIEW/fill"
}

# Logs the restart lines (and errors) cohortrun printed since the last look, from every log of the job.
chaos_new_lines() {
  local log n have line
  for log in "$out"/n[12].*.log; do
    [ -f "$log" ] || continue
    n=$(wc -l <"$log")
    have=${SEEN_LINES[$log]:-0}
    [ "$n" -gt "$have" ] || continue
    SEEN_LINES[$log]=$n
    while IFS= read -r line; do cl_log "chaos:   $(basename "$log"): ${line:0:220}"; done < <(
      sed -n "$((have + 1)),${n}p" "$log" |
        grep -E '^\[cohortrun\] (worker group failed|[0-9]+ nodes? waiting|stopping:|error:)|error: map::at')
  done
}

# Draws the faults until the job ends; 1 when the job got stuck (the failure says where).
chaos_inject() {
  local deck=() kind step waited gap_low gap_high i
  read -r gap_low gap_high <<<"$CHAOS_GAP"
  while ! chaos_job_ending; do
    # The job must save a newer checkpoint after each fault: it gets on despite them.
    step=$(chaos_newest)
    waited=$(now)
    while ! chaos_job_ending && [ "$(chaos_newest)" -le "$step" ] && [ "$FAULT_COUNT" -gt 0 ]; do
      if awk -v a="$waited" -v b="$(now)" -v s="$CHAOS_STALL" 'BEGIN { exit !(b - a > s) }'; then
        fail "the job saved no checkpoint newer than step-$step in $CHAOS_STALL s after fault $FAULT_COUNT ($(tail -n 1 "$out/faults.log"))"
        chaos_new_lines
        chaos_tails
        return 1
      fi
      chaos_check_exits "after fault $FAULT_COUNT ($(tail -n 1 "$out/faults.log"))" || { chaos_new_lines; return 1; }
      sleep 0.3
    done
    chaos_new_lines
    rnd "$gap_low" "$gap_high"
    for ((i = 0; i < R * 10; i++)); do chaos_job_ending && break; sleep 0.1; done
    chaos_job_ending && break
    if [ "${#deck[@]}" = 0 ]; then  # each kind once per deck, in a random order
      deck=($CHAOS_KINDS)
      for ((i = ${#deck[@]} - 1; i > 0; i--)); do
        rnd 0 "$i"; kind=${deck[$i]}; deck[$i]=${deck[$R]}; deck[$R]=$kind
      done
    fi
    kind=${deck[0]}
    deck=("${deck[@]:1}")
    "fault_${kind//-/_}"
  done
  chaos_new_lines
  return 0
}

# --- the checks -----------------------------------------------------------------------------------

# A host's cohortrun that exited badly is expected when it was killed, or when it is n2's and the
# rendezvous host n1 was killed or frozen, or its link cut, while it ran (it lost the rendezvous).
chaos_exit_expected() {
  local host=$1 k=$2 rc=$3 start=$4 end=$5
  [ "$rc" = 137 ] && grep -q "^$host $k " "$out/kills" && return 0
  [ "$host" = n2 ] && [ "$rc" = 1 ] &&
    awk -v s="$start" -v e="$end" '$1 == "n1" && $3 >= s && $3 <= e { found = 1 } END { exit !found }' "$out/kills" &&
    return 0
  return 1
}

# Fails, once for each, naming the cohortruns that exited badly and not as expected (above), with their
# last cohortrun lines; WHEN says when it was noticed. 1 when there is any.
chaos_check_exits() {
  local when=$1 host k rc start end bad=0
  for host in n1 n2; do
    [ -f "$out/$host.exits" ] || continue
    while read -r k rc start end; do
      [ "$rc" = 0 ] && continue
      chaos_exit_expected "$host" "$k" "$rc" "$start" "$end" && continue
      bad=1
      [ -z "${REPORTED_EXITS[$host.$k]:-}" ] || continue
      REPORTED_EXITS[$host.$k]=1
      fail "$host's cohortrun $k exited with status $rc $(awk -v a="$CHAOS_START" -v b="$end" 'BEGIN { printf "%.1f", b - a }') s" \
        "into the chaos run, $when; it was not killed, nor was the rendezvous host while it ran. Its last lines:"
      grep -E '^\[cohortrun\]|error' "$out/$host.$k.log" | tail -n 6 | cut -c1-300 >&2
    done <"$out/$host.exits"
  done
  [ "$bad" = 0 ]
}

chaos_check_end() {
  local host last line k log got restarts listed
  for host in n1 n2; do
    last=$(tail -n 1 "$out/$host.exits" 2>/dev/null)
    [ "$(echo "$last" | cut -d' ' -f2)" = 0 ] ||
      fail "$host's last cohortrun (${last%% *}) exited with status $(echo "$last" | cut -d' ' -f2), not 0"
  done
  chaos_check_exits "at the end"
  # Every digest printed is the undisturbed one.
  got=$(grep -ho 'params-sha256: [0-9a-f]*' "$out"/n[12].*.log | sort | uniq -c)
  [ -n "$got" ] || fail "the job printed no params-sha256"
  while read -r count line; do
    [ "${line#params-sha256: }" = "$REFERENCE" ] ||
      fail "the job printed $line ($count time(s)), the undisturbed run $REFERENCE"
  done <<<"$got"
  grep -q "stopped after $CHAOS_STEPS steps (--max-steps)" "$out"/n1.*.log ||
    fail "rank 0 never said it stopped after $CHAOS_STEPS steps"
  # Each cohortrun that ended by itself lists every restart it went through, with its cause.
  local total=0 summarized=0 killed=0
  for log in "$out"/n[12].*.log; do
    restarts=$(grep -cE '^\[cohortrun\] (worker group failed \(.+\); restarting it|[0-9]+ nodes? waiting to join: restarting)' "$log")
    total=$((total + restarts))
    k=$(basename "$log" .log); host=${k%%.*}; k=${k#*.}
    if grep -q "^$host $k " "$out/kills"; then killed=$((killed + restarts)); continue; fi
    if [ "$restarts" = 0 ]; then
      grep -q '^\[cohortrun\] restarts:' "$log" && fail "$(basename "$log") lists restarts but made none"
      continue
    fi
    line=$(grep '^\[cohortrun\] restarts: ' "$log" | tail -n 1)
    [ "${line#\[cohortrun\] restarts: }" != "$line" ] && [ "$(echo "${line#\[cohortrun\] restarts: }" | cut -d' ' -f1)" = "$restarts" ] ||
      { fail "$(basename "$log") made $restarts restart(s), its summary says '${line:-nothing}'"; continue; }
    listed=$(grep -cE '^\[cohortrun\]   restart [0-9]+ \((worker failure|scale-up)\): .+; [0-9]+ nodes? \(world [0-9]+\) -> ' "$log")
    [ "$listed" = "$restarts" ] || fail "$(basename "$log") made $restarts restart(s), its summary lists $listed with a cause"
    summarized=$((summarized + restarts))
  done
  cl_log "chaos: $total restarts on the two hosts, $summarized in the summaries of the cohortruns that" \
    "ended by themselves, $killed in cohortruns killed before a summary; n1's restarts by cause:"
  grep -ho '^\[cohortrun\] worker group failed (.*); restarting it' "$out"/n1.*.log |
    sed -E 's/^\[cohortrun\] worker group failed \(//; s/\); restarting it$//; s/rank [0-9]+ \(local rank [0-9]+\)/a rank/; s/node [0-9]+$/node N/' |
    sort | uniq -c | sort -rn | sed 's/^/[cluster]     /' >&2
  local incarnations
  incarnations=$(cat "$out"/n1.exits "$out"/n2.exits | wc -l)
  cl_log "chaos: $incarnations cohortruns in all (n1 $(wc -l <"$out/n1.exits"), n2 $(wc -l <"$out/n2.exits"))"
  if [ -n "$CHAOS_MINUTES" ]; then
    awk -v s="$CHAOS_SECONDS" -v m="$CHAOS_MINUTES" 'BEGIN { exit !(s >= 60 * m) }' ||
      fail "the chaos run lasted $CHAOS_SECONDS s, less than CHAOS_MINUTES=$CHAOS_MINUTES"
  fi
  [ "$FAULT_COUNT" -ge "$CHAOS_MIN_FAULTS" ] || fail "only $FAULT_COUNT faults, fewer than $CHAOS_MIN_FAULTS"
}

# Undoes what the faults may have left (also after a failure): SIGCONT, the rules, the fill file.
chaos_restore() {
  local host
  for host in n1 n2; do
    chaos_signal_host CONT "$host"
    while on_host "$host" iptables -D INPUT -i eth0 -j DROP 2>/dev/null; do :; done
    while on_host "$host" iptables -D OUTPUT -o eth0 -j DROP 2>/dev/null; do :; done
  done
  [ -n "${DISK_VIEW:-}" ] && rm -f "$DISK_VIEW/fill"
}

# Nothing of the job is left: processes, segments, temporaries, rules, mounts.
chaos_check_clean() {
  local host left pids pid killed
  for host in n1 n2; do
    pids=$(chaos_job_pids "$host")
    if [ -n "$pids" ]; then
      left=""
      for pid in $pids; do left+=" $pid ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-60))"; done
      fail "processes left on $host:$left"
      chaos_kill_host "$host"
    fi
    left=$(on_host "$host" sh -c 'ls -A /dev/shm | grep "^cohort-"')
    [ -z "$left" ] || fail "segments left in $host's /dev/shm: $(echo "$left" | tr '\n' ' ')"
    on_host "$host" iptables -S | cmp -s - "$out/$host.iptables.before" ||
      fail "$host's iptables rules differ from before: $(on_host "$host" iptables -S | tr '\n' ';')"
    # cohortrun's own temporary directory: only a SIGKILLed cohortrun may leave one.
    left=$(ls -A "$CL_DIR/tmp-$host" 2>/dev/null | wc -l)
    killed=$(grep -c "^$host " "$out/kills" 2>/dev/null)
    [ "$left" -le "${killed:-0}" ] ||
      fail "$left cohortrun temporary directories left in $CL_DIR/tmp-$host, $killed cohortruns of $host were killed"
    [ "$left" = 0 ] || cl_log "chaos: $left temporary directories of SIGKILLed cohortruns in tmp-$host (nothing can remove them at a SIGKILL)"
  done
  if [ -n "${CKPT_VIEW:-}" ] && [ -d "$CKPT_VIEW" ]; then
    left=$(cd "$CKPT_VIEW" && find . -mindepth 1 -maxdepth 1 ! -name 'step-[0-9]*' ! -name latest ! -name .lock | sed 's|^\./||')
    [ -z "$left" ] || fail "left in the checkpoint directory: $(echo "$left" | tr '\n' ' ')"
    left=$(cd "$CKPT_VIEW" && find . -name '*.tmp*' -o -name '.*tmp*' | sed 's|^\./||')
    [ -z "$left" ] || fail "temporaries left in the checkpoint directory: $(echo "$left" | tr '\n' ' ')"
    cl_log "chaos: the checkpoint directory holds $(cd "$CKPT_VIEW" && ls -A | tr '\n' ' ')"
    on_host n1 "$BUILD/tools/cohort_ckpt/cohort-ckpt" verify "$CKPT" >"$out/verify.log" 2>&1 ||
      fail "the newest checkpoint does not verify: $(tail -n 3 "$out/verify.log")"
  fi
  [ -e "$CL_DIR/disk.img" ] || return
  for host in n1 n2; do
    on_host "$host" umount "$CL_DIR/disk" || fail "could not unmount the checkpoint disk on $host"
  done
  sleep 0.2
  [ -z "$(losetup -j "$CL_DIR/disk.img")" ] || fail "the checkpoint disk's loop device is still attached: $(losetup -j "$CL_DIR/disk.img")"
}
