#!/usr/bin/env bash
# The long chaos run (tests/cluster/chaos.sh, docs/cluster.md "Chaos"): an elastic job on 2 namespaced
# hosts x 2 ranks, workers and hosts killed, hosts frozen, links cut and the checkpoint disk filled at
# random moments for at least MINUTES, ending at the params-sha256 of the same job never disturbed.
#   scripts/chaos.sh [MINUTES [SEED]]        defaults: 30 minutes, seed 3904; as root, after scripts/build.sh
# BUILD (default build) picks the build; COHORT_CLUSTER_KEEP=1 keeps the logs. The short variant with
# its fixed seed is the ctest cluster_chaos_test (tests/cluster/run.sh chaos build 330).
set -euo pipefail
cd "$(dirname "$0")/.."
export CHAOS_MINUTES=${1:-30} CHAOS_SEED=${2:-3904}
# Deadline: the calibration, the undisturbed run (0.8 x MINUTES) and the chaos run with its faults.
exec tests/cluster/run.sh chaos "${BUILD:-build}" $((CHAOS_MINUTES * 60 * 4 + 900))
