#!/usr/bin/env bash
# The chart's crds/ is a copy of the top-level crds/ (the source): helm reads only files inside
# the chart, and a symlink would give each CRD two paths. `make crds` copies, `make lint` checks.
#
# Usage:  charts/crds.sh           copy crds/*.yaml into charts/rara/crds/
#         charts/crds.sh --check   exit 1, naming the files, when the copy is stale
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ "${1:-}" == "--check" ]]; then
  if ! diff -r crds charts/rara/crds >/dev/null; then
    echo "charts/rara/crds differs from crds/ (run: make crds):" >&2
    diff -rq crds charts/rara/crds >&2 || true
    exit 1
  fi
  exit 0
fi
rm -rf charts/rara/crds
mkdir -p charts/rara/crds
cp crds/*.yaml charts/rara/crds/
