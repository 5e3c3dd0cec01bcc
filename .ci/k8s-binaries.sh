#!/usr/bin/env bash
# Build the Kubernetes control-plane binaries the operator tests run against
# (etcd + kube-apiserver) from pinned upstream Go modules, via the Go module proxy.
#
# No docker, no release tarballs: only `go` and the module proxy (checksums verified
# against sum.golang.org as usual).
#
# Usage:
#   .ci/k8s-binaries.sh           build what is missing (idempotent; prints the time taken)
#   .ci/k8s-binaries.sh env       print KUBE_APISERVER=… / ETCD=… / versions (builds nothing)
#   .ci/k8s-binaries.sh check     exit 0 iff both binaries are present
#
# Environment:
#   RARA_K8S_CACHE        cache root (default: $HOME/.cache/rara/k8s)
#   RARA_KUBE_VERSION     k8s.io/kubernetes version (default below)
#   RARA_ETCD_VERSION     go.etcd.io/etcd/server/v3 version (default below)
#   RARA_K8S_BUILD_JOBS   go build -p (default: number of CPUs, at most 4)
#
# Layout:  $RARA_K8S_CACHE/kubernetes-<version>/bin/kube-apiserver
#          $RARA_K8S_CACHE/etcd-<version>/bin/etcd
#
# k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces every k8s.io/<staging>
# module with ./staging/src/k8s.io/<staging>. We build it from a throwaway wrapper module
# that requires k8s.io/kubernetes@vX.Y.Z and replaces each staging module with its
# published twin k8s.io/<staging>@v0.Y.Z. etcd's server module has the same shape
# (replace go.etcd.io/etcd/api/v3 => ../api …), handled the same way.
set -euo pipefail

KUBE_VERSION="${RARA_KUBE_VERSION:-v1.37.2}"
ETCD_VERSION="${RARA_ETCD_VERSION:-v3.7.3}"
CACHE="${RARA_K8S_CACHE:-${HOME}/.cache/rara/k8s}"
KUBE_BIN_DIR="${CACHE}/kubernetes-${KUBE_VERSION}/bin"
ETCD_BIN_DIR="${CACHE}/etcd-${ETCD_VERSION}/bin"
KUBE_APISERVER="${KUBE_BIN_DIR}/kube-apiserver"
ETCD="${ETCD_BIN_DIR}/etcd"

ncpu="$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"
JOBS="${RARA_K8S_BUILD_JOBS:-$(( ncpu < 4 ? ncpu : 4 ))}"

print_env() {
  printf 'KUBE_VERSION=%s\nETCD_VERSION=%s\nKUBE_APISERVER=%s\nETCD=%s\n' \
    "${KUBE_VERSION}" "${ETCD_VERSION}" "${KUBE_APISERVER}" "${ETCD}"
}

case "${1:-build}" in
  env) print_env; exit 0 ;;
  check) [[ -x "${KUBE_APISERVER}" && -x "${ETCD}" ]]; exit $? ;;
  build) ;;
  *) echo "usage: $0 [build|env|check]" >&2; exit 2 ;;
esac

log() { printf '[k8s-binaries] %s\n' "$*" >&2; }

command -v go >/dev/null || { log "go is not on PATH"; exit 1; }

# Static, reproducible binaries; the `go` lines of etcd v3.7 / kubernetes v1.37 need Go >= 1.26.
export CGO_ENABLED=0 GOFLAGS="-buildvcs=false"
# An older local Go (e.g. a distribution package) fetches this toolchain from the module proxy.
MIN_GO="1.26"
go_version="$(GOTOOLCHAIN=local go env GOVERSION)"; go_version="${go_version#go}"
if [[ "$(printf '%s\n%s\n' "${MIN_GO}" "${go_version}" | sort -V | head -n1)" == "${MIN_GO}" ]]; then
  export GOTOOLCHAIN=local
else
  export GOTOOLCHAIN="${RARA_GO_TOOLCHAIN:-go1.26.8}"
  log "local go ${go_version} < ${MIN_GO}: using ${GOTOOLCHAIN} from the module proxy"
fi
# Keep the go compiler's own parallelism in line with -p on small machines.
export GOMAXPROCS="${GOMAXPROCS:-${JOBS}}"

mkdir -p "${CACHE}"
exec 9>"${CACHE}/.build.lock"
flock 9   # concurrent callers (parallel CI jobs, xdist) wait for one build

# mod_field MODULE@VERSION FIELD -> value of a string field of `go mod download -json`
mod_field() {
  go mod download -json "$1" | sed -n "s/^[[:space:]]*\"$2\": \"\\(.*\\)\",\{0,1\}$/\\1/p" | head -n1
}

