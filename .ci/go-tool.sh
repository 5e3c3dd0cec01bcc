#!/usr/bin/env bash
# Build a pinned Go tool from its module into the user's tool cache, once. Every Go tool the
# project runs but does not write (helm, the S3 server, buf, the protoc plugins) comes from
# here: the pins and the build/cache rule live in this file only.
#
# Why from source: CI and dev machines reach the Go module proxy but not release downloads
# (get.helm.sh, GitHub releases). `go install` verifies checksums against sum.golang.org.
# Why a per-user cache, not the work tree: every clone (CI clones afresh) reuses one build.
# The version is in the file name (~/.cache/rara/bin/<tool>-<version>): a bumped pin builds
# a new binary, and an older clone keeps using its own.
#
# Usage:  .ci/go-tool.sh TOOL          build TOOL if missing; print the path of its binary
#         .ci/go-tool.sh TOOL check    exit 0 iff TOOL of the pinned version is present
# TOOL is one of the names in the table below. A cached tool returns at once; a cold build
# takes from ~20 s (a protoc plugin) to ~2.5 min (helm, versitygw) on 2 cores.
#
# Where a Go build needs more than `go install` (a wrapper module for k8s.io/kubernetes'
# staging replaces, build tags), it has its own script: .ci/k8s-binaries.sh and
# .ci/cluster/build-binaries.sh.
set -euo pipefail

usage() {
  echo "usage: $0 helm|versitygw|buf|protoc-gen-go|protoc-gen-go-grpc [build|check]" >&2
  exit 2
}

# The table: TOOL -> module path of its main package, version (an environment variable
# overrides it), extra -ldflags.
ldflags=""
case "${1:-}" in
  helm)
    # The chart's linter and renderer (tests/test_chart.py, the kind cluster's install).
    package=helm.sh/helm/v3/cmd/helm version="${RARA_HELM_VERSION:-v3.22.0}"
    # So that `helm version` names the pin.
    ldflags="-X helm.sh/helm/v3/internal/version.version=${version}" ;;
  versitygw)
    # The S3 server the artifact-store tests and the kind cluster run (posix backend).
    # Apache-2.0, one static binary, a plain directory as its backend, and it implements what
    # the S3 store relies on: If-None-Match on PutObject and on CompleteMultipartUpload,
    # evaluated under a per-object lock; x-amz-checksum-sha256.
    package=github.com/versity/versitygw/cmd/versitygw
    version="${RARA_VERSITYGW_VERSION:-v1.8.0}" ;;
  buf)
    # Lints the rara.v1 contract and checks it for breaking changes (api/buf.sh).
    package=github.com/bufbuild/buf/cmd/buf version="${RARA_BUF_VERSION:-v1.75.0}" ;;
  protoc-gen-go)
    # The Go code of the rara.v1 contract (api/gen.sh).
    package=google.golang.org/protobuf/cmd/protoc-gen-go
    version="${RARA_PROTOC_GEN_GO_VERSION:-v1.36.11}" ;;
  protoc-gen-go-grpc)
    package=google.golang.org/grpc/cmd/protoc-gen-go-grpc
    version="${RARA_PROTOC_GEN_GO_GRPC_VERSION:-v1.6.2}" ;;
  *) usage ;;
esac
tool="$1"

BIN="${RARA_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rara/bin}"
binary="${BIN}/${tool}-${version}"

case "${2:-build}" in
  check) [[ -x "${binary}" ]]; exit $? ;;
  build) ;;
  *) usage ;;
esac

if [[ -x "${binary}" ]]; then
  echo "${binary}"
  exit 0
fi
command -v go >/dev/null || { echo "[go-tool] go is not on PATH (needed for ${tool})" >&2; exit 1; }

mkdir -p "${BIN}"
# Callers that start together (pytest-xdist workers, make -j) wait for one build.
exec 9>"${BIN}/.${tool}.lock"
flock 9
if [[ ! -x "${binary}" ]]; then
  # Built beside the cache, then renamed: a caller that checks never sees half a binary.
  tmp="$(mktemp -d "${BIN}/.build.XXXXXX")"
  trap 'rm -rf "${tmp}"' EXIT
  start=$(date +%s)
  echo "[go-tool] building ${tool} ${version} into ${BIN} (once)" >&2
  # CGO off: a static binary; local toolchain only (no toolchain download from the network).
  CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-buildvcs=false -trimpath" GOBIN="${tmp}" \
    go install -ldflags "-s -w ${ldflags}" "${package}@${version}" >&2
  mv "${tmp}/${package##*/}" "${binary}"
  echo "[go-tool] built ${tool} ${version} in $(( $(date +%s) - start ))s" >&2
fi
echo "${binary}"
