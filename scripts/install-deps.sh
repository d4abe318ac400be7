#!/usr/bin/env bash
# Installs every Debian package cohort needs to build, test and run its demo. Idempotent: only what is
# missing is installed. Needs root (or sudo) the first time.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libtorch-dev libgloo-dev libopenblas0-pthread   # LibTorch 1.13 (CPU, Gloo) on a fast BLAS
  python3-torch                                   # PyTorch for parity tests and the benchmark anchor
  nlohmann-json3-dev libcli11-dev zlib1g-dev libssl-dev
  liburing-dev fio                                # NVMe offload's io_uring; fio measures the disk
  libgtest-dev libgmock-dev libbenchmark-dev
  openmpi-bin libopenmpi-dev                      # mpirun launches tests on 2 ranks
  dataset-fashion-mnist                           # the demo's data
  fortunes                                        # examples/gpt's text (/usr/share/games/fortunes)
  iproute2 procps                                 # network namespaces and process checks in tests
  slurmd slurmctld slurm-client munge             # tests/cluster: Slurm across namespace hosts
  iptables                                        # tests/cluster: a partitioned host (DROP)
  clang-format-14                                 # tests/style/format_check.sh (.clang-format)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
