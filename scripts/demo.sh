#!/usr/bin/env bash
# The demo: installs the Debian packages, builds cohort, then trains the Fashion-MNIST CNN on two local
# ranks under cohortrun. Arguments go to the job: scripts/demo.sh --epochs 1, --max-steps 20, --help.
# See docs/fashion_mnist.md for the other launchers (torchrun, srun, mpirun) and the expected output.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
COHORT_BUILD_TARGETS="cohortrun fashion_mnist" scripts/build.sh
exec build/tools/cohortrun --standalone --nproc-per-node 2 build/examples/fashion_mnist "$@"
