#!/usr/bin/env bash
# tests/cluster's entry (ctest label `cluster`): run.sh SCENARIO BUILD_DIR [LIMIT_S]. Stands up the
# scenario's hosts (network namespaces, Slurm, Open MPI's agent), runs the scenario in its own process
# group under a deadline, and always tears down what it started and checks nothing is left, also when
# the scenario fails or runs past the deadline. Exit 77 (ctest SKIP_RETURN_CODE) with one line saying
# why when the machine cannot run it: not root, or no network namespaces.
set -uo pipefail
scenario=${1:?usage: run.sh SCENARIO BUILD_DIR [LIMIT_S]}
build=$(cd "${2:?usage: run.sh SCENARIO BUILD_DIR [LIMIT_S]}" && pwd)
limit=${3:-300}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
source "$here/slurm.sh"
source "$here/scenario_lib.sh"
source "$here/$scenario.sh"

if [ "$(id -u)" != 0 ]; then
  echo "skipped: the cluster tests need root (network namespaces, Slurm's daemons)"
  exit 77
fi
if ! probe=$(ip netns add "${CL_PREFIX}probe" 2>&1); then
  echo "skipped: this machine cannot create network namespaces (ip netns add: ${probe//$'\n'/ })"
  exit 77
fi
ip netns del "${CL_PREFIX}probe"
for tool in unshare nsenter munged slurmctld slurmd sbatch srun scontrol mpirun iptables tc; do
  command -v "$tool" >/dev/null || { echo "missing $tool: scripts/install-deps.sh installs it" >&2; exit 1; }
done

finish() {
  local rc=$?
  trap - EXIT TERM INT
  cluster_down
  if ! cluster_check_clean; then rc=1; fi
  if [ -n "$CL_DIR" ] && { [ "$rc" != 0 ] || [ -n "${COHORT_CLUSTER_KEEP:-}" ]; }; then
    cl_log "logs of this run kept in $CL_DIR"
  else
    rm -rf "$CL_DIR"
  fi
  exit "$rc"
}
trap finish EXIT
trap 'cl_log "interrupted"; exit 130' TERM INT

export COHORT_CLUSTER_DIR BUILD="$build"
cluster_up "$(scenario_hosts)" || exit 1
COHORT_CLUSTER_DIR=$CL_DIR
slurm_up || exit 1
cl_log "hosts up: ${CL_HOSTS[*]} (Slurm idle); scenario $scenario, at most $limit s"

# The scenario in its own process group, so a deadline ends all of it (and teardown the rest).
set -m
("scenario_$scenario") &
group=$!
set +m
SECONDS=0
while kill -0 "$group" 2>/dev/null; do
  if [ "$SECONDS" -ge "$limit" ]; then
    cl_log "scenario $scenario ran past $limit s: stopping it"
    kill -TERM -- "-$group" 2>/dev/null; sleep 2; kill -KILL -- "-$group" 2>/dev/null
    wait "$group"
    exit 124
  fi
  sleep 0.5
done
wait "$group"
status=$?
[ "$status" = 0 ] && cl_log "scenario $scenario passed in $SECONDS s" || cl_log "scenario $scenario FAILED"
exit "$status"
