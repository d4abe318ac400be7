#!/usr/bin/env bash
# Installs PyPI's torch (LibTorch 2.x inside, CUDA build) into a virtual environment outside the source
# tree, reused by later runs: ${COHORT_CACHE:-~/.cache/cohort}/torch-<version>. Prints the torch package
# directory (what CMAKE_PREFIX_PATH needs) on its last line. COHORT_TORCH_VERSION picks the version.
set -euo pipefail
version="${COHORT_TORCH_VERSION:-2.11.0}"
cache="${COHORT_CACHE:-$HOME/.cache/cohort}"
venv="$cache/torch-$version"
python="${COHORT_VENV_PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import torch" >/dev/null 2>&1; then
  echo "install-torch: installing torch==$version into $venv (a CUDA build: several GB, once)" >&2
  mkdir -p "$cache"
  if ! "$python" -m venv "$venv" >/dev/null 2>&1; then
    apt_python=/usr/bin/python3
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-venv >&2
    "$apt_python" -m venv "$venv"
  fi
  # numpy: torch's Python warns without it, and the parity scripts use it through torch.
  "$venv/bin/pip" install -q --disable-pip-version-check "torch==$version" numpy >&2
fi
have="$("$venv/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
case "$have" in
  "$version"*) ;;
  *) echo "install-torch: $venv holds torch $have, not $version; remove it to reinstall" >&2; exit 1 ;;
esac
"$venv/bin/python" -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null
