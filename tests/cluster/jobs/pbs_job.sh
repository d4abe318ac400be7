#!/bin/bash
# PBS (the shape of Palmetto's pbsdsh script): pbsdsh starts cohortrun_node.sh once on each node of
# the job (one chunk per node, mpiprocs=1); the first node of $PBS_NODEFILE hosts the rendezvous.
# On Torque, `pbsdsh -u` starts one task per distinct node.
#PBS -N fashion_mnist
#PBS -l select=2:ncpus=2:mpiprocs=1
#PBS -l walltime=00:30:00
cd "$PBS_O_WORKDIR"
NNODES=$(sort -u "$PBS_NODEFILE" | wc -l)
MASTER_ADDR=$(head -n 1 "$PBS_NODEFILE")

pbsdsh -- /usr/bin/env NNODES="$NNODES" MASTER_ADDR="$MASTER_ADDR" RDZV_ID="$PBS_JOBID" \
  COHORTRUN="${COHORTRUN:-$HOME/cohort/build/tools/cohortrun}" TRAIN="${TRAIN:-$HOME/cohort/build/examples/fashion_mnist}" \
  "$PBS_O_WORKDIR/cohortrun_node.sh" --epochs 2
