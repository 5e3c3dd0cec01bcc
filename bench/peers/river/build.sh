#!/usr/bin/env bash
# Build the River peer's driver once per state of its sources; print the binary's path.
#
#   bench/peers/river/build.sh   -> ~/.cache/rara/bench-river/<hash>/river-bench
#
# The hash covers the Go version, this script, main.go, go.mod and go.sum (River's pinned
# versions), so an unchanged driver reuses the binary and a bumped pin builds a fresh one.
# Modules come from the Go module proxy, checked against go.sum; local toolchain only. Builds
# unused for a week are pruned. A cold build (module downloads included) takes about a minute
# on 2 cores.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
command -v go >/dev/null || { echo "go is not installed: the River peer needs it to build" >&2; exit 1; }
cache="${XDG_CACHE_HOME:-$HOME/.cache}/rara/bench-river"
hash="$(
    cd "$here"
    { GOTOOLCHAIN=local go version; sha256sum build.sh main.go go.mod go.sum; } | sha256sum | cut -c1-16
)"
bin="$cache/$hash/river-bench"
if [[ ! -x "$bin" ]]; then
    echo "building the River peer ($hash) into $cache" >&2
    mkdir -p "$cache/$hash"
    (cd "$here" && CGO_ENABLED=0 GOTOOLCHAIN=local go build -trimpath -buildvcs=false \
        -o "$bin.tmp.$$" .) >&2
    mv "$bin.tmp.$$" "$bin"
fi
touch "$cache/$hash"
find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name "$hash" -mtime +7 -exec rm -rf {} + \
    2>/dev/null || true
echo "$bin"
