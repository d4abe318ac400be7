#!/usr/bin/env bash
# A checkpoint written by cohort built against one LibTorch loads, identical, in cohort built against
# another, and back. Usage: checkpoint_across_versions.sh BUILD_DIR_A BUILD_DIR_B (ctest runs it in a
# build configured with -DCOHORT_PEER_BUILD=<the other build>, as scripts/test.sh does).
set -euo pipefail
a="$1/tests/workers/checkpoint_compat_worker"
b="$2/tests/workers/checkpoint_compat_worker"
for worker in "$a" "$b"; do
  [ -x "$worker" ] || { echo "checkpoint_across_versions: $worker is not built"; exit 1; }
done
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
"$a" save "$scratch/a" && "$b" check "$scratch/a"
"$b" save "$scratch/b" && "$a" check "$scratch/b"
echo "1 passed, 0 failed"
