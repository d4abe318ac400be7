# Slurm and Open MPI across the harness's hosts (sourced by run.sh after lib.sh). One munged on a
# private socket serves every namespace (the socket is a path, not an address); slurmctld runs on
# head, one slurmd per node (slurmd -D -N nK inside that host's namespaces); jobs are submitted from
# head, the login node. SLURM_CONF points every daemon and client at this run's slurm.conf.

cl_slurm_conf() {
  local nodes="" host
  for host in "${CL_HOSTS[@]:1}"; do nodes+="NodeName=$host NodeAddr=$(cl_addr "$host") CPUs=$(nproc) State=UNKNOWN"$'\n'; done
  cat <<EOF
ClusterName=cohortci
SlurmctldHost=head($(cl_addr head))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$CL_DIR/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$CL_DIR/slurm/ctld
SlurmdSpoolDir=$CL_DIR/slurm/d-%n
SlurmctldPidFile=$CL_DIR/slurm/ctld.pid
SlurmdPidFile=$CL_DIR/slurm/d-%n.pid
SlurmctldLogFile=$CL_DIR/slurm/ctld.log
SlurmdLogFile=$CL_DIR/slurm/d-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=30
KillWait=5
$nodes
PartitionName=cluster Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
EOF
}

# munged, slurmctld on head, slurmd on every node; returns when every node is idle.
slurm_up() {
  export SLURM_CONF="$CL_DIR/slurm/slurm.conf"
  mkdir -p "$CL_DIR/munge" "$CL_DIR/slurm/ctld"
  chmod 700 "$CL_DIR/munge"
  head -c 1024 /dev/urandom >"$CL_DIR/munge/munge.key"
  chmod 400 "$CL_DIR/munge/munge.key"
  munged -F --force --socket="$CL_DIR/munge/munge.socket" --key-file="$CL_DIR/munge/munge.key" \
    --pid-file="$CL_DIR/munge/munged.pid" --seed-file="$CL_DIR/munge/munged.seed" \
    --log-file="$CL_DIR/munge/munged.log" >"$CL_DIR/munge/stdout.log" 2>&1 &
  CL_ROOT_PIDS+=($!)
  cl_slurm_conf >"$SLURM_CONF"
  on_host_bg head "$CL_DIR/slurm/ctld.out" slurmctld -D -i
  local host i
  for host in "${CL_HOSTS[@]:1}"; do
    on_host_bg "$host" "$CL_DIR/slurm/d-$host.out" slurmd -D -N "$host"
    echo $! >"$CL_DIR/$host.slurmd"
  done
  for i in $(seq 300); do
    [ "$(on_host head sinfo -h -o '%T %D' 2>/dev/null)" = "idle $((${#CL_HOSTS[@]} - 1))" ] && return 0
    sleep 0.2
  done
  cl_log "Slurm did not become idle in 60 s: $(on_host head sinfo -h -N -o '%N %T' 2>&1 | tr '\n' ' ')"
  tail -n 5 "$CL_DIR"/slurm/*.log "$CL_DIR"/slurm/*.out "$CL_DIR/munge/munged.log" >&2
  return 1
}
