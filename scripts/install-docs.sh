#!/usr/bin/env bash
# Installs what the documentation site needs into a virtual environment outside the source tree,
# reused by later runs: ${COHORT_CACHE:-~/.cache/cohort}/mkdocs, with mkdocs-material (the site:
# `mkdocs build --strict`, tests/style/docs_site_test.sh) and matplotlib (bench/plots.py, the figures of
# docs/BENCHMARKS.md). Idempotent: when both import, it prints one line and does nothing else.
set -euo pipefail
cache="${COHORT_CACHE:-$HOME/.cache/cohort}"
venv="$cache/mkdocs"
python="${COHORT_VENV_PYTHON:-python3}"
# The versions the site was checked with; mkdocs 1.6's `validation` settings (anchors) are needed.
packages=(mkdocs==1.6.1 mkdocs-material==9.8.2 matplotlib)
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import mkdocs, material, matplotlib" >/dev/null 2>&1; then
  echo "install-docs: mkdocs-material and matplotlib present in $venv"
  exit 0
fi
echo "install-docs: installing ${packages[*]} into $venv" >&2
mkdir -p "$cache"
if ! "$python" -m venv "$venv" >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-venv >&2
  /usr/bin/python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q --disable-pip-version-check "${packages[@]}" >&2
"$venv/bin/mkdocs" --version
