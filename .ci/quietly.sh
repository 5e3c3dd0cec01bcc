#!/usr/bin/env bash
# Run a slow, cached build step with one line of news instead of pages of `go: downloading`:
# what is being built and how long the first time takes, the full output kept in a log, its
# tail shown (and the exit status kept) when it fails, the time taken when it succeeds.
#
# Usage:  .ci/quietly.sh NAME "what, and how long the first time takes" COMMAND [ARGS...]
# The log is .rara/logs/NAME.log (the project's state folder, ignored by git).
set -uo pipefail
name="$1" news="$2"
shift 2
log_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.rara/logs"
mkdir -p "$log_dir"
log="$log_dir/$name.log"
echo "$news (log: .rara/logs/$name.log)"
start=$(date +%s)
if "$@" >"$log" 2>&1; then
  echo "  done in $(( $(date +%s) - start )) s"
else
  status=$?
  tail -n 25 "$log" | sed 's/^/  | /'
  echo "  failed after $(( $(date +%s) - start )) s (exit $status); the whole output: $log"
  exit "$status"
fi