# write_wrapper DIR MODULE VERSION STAGING_VERSION
# Creates a go.mod in DIR requiring MODULE@VERSION and, for every local-path replace in
# MODULE's own go.mod whose target module MODULE also requires, a replace by the
# published module at STAGING_VERSION.
write_wrapper() {
  local dir="$1" mod="$2" ver="$3" staging_ver="$4" gomod
  gomod="$(mod_field "${mod}@${ver}" GoMod)"
  [[ -f "${gomod}" ]] || { log "could not fetch go.mod of ${mod}@${ver}"; exit 1; }
  (
    cd "${dir}"
    go mod init rara.local/k8s-binaries >/dev/null 2>&1
    go mod edit -require="${mod}@${ver}"
    local replaced=0 m
    # local-path replaces:  "<module> => ./path"  or  "<module> => ../path"
    while read -r m; do
      # only modules the upstream module actually requires (e.g. k8s.io/sample-controller
      # is replaced upstream but neither required nor published for every release)
      if grep -Eq "^[[:space:]]*(require[[:space:]]+)?${m//./\\.}[[:space:]]+v" "${gomod}"; then
        go mod edit -replace="${m}=${m}@${staging_ver}"
        replaced=$((replaced + 1))
      fi
    done < <(sed -n -E 's#^[[:space:]]*(replace[[:space:]]+)?([^[:space:]]+)[[:space:]]+=>[[:space:]]+\.\.?/.*#\2#p' "${gomod}")
    log "${mod}@${ver}: ${replaced} local replaces mapped to published @${staging_ver}"
  )
}

build_kube_apiserver() {
  local tmp minor_patch ldflags commit date
  tmp="${WORK}/kubernetes"; mkdir -p "${tmp}"
  minor_patch="${KUBE_VERSION#v1.}"                 # 37.2
  write_wrapper "${tmp}" k8s.io/kubernetes "${KUBE_VERSION}" "v0.${minor_patch}"
  commit="$(go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" \
            | sed -n 's/^[[:space:]]*"Hash": "\([0-9a-f]*\)".*/\1/p' | head -n1)"
  date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  ldflags="-s -w"
  local pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X ${pkg}.gitVersion=${KUBE_VERSION} -X ${pkg}.gitMajor=1"
    ldflags+=" -X ${pkg}.gitMinor=${minor_patch%%.*} -X ${pkg}.gitTreeState=clean"
    ldflags+=" -X ${pkg}.buildDate=${date}"
    if [[ -n "${commit}" ]]; then ldflags+=" -X ${pkg}.gitCommit=${commit}"; fi
  done
  (
    cd "${tmp}"
    go get "k8s.io/kubernetes/cmd/kube-apiserver@${KUBE_VERSION}"
    go build -p "${JOBS}" -trimpath -ldflags="${ldflags}" -o "${tmp}/kube-apiserver" \
      k8s.io/kubernetes/cmd/kube-apiserver
  )
  mkdir -p "${KUBE_BIN_DIR}"
  mv -f "${tmp}/kube-apiserver" "${KUBE_APISERVER}"
}

build_etcd() {
  local tmp commit
  tmp="${WORK}/etcd"; mkdir -p "${tmp}"
  write_wrapper "${tmp}" go.etcd.io/etcd/server/v3 "${ETCD_VERSION}" "${ETCD_VERSION}"
  commit="$(go mod download -json "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" \
            | sed -n 's/^[[:space:]]*"Hash": "\([0-9a-f]*\)".*/\1/p' | head -n1)"
  local ldflags="-s -w"
  if [[ -n "${commit}" ]]; then
    ldflags+=" -X go.etcd.io/etcd/api/v3/version.GitSHA=${commit:0:7}"
  fi
  (
    cd "${tmp}"
    go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}"
    go build -p "${JOBS}" -trimpath -ldflags="${ldflags}" -o "${tmp}/etcd" go.etcd.io/etcd/server/v3
  )
  mkdir -p "${ETCD_BIN_DIR}"
  mv -f "${tmp}/etcd" "${ETCD}"
}

WORK="$(mktemp -d "${TMPDIR:-/tmp}/rara-k8s-build.XXXXXX")"
trap 'rm -rf "${WORK}"' EXIT
start=$SECONDS
if [[ -x "${ETCD}" ]]; then
  log "etcd ${ETCD_VERSION}: present, skipping (${ETCD})"
else
  t=$SECONDS; log "building etcd ${ETCD_VERSION} (-p ${JOBS}) …"
  build_etcd
  log "etcd ${ETCD_VERSION}: built in $((SECONDS - t))s"
fi
if [[ -x "${KUBE_APISERVER}" ]]; then
  log "kube-apiserver ${KUBE_VERSION}: present, skipping (${KUBE_APISERVER})"
else
  t=$SECONDS; log "building kube-apiserver ${KUBE_VERSION} (-p ${JOBS}) …"
  build_kube_apiserver
  log "kube-apiserver ${KUBE_VERSION}: built in $((SECONDS - t))s"
fi
"${ETCD}" --version 2>&1 | sed -n 1p >&2   # (not head: SIGPIPE + pipefail would fail)
"${KUBE_APISERVER}" --version >&2
log "done in $((SECONDS - start))s"
print_env
