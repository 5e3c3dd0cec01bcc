#!/usr/bin/env bash
# Build every binary a kind node needs, from pinned Go modules (the Go module proxy is the
# only source reachable here: no release downloads, no registry). Cached by version under
# ~/.cache/rara/<thing>-<version>/bin; a second run returns at once.
#
#   kubelet kubeadm kubectl kube-proxy kube-scheduler kube-controller-manager (k8s.io/kubernetes)
#   kube-apiserver, etcd          (.ci/k8s-binaries.sh: shared with the operator tests)
#   containerd, containerd-shim-runc-v2, ctr   (github.com/containerd/containerd/v2)
#   crictl (sigs.k8s.io/cri-tools), coredns (github.com/coredns/coredns), kind (sigs.k8s.io/kind)
#   pause: a tiny static C program (the pause image is nothing else)
#   registry (github.com/distribution/distribution/v3): the image registry of registry.sh
#
# runc and the CNI plugins come from Debian's packages inside the node image (node-image.sh).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# Everything cached: say so in one line and stop (the common case: a warm `make cluster`).
all=("${KUBE_BIN}"/{kubelet,kubeadm,kubectl,kube-proxy,kube-scheduler,kube-controller-manager,kube-apiserver}
  "${ETCD_BIN}/etcd" "${CONTAINERD_BIN}"/{containerd,containerd-shim-runc-v2,ctr} "${CRICTL_BIN}/crictl"
  "${COREDNS_BIN}/coredns" "${PAUSE_BIN}/pause" "${KIND}" "${REGISTRY_BIN}/registry")
present=1; for b in "${all[@]}"; do [[ -x "$b" ]] || present=0; done
if [[ "${1:-}" == --check ]]; then ((present)); exit $?; fi
if ((present)); then log "all binaries present (${RARA_CACHE})"; exit 0; fi
go_env
export CGO_ENABLED=0

mkdir -p "${RARA_CACHE}"
exec 9>"${RARA_CACHE}/.cluster-build.lock"
flock 9   # one build at a time (parallel make/CI jobs wait)

WORK="$(mktemp -d "${TMPDIR:-/tmp}/rara-cluster-build.XXXXXX")"
trap 'rm -rf "${WORK}"' EXIT

mod_field() {  # MODULE@VERSION FIELD -> a string field of `go mod download -json`
  go mod download -json "$1" | sed -n "s/^[[:space:]]*\"$2\": \"\\(.*\\)\",\{0,1\}$/\\1/p" | head -n1
}

# wrapper DIR MODULE VERSION [STAGING_VERSION]: a throwaway module requiring MODULE@VERSION.
# Modules whose go.mod replaces siblings by local path (k8s.io/kubernetes: staging/) cannot
# be `go install`ed; each such replace becomes the published twin at STAGING_VERSION (the
# method of .ci/k8s-binaries.sh).
wrapper() {
  local dir="$1" mod="$2" ver="$3" staging="${4:-}" gomod m
  mkdir -p "${dir}"
  ( cd "${dir}" && go mod init rara.local/cluster-build >/dev/null 2>&1 && go mod edit -require="${mod}@${ver}" )
  if [[ -n "${staging}" ]]; then
    gomod="$(mod_field "${mod}@${ver}" GoMod)"
    while read -r m; do
      if grep -Eq "^[[:space:]]*(require[[:space:]]+)?${m//./\\.}[[:space:]]+v" "${gomod}"; then
        ( cd "${dir}" && go mod edit -replace="${m}=${m}@${staging}" )
      fi
    done < <(sed -n -E 's#^[[:space:]]*(replace[[:space:]]+)?([^[:space:]]+)[[:space:]]+=>[[:space:]]+\.\.?/.*#\2#p' "${gomod}")
  fi
}

