#!/usr/bin/env bash
# The documentation site builds with `mkdocs build --strict` (mkdocs.yml: README.md as the front page,
# docs/ as the pages): no broken link, no missing anchor, no page left out of the build. Built into a
# temporary directory, so the tree is untouched. mkdocs-material comes from scripts/install-docs.sh
# (a virtual environment in ~/.cache/cohort/mkdocs); without it the test fails, naming the script.
# Usage: docs_site_test.sh <source dir>
set -euo pipefail
src=$1
mkdocs="${COHORT_CACHE:-$HOME/.cache/cohort}/mkdocs/bin/mkdocs"
[[ -x $mkdocs ]] || { echo "FAIL: no $mkdocs (scripts/install-docs.sh installs mkdocs-material)"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
site=$work/site
if ! NO_MKDOCS_2_WARNING=1 "$mkdocs" build --strict -f "$src/mkdocs.yml" -d "$site" 2>"$work/log"; then
  cat "$work/log"
  echo "FAIL: mkdocs build --strict found the problems above (mkdocs.yml, docs/, README.md)"
  exit 1
fi
pages=$(find "$site" -name index.html | wc -l)
echo "docs site: $pages pages built with mkdocs build --strict ($("$mkdocs" --version | cut -d' ' -f1-3))"
