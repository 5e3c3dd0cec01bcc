#!/usr/bin/env bash
# Build the chart tooling (helm) from its Go module into the user's tool cache, once.
#
# Why from source: CI and dev machines reach the Go module proxy but not release downloads
# (get.helm.sh). `go install` verifies checksums against sum.golang.org and is cached by
# version, so a second run returns at once.
#
# Usage:  charts/tools.sh          build what is missing; prints the path of helm
#         charts/tools.sh check    exit 0 iff helm of the pinned version is present
set -euo pipefail

HELM_VERSION="${RARA_HELM_VERSION:-v3.22.0}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# A per-user cache, not the work tree: every clone (CI clones afresh) reuses one build.
BIN="${RARA_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rara/bin}"
# The version in the file name: a bumped pin rebuilds instead of reusing an old binary.
HELM="${BIN}/helm-${HELM_VERSION}"

case "${1:-build}" in
  check) [[ -x "${HELM}" ]]; exit $? ;;
  build) ;;
  *) echo "usage: $0 [build|check]" >&2; exit 2 ;;
esac

if [[ -x "${HELM}" ]]; then
  echo "${HELM}"
  exit 0
fi
command -v go >/dev/null || { echo "[tools] go is not on PATH" >&2; exit 1; }

mkdir -p "${BIN}"
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
start=$(date +%s)
# CGO off: a static binary; local toolchain only (no toolchain download from the network).
CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-buildvcs=false -trimpath" GOBIN="${tmp}" \
  go install -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}" \
  "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
mv "${tmp}/helm" "${HELM}"
ln -sf "helm-${HELM_VERSION}" "${BIN}/helm"  # a stable name for humans; tests use the pinned one
echo "[tools] built helm ${HELM_VERSION} in $(( $(date +%s) - start ))s" >&2
echo "${HELM}"
