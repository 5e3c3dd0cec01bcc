#!/usr/bin/env bash
# Build the S3 server the artifact-store tests run against (versitygw, posix backend) from its
# Go module into the user's tool cache, once — like charts/tools.sh does for helm.
#
# Why versitygw: Apache-2.0, one static binary, a plain directory as its backend, and it
# implements what the S3 store relies on (If-None-Match on PutObject and on
# CompleteMultipartUpload, evaluated under a per-object lock; x-amz-checksum-sha256).
# Why from source: CI reaches the Go module proxy, not release downloads; `go install`
# checks sums against sum.golang.org and the binary is cached by version.
#
# Usage:  .ci/s3-server.sh          build what is missing; prints the path of the binary
#         .ci/s3-server.sh check    exit 0 iff the pinned version is present
# A cold build takes about 2.5 minutes on 2 cores (module downloads included); cached: instant.
set -euo pipefail

VERSION="${RARA_VERSITYGW_VERSION:-v1.8.0}"
BIN="${RARA_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rara/bin}"
# The version in the file name: a bumped pin rebuilds instead of reusing an old binary.
SERVER="${BIN}/versitygw-${VERSION}"

case "${1:-build}" in
  check) [[ -x "${SERVER}" ]]; exit $? ;;
  build) ;;
  *) echo "usage: $0 [build|check]" >&2; exit 2 ;;
esac

if [[ -x "${SERVER}" ]]; then
  echo "${SERVER}"
  exit 0
fi
command -v go >/dev/null || { echo "[s3-server] go is not on PATH" >&2; exit 1; }

mkdir -p "${BIN}"
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
start=$(date +%s)
# CGO off: a static binary; local toolchain only (no toolchain download from the network).
CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-buildvcs=false -trimpath" GOBIN="${tmp}" \
  go install -ldflags "-s -w" "github.com/versity/versitygw/cmd/versitygw@${VERSION}"
mv "${tmp}/versitygw" "${SERVER}"
echo "[s3-server] built versitygw ${VERSION} in $(( $(date +%s) - start ))s" >&2
echo "${SERVER}"