build_kubernetes() {
  local want=(kubelet kubeadm kubectl kube-proxy kube-scheduler kube-controller-manager) missing=() b
  for b in "${want[@]}"; do [[ -x "${KUBE_BIN}/${b}" ]] || missing+=("${b}"); done
  if ((${#missing[@]} == 0)); then log "kubernetes ${KUBE_VERSION}: present"; return; fi
  local d="${WORK}/k8s" minor_patch="${KUBE_VERSION#v1.}" commit ldflags pkg pkgs=()
  wrapper "${d}" k8s.io/kubernetes "${KUBE_VERSION}" "v0.${minor_patch}"
  commit="$(mod_field "k8s.io/kubernetes@${KUBE_VERSION}" Hash || true)"
  # kubeadm compares its own version with the kubelet's and the control plane's: stamp them.
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X ${pkg}.gitVersion=${KUBE_VERSION} -X ${pkg}.gitMajor=1"
    ldflags+=" -X ${pkg}.gitMinor=${minor_patch%%.*} -X ${pkg}.gitTreeState=clean"
    ldflags+=" -X ${pkg}.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  done
  for b in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/${b}"); done
  ( cd "${d}" && for pkg in "${pkgs[@]}"; do go get "${pkg}@${KUBE_VERSION}" 2>&1 | grep -v '^go: ' || true; done \
      && mkdir -p out && go build -p "${GO_JOBS}" -trimpath -ldflags="${ldflags}" -o out/ "${pkgs[@]}" )
  mkdir -p "${KUBE_BIN}"
  for b in "${missing[@]}"; do mv -f "${d}/out/${b}" "${KUBE_BIN}/${b}"; done
}

build_containerd() {
  if [[ -x "${CONTAINERD_BIN}/containerd" && -x "${CONTAINERD_BIN}/ctr" && -x "${CONTAINERD_BIN}/containerd-shim-runc-v2" ]]; then
    log "containerd ${CONTAINERD_VERSION}: present"; return
  fi
  local d="${WORK}/containerd" m=github.com/containerd/containerd/v2
  wrapper "${d}" "${m}" "${CONTAINERD_VERSION}"
  # Static; drop the snapshotters that need cgo/kernel features the node does not use.
  ( cd "${d}" && go get "${m}/cmd/containerd@${CONTAINERD_VERSION}" >/dev/null 2>&1 && mkdir -p out \
      && go build -p "${GO_JOBS}" -trimpath -tags "no_btrfs,no_devmapper,no_zfs,no_aufs,urfave_cli_no_docs" \
           -ldflags "-s -w -X ${m}/version.Version=${CONTAINERD_VERSION} -X ${m}/version.Package=${m}" \
           -o out/ "${m}/cmd/containerd" "${m}/cmd/containerd-shim-runc-v2" "${m}/cmd/ctr" )
  mkdir -p "${CONTAINERD_BIN}"; mv -f "${d}"/out/* "${CONTAINERD_BIN}/"
}

build_simple() {  # NAME MODULE VERSION PACKAGE DEST_DIR BINARY [LDFLAGS]
  local name="$1" mod="$2" ver="$3" pkg="$4" dest="$5" bin="$6" ldflags="${7:-}"
  if [[ -x "${dest}/${bin}" ]]; then log "${name} ${ver}: present"; return; fi
  local d="${WORK}/${name}"
  wrapper "${d}" "${mod}" "${ver}"
  ( cd "${d}" && go get "${pkg}@${ver}" >/dev/null 2>&1 && mkdir -p out \
      && go build -p "${GO_JOBS}" -trimpath -ldflags "-s -w ${ldflags}" -o "out/${bin}" "${pkg}" )
  mkdir -p "${dest}"; mv -f "${d}/out/${bin}" "${dest}/${bin}"
}

build_pause() {
  # The pause container only has to sleep until signalled and reap zombies (it is PID 1 of
  # the pod sandbox). Kubernetes' own is build/pause/linux/pause.c; this is the same idea.
  if [[ -x "${PAUSE_BIN}/pause" ]]; then log "pause ${PAUSE_VERSION}: present"; return; fi
  command -v gcc >/dev/null || die "gcc is needed for the pause binary (apt-get install gcc)"
  cat > "${WORK}/pause.c" <<'C'
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
static void sigdown(int signo) { psignal(signo, "Shutting down, got signal"); exit(0); }
static void sigreap(int signo) { (void)signo; while (waitpid(-1, NULL, WNOHANG) > 0) {} }
int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "-v") == 0) { printf("pause (rara) " VERSION "\n"); return 0; }
  if (getpid() != 1) fprintf(stderr, "Warning: pause should be the first process\n");
  struct sigaction down = {.sa_handler = sigdown}, reap = {.sa_handler = sigreap, .sa_flags = SA_NOCLDSTOP};
  if (sigaction(SIGINT, &down, NULL) < 0 || sigaction(SIGTERM, &down, NULL) < 0 ||
      sigaction(SIGCHLD, &reap, NULL) < 0) return 1;
  for (;;) pause();
}
C
  mkdir -p "${PAUSE_BIN}"
  gcc -Os -static -DVERSION="\"${PAUSE_VERSION}\"" -o "${PAUSE_BIN}/pause" "${WORK}/pause.c"
  strip "${PAUSE_BIN}/pause"
}

start=$SECONDS
timed "pause" build_pause
timed "kind ${KIND_VERSION}" build_simple kind sigs.k8s.io/kind "${KIND_VERSION}" sigs.k8s.io/kind "${KIND_BIN}" kind
timed "crictl ${CRICTL_VERSION}" build_simple crictl sigs.k8s.io/cri-tools "${CRICTL_VERSION}" \
  sigs.k8s.io/cri-tools/cmd/crictl "${CRICTL_BIN}" crictl "-X sigs.k8s.io/cri-tools/pkg/version.Version=${CRICTL_VERSION}"
timed "coredns ${COREDNS_VERSION}" build_simple coredns github.com/coredns/coredns "${COREDNS_VERSION}" \
  github.com/coredns/coredns "${COREDNS_BIN}" coredns
timed "containerd ${CONTAINERD_VERSION}" build_containerd
timed "registry ${REGISTRY_VERSION}" build_simple registry github.com/distribution/distribution/v3 \
  "${REGISTRY_VERSION}" github.com/distribution/distribution/v3/cmd/registry "${REGISTRY_BIN}" registry
timed "etcd + kube-apiserver (.ci/k8s-binaries.sh)" "${ROOT}/.ci/k8s-binaries.sh" >/dev/null
timed "kubernetes ${KUBE_VERSION}" build_kubernetes
log "all binaries ready in $((SECONDS - start))s"
