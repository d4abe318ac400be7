# tests/cluster's harness, sourced by run.sh: hosts as network namespaces on a bridge of their own,
# each with its own address, hostname and /etc/hosts; optionally Slurm (munged, slurmctld, a slurmd per
# host) and an Open MPI launch agent that enters a host instead of ssh. Everything it starts is either
# in its namespaces or recorded by pid, so cluster_down ends exactly that, and cluster_check_clean
# proves nothing of it is left. Needs root, iproute2, util-linux (unshare, nsenter).

CL_PREFIX="cc$$"                  # namespaces ${CL_PREFIX}<host>; interface names stay under 15 chars
CL_DIR=""                         # this run's files (hosts, logs, Slurm's state); made by cluster_up
CL_HOSTS=()                       # host names, login/controller host first: head n1 n2 ...
CL_ROOT_PIDS=()                   # processes started in the machine's own namespace (munged)
CL_SUBNET="10.77.0"               # only inside the namespaces: the bridge has no uplink, no route out

cl_log() { echo "[cluster] $*" >&2; }

# The address of a host: head is .100, nK is .K.
cl_addr() { if [ "$1" = head ]; then echo "$CL_SUBNET.100"; else echo "$CL_SUBNET.${1#n}"; fi; }

# Runs a command on a host: its network, mount (hosts file) and UTS (hostname) namespaces, this cwd.
on_host() {
  local host=$1; shift
  nsenter -t "$(cat "$CL_DIR/$host.holder")" --net --mount --uts --wd="$PWD" -- "$@"
}

# Starts a command on a host in the background; its pid (the command's own: nsenter execs) goes to $!.
on_host_bg() {
  local host=$1 log=$2; shift 2
  (exec nsenter -t "$(cat "$CL_DIR/$host.holder")" --net --mount --uts --wd="$PWD" -- "$@") >"$log" 2>&1 &
}

# Every process in one of our network namespaces (they are ours by construction), by the namespaces'
# inodes recorded at creation: a process keeps a namespace alive after `ip netns del`, and is found too.
cl_ns_pids() {
  [ -s "$CL_DIR/netns.inodes" ] || return 0
  find /proc/[0-9]*/ns/net -maxdepth 0 -printf '%l %h\n' 2>/dev/null |
    awk -v self="$$" 'NR == FNR { ours[$1] = 1; next }
                      ($1 in ours) { split($2, p, "/"); if (p[3] != self) print p[3] }' "$CL_DIR/netns.inodes" -
}

# Stands up head plus n1..nN: namespaces, veth pairs into the bridge's namespace, addresses, and a
# holder process per host whose mount and UTS namespaces carry the hostname, the hosts file and a
# /dev/shm of its own (ranks on two hosts must not share memory, as on two machines).
cluster_up() {
  local count=$1 host i
  CL_DIR="$(mktemp -d /tmp/cohort-cluster.XXXXXX)"
  CL_HOSTS=(head)
  for ((i = 1; i <= count; i++)); do CL_HOSTS+=("n$i"); done
  printf '127.0.0.1 localhost\n' >"$CL_DIR/hosts"
  for host in "${CL_HOSTS[@]}"; do printf '%s %s\n' "$(cl_addr "$host")" "$host" >>"$CL_DIR/hosts"; done
  ip netns add "${CL_PREFIX}bridge"
  echo "net:[$(stat -L -c %i "/run/netns/${CL_PREFIX}bridge")]" >>"$CL_DIR/netns.inodes"
  ip -n "${CL_PREFIX}bridge" link add br0 type bridge
  ip -n "${CL_PREFIX}bridge" link set br0 up
  for host in "${CL_HOSTS[@]}"; do cl_host_up "$host"; done
  for host in "${CL_HOSTS[@]}"; do
    for i in $(seq 50); do [ "$(on_host "$host" hostname 2>/dev/null)" = "$host" ] && break; sleep 0.1; done
    [ "$(on_host "$host" hostname)" = "$host" ] || { cl_log "host $host did not come up"; return 1; }
  done
}

cl_host_up() {
  local host=$1 ns="$CL_PREFIX$1"
  ip netns add "$ns"
  echo "net:[$(stat -L -c %i "/run/netns/$ns")]" >>"$CL_DIR/netns.inodes"
  ip -n "${CL_PREFIX}bridge" link add "p$host" type veth peer name eth0 netns "$ns"
  ip -n "${CL_PREFIX}bridge" link set "p$host" master br0 up
  ip -n "$ns" addr add "$(cl_addr "$host")/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  # Not `ip netns exec`: it remounts /sys, which hides /sys/fs/cgroup from slurmd.
  nsenter --net="/run/netns/$ns" unshare --mount --uts --propagation private \
    sh -c "mount --bind '$CL_DIR/hosts' /etc/hosts && mount -t tmpfs -o mode=1777,size=1g shm /dev/shm &&
           hostname '$host' && exec sleep infinity" \
    >"$CL_DIR/$host.holder.log" 2>&1 &
  echo $! >"$CL_DIR/$host.holder"
}

# Ends everything this run started: processes in its namespaces, then those it recorded, then the
# namespaces. Safe to call twice and on a half-built cluster.
cluster_down() {
  [ -n "$CL_DIR" ] || return 0
  local pids pid round
  for round in TERM TERM KILL KILL; do
    pids="$(cl_ns_pids) ${CL_ROOT_PIDS[*]}"
    [ -n "${pids// /}" ] || break
    for pid in $pids; do kill -s "$round" "$pid" 2>/dev/null; done
    sleep 1
  done
  for host in bridge "${CL_HOSTS[@]}"; do ip netns del "$CL_PREFIX$host" 2>/dev/null; done
  return 0
}

# Fails naming what is left of this run: a namespace, a process in one, a recorded process.
cluster_check_clean() {
  local left="" pid host
  for host in bridge "${CL_HOSTS[@]}"; do
    [ -e "/run/netns/$CL_PREFIX$host" ] && left+=" namespace $CL_PREFIX$host;"
  done
  for pid in $(cl_ns_pids) "${CL_ROOT_PIDS[@]}"; do
    kill -0 "$pid" 2>/dev/null && left+=" process $pid ($(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null));"
  done
  for pid in $(pgrep -f "$CL_DIR" 2>/dev/null); do
    left+=" process $pid ($(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null));"
  done
  if [ -n "$left" ]; then
    echo "cluster harness left behind:$left" >&2
    return 1
  fi
  cl_log "clean: no namespace or process of this run is left"
}
