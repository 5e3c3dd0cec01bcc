#!/usr/bin/env bash
# Build Temporal's server once per pinned version, from the Go module proxy; print the folder.
#
#   bench/peers/temporal/build.sh        -> ~/.cache/rara/temporal-<cli version>/
#   bench/peers/temporal/build.sh check  -> exit 0 iff that folder holds the binaries
#
# The folder holds `temporal` (the CLI, whose `server start-dev` is Temporal's single-process
# dev server on SQLite) and, from the server module the CLI pins, `temporal-server` and
# `temporal-sql-tool` (the server on PostgreSQL, and the tool that creates its schema).
# Why the CLI at v1.5.1: v1.9.1, the newest the proxy serves, requires its nested module
# github.com/temporalio/cli/cliext through a `replace` to ./cliext, which `go install @version`
# refuses, and the proxy does not serve cliext itself. A cold build takes 10-20 minutes on 2
# shared cores (the server module and its dependencies); later calls return at once.
set -euo pipefail

cli_version="${RARA_TEMPORAL_CLI_VERSION:-v1.5.1}"
server_version="${RARA_TEMPORAL_SERVER_VERSION:-v1.29.1}"  # what the CLI's go.mod requires
dir="${XDG_CACHE_HOME:-$HOME/.cache}/rara/temporal-${cli_version}"
binaries=(temporal temporal-server temporal-sql-tool)

present() {
    local b
    for b in "${binaries[@]}"; do [[ -x "$dir/$b" ]] || return 1; done
}

if [[ "${1:-build}" == check ]]; then
    present
    exit
fi
if ! present; then
    command -v go >/dev/null || { echo "go is not installed: the Temporal peer needs it to build" >&2; exit 1; }
    echo "building Temporal (CLI ${cli_version}, server ${server_version}) into $dir" >&2
    tmp="$(mktemp -d "${dir}.tmp.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    # Outside any module: `go install pkg@version` resolves the module's own go.mod, verified
    # against sum.golang.org.
    # -X: so that `temporal --version` names the pin (a release build sets it the same way).
    (cd "$tmp" && GOBIN="$tmp" GOFLAGS="-mod=mod -buildvcs=false" go install \
        -ldflags "-X github.com/temporalio/cli/temporalcli.Version=${cli_version#v}" \
        "github.com/temporalio/cli/cmd/temporal@${cli_version}") >&2
    (cd "$tmp" && GOBIN="$tmp" GOFLAGS="-mod=mod -buildvcs=false" go install \
        "go.temporal.io/server/cmd/server@${server_version}" \
        "go.temporal.io/server/cmd/tools/sql@${server_version}") >&2
    mkdir -p "$dir"
    mv "$tmp/temporal" "$dir/temporal"
    mv "$tmp/server" "$dir/temporal-server"
    mv "$tmp/sql" "$dir/temporal-sql-tool"
fi
echo "$dir"
