# shellcheck shell=bash
# Helpers shared by .ci/cluster/*.sh (sourced).
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${HERE}/../.." && pwd)"
# shellcheck source=versions.sh
source "${HERE}/versions.sh"

_tag="$(basename "${0%.sh}")"
log() { printf '[cluster/%s] %s\n' "${_tag}" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# timed LABEL CMD...: runs CMD and logs how long it took (slow parts say so).
timed() {
  local label="$1" t=$SECONDS; shift
  "$@"
  log "${label}: $((SECONDS - t))s"
}

# Go: local toolchain (>= 1.26 for Kubernetes v1.37), static binaries, no VCS stamping.
go_env() {
  command -v go >/dev/null || die "go is not on PATH"
  local ncpu; ncpu="$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"
  export GOTOOLCHAIN="${GOTOOLCHAIN:-local}" GOFLAGS="-buildvcs=false"
  export GO_JOBS="${RARA_K8S_BUILD_JOBS:-$(( ncpu < 4 ? ncpu : 4 ))}"
  export GOMAXPROCS="${GOMAXPROCS:-${GO_JOBS}}"
}

# A docker client pointed at the project's engine only (DOCKER_HOST from versions.sh).
dk() { docker "$@"; }
