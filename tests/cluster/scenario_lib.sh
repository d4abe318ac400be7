# What the scenarios share (sourced by run.sh): a small slice of Fashion-MNIST so that a run is a few
# seconds of training, the fixed training flags, bounded steps, and the checks of a run's output: its
# exit status, its one params-sha256 line, and which launcher and how many hosts its ranks joined from
# (the `joined a world` line COHORT_LOG_LEVEL=info prints on every rank).

TRAIN_FLAGS=(--max-steps 6 --batch-size 16 --threads 1 --progress off)
HOROVOD_FLAGS=(--max-steps 6 --batch-size 16 --test-batch-size 256 --threads 1 --log-interval 1000)
FAILURES=0
export COHORT_LOG_LEVEL=info
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# mpirun reaches the other hosts through the harness's agent (no ssh).
export OMPI_MCA_plm_rsh_agent="$here/ns_agent.sh"

fail() { echo "FAIL: $*" >&2; FAILURES=$((FAILURES + 1)); }

# Runs a command on a host with a time limit; the command's output goes to FILE.
run_on() {
  local host=$1 seconds=$2 file=$3; shift 3
  timeout -k 5 "$seconds" nsenter -t "$(cat "$CL_DIR/$host.holder")" --net --mount --uts --wd="$PWD" -- "$@" \
    >"$file" 2>&1
}

# Submits a batch job from head and waits for it (polling, not sbatch --wait, whose polls back off to
# 30 s apart); the job's exit status is the return value, its output goes to FILE.
sbatch_wait() {
  local seconds=$1 file=$2 id state i; shift 2
  id=$(on_host head sbatch --parsable --output="$file" "$@" 2>"$file.sbatch") ||
    { fail "sbatch $* was refused: $(cat "$file.sbatch")"; return 1; }
  for ((i = 0; i < seconds * 4; i++)); do
    state=$(on_host head scontrol show job -o "$id" 2>/dev/null)
    case "$state" in
      *JobState=PENDING* | *JobState=RUNNING* | *JobState=CONFIGURING* | *JobState=COMPLETING* | "") sleep 0.25 ;;
      *) break ;;
    esac
  done
  case "$state" in
    *JobState=COMPLETED*) return 0 ;;
    *JobState=PENDING* | *JobState=RUNNING* | *JobState=COMPLETING*)
      on_host head scancel "$id"; fail "job $id ($*) still ran after $seconds s"; return 124 ;;
    *) local code=${state##*ExitCode=}; code=${code%%:*}; echo "job $id: ${state##*JobState=}" | cut -d' ' -f1-3 >&2
       return "${code:-1}" ;;
  esac
}

# The first TRAIN (2048) images and TEST (512) images of Debian's Fashion-MNIST, unpacked, in DIR:
# make_data DIR [TRAIN [TEST]].
make_data() {
  mkdir -p "$1"
  python3 - /usr/share/datasets/fashion-mnist "$1" "${2:-2048}" "${3:-512}" <<'EOF'
import gzip, struct, sys
src, dst, counts = sys.argv[1], sys.argv[2], {"train": int(sys.argv[3]), "t10k": int(sys.argv[4])}
for split, n in counts.items():
    for kind, dims, item in (("images", 3, 28 * 28), ("labels", 1, 1)):
        name = f"{split}-{kind}-idx{dims}-ubyte"
        data = gzip.open(f"{src}/{name}.gz").read()
        header = 4 + 4 * dims
        with open(f"{dst}/{name}", "wb") as out:
            out.write(data[:4] + struct.pack(">I", n) + data[8:header] + data[header:header + n * item])
EOF
}

# The one params-sha256 in a run's output ("" when there is none or more than one).
digest_of() {
  local lines
  lines=$(grep -o 'params-sha256: [0-9a-f]\{64\}' "$1")
  [ "$(printf '%s\n' "$lines" | grep -c .)" = 1 ] && echo "${lines#params-sha256: }"
}

# The distinct "this host" addresses of a run's `joined a world of N via LAUNCHER` lines, space-separated.
joined_hosts() {
  local file=$1 size=$2 launcher=$3
  grep -o "joined a world of $size via $launcher at [^ ]* (this host: [^)]*)" "$file" |
    sed 's/.*(this host: \(.*\))/\1/' | sort -u | tr '\n' ' ' | sed 's/ $//'
}

# Checks one run: exit status 0, the expected digest, SIZE ranks that joined via LAUNCHER from HOSTS.
check_run() {
  local name=$1 file=$2 rc=$3 digest=$4 launcher=$5 hosts=$6 size=${7:-4} got joined before=$FAILURES
  if [ "$rc" != 0 ]; then
    fail "$name exited with status $rc; its output ends:"; tail -n 15 "$file" >&2; return
  fi
  got=$(digest_of "$file")
  [ "$got" = "$digest" ] || fail "$name printed params-sha256 '${got:-none}', expected $digest"
  joined=$(grep -c "joined a world of $size via $launcher at" "$file")
  [ "$joined" = "$size" ] || fail "$name: $joined ranks said they joined a world of $size via $launcher, expected $size"
  got=$(joined_hosts "$file" "$size" "$launcher")
  [ "$got" = "$hosts" ] || fail "$name: the ranks joined from hosts '$got', expected '$hosts'"
  [ "$FAILURES" != "$before" ] || cl_log "$name: params-sha256 $digest, $size ranks from $hosts"
}

# Seconds since the epoch, with milliseconds.
now() { date +%s.%N | cut -c1-14; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
