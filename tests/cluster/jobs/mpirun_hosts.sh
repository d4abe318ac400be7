#!/bin/bash
# Open MPI across hosts (the Horovod shape): mpirun starts every rank; cohort::init() reads
# OMPI_COMM_WORLD_*, and MASTER_ADDR (rank 0's host, which MPI does not tell) comes with -x.
# HOSTS is mpirun's host list, first host first: "node1:2,node2:2".
TRAIN=${TRAIN:-$HOME/cohort/build/examples/fashion_mnist}
HOSTS=${HOSTS:?set HOSTS, e.g. node1:2,node2:2}
MASTER_ADDR=${HOSTS%%:*}
RANKS=0
for slots in $(echo "$HOSTS" | tr ',' '\n' | cut -d: -f2); do RANKS=$((RANKS + slots)); done

# Open MPI passes no variable to another host unless -x names it.
mpirun --bind-to none -np "$RANKS" -H "$HOSTS" -x MASTER_ADDR="$MASTER_ADDR" -x MASTER_PORT=29500 \
  -x OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" -x COHORT_TIMEOUT="${COHORT_TIMEOUT:-300}" \
  -x COHORT_LOG_LEVEL="${COHORT_LOG_LEVEL:-warn}" "$TRAIN" "$@"
