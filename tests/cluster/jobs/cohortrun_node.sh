#!/bin/bash
# One node's part of a job started on every node by hand, by pbsdsh (PBS) or by any remote shell:
# cohortrun with the c10d rendezvous at the first node. MASTER_ADDR and NNODES come from the caller;
# run the same line on every node with the same RDZV_ID. COHORTRUN_FLAGS: more of cohortrun's flags.
COHORTRUN=${COHORTRUN:-$HOME/cohort/build/tools/cohortrun}
TRAIN=${TRAIN:-$HOME/cohort/build/examples/fashion_mnist}

# shellcheck disable=SC2086  # COHORTRUN_FLAGS is a list of flags
exec "$COHORTRUN" ${COHORTRUN_FLAGS:-} --nnodes "${NNODES:?}" --nproc-per-node "${WORKERS_PER_NODE:-2}" \
  --rdzv-id "${RDZV_ID:?}" --rdzv-backend c10d --rdzv-endpoint "${MASTER_ADDR:?}:${MASTER_PORT:-29500}" \
  "$TRAIN" "$@"
