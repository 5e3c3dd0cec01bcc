#!/usr/bin/env bash
# Build rara-executor-go once per state of its sources; print the binary's path.
#
#   executor/go/build.sh        -> ~/.cache/rara/go-executor/<hash>/rara-executor-go
#
# The hash covers the Go version, this script and every non-test source of this module and the
# generated contract (api/gen/go), so an unchanged tree reuses the binary (tests, the field
# smoke and the benchmark all start it) and any change builds a fresh one. Builds unused for
# a week are pruned.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/rara/go-executor"
hash="$(
    cd "$root"
    { go version
      find executor/go api/gen/go -type f \( -name '*.go' -o -name go.mod -o -name go.sum -o -name build.sh \) \
          ! -name '*_test.go' -print0 | sort -z | xargs -0 sha256sum
    } | sha256sum | cut -c1-16
)"
bin="$cache/$hash/rara-executor-go"
if [[ ! -x "$bin" ]]; then
    echo "building rara-executor-go ($hash) into $cache" >&2
    mkdir -p "$cache/$hash"
    (cd "$here" && CGO_ENABLED=0 go build -trimpath -buildvcs=false -o "$bin.tmp.$$" ./cmd/rara-executor-go) >&2
    mv "$bin.tmp.$$" "$bin"
fi
touch "$cache/$hash"
find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name "$hash" -mtime +7 -exec rm -rf {} + \
    2>/dev/null || true
echo "$bin"
