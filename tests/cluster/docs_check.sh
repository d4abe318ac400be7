#!/usr/bin/env bash
# docs/cluster.md shows the job scripts tests/cluster runs, each verbatim in one ``` block: a script
# changed in one place and not in the other fails here, naming it. run: docs_check.sh SOURCE_DIR
set -euo pipefail
root=${1:?usage: docs_check.sh SOURCE_DIR}
status=0
for job in "$root"/tests/cluster/jobs/*; do
  if ! python3 - "$job" "$root/docs/cluster.md" <<'EOF_PY'
import sys
job, doc = (open(path).read() for path in sys.argv[1:3])
sys.exit(0 if "```bash\n" + job + "```\n" in doc else 1)
EOF_PY
  then
    echo "docs/cluster.md does not show tests/cluster/jobs/$(basename "$job") as it is: copy the file into its block" >&2
    status=1
  fi
done
exit "$status"
