#!/bin/bash
# Open MPI's launch agent for the harness's hosts, in place of ssh (OMPI_MCA_plm_rsh_agent): mpirun
# calls `ns_agent.sh HOST COMMAND...` to start its daemon on HOST; this runs COMMAND through sh, as
# sshd would, inside HOST's namespaces (its address, hostname and hosts file).
dir=${COHORT_CLUSTER_DIR:?ns_agent.sh runs under tests/cluster/run.sh}
host=$1
shift
[ -f "$dir/$host.holder" ] || { echo "ns_agent.sh: no host $host in this cluster" >&2; exit 255; }
echo "$host" >>"$dir/agent.log"
# A host's CPU list (bench/hosts/launch.sh, HOST_CPUS=split): the daemon and its ranks stay on them.
pin=()
[ -f "$dir/$host.cpus" ] && pin=(taskset -c "$(cat "$dir/$host.cpus")")
exec nsenter -t "$(cat "$dir/$host.holder")" --net --mount --uts --wd=/ -- "${pin[@]}" /bin/sh -c "$*"
