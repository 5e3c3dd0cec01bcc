#!/usr/bin/env bash
# KEY=VALUE lines saying where the pieces of `make cluster` are (builds nothing, starts
# nothing): for tests (tests/e2e/kind) and for `eval "$(.ci/cluster/env.sh --export)"`.
# READY=1 when the cluster answers its admin; MISSING names what a cluster here still lacks.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
missing=()
[[ "$(id -u)" == 0 ]] || missing+=("root (a Docker engine, iptables, mounts)")
command -v dockerd >/dev/null || command -v apt-get >/dev/null || missing+=("dockerd (or apt-get to install docker.io)")
command -v docker >/dev/null || missing+=("a docker client")
if ! "${HERE}/build-binaries.sh" --check 2>/dev/null; then
  command -v go >/dev/null || missing+=("go >= 1.26 (to build Kubernetes, containerd, kind from the module proxy)")
  command -v gcc >/dev/null || missing+=("gcc (for the pause binary)")
fi
# Ready: it answers, and its admin may do everything (a node restarted from the engine's cached
# data root has answered /readyz while refusing its own admin: cluster-up.sh recreates that).
ready=0
if [[ -S "${DOCKER_SOCK}" && -s "${KUBECONFIG_PATH}" && -x "${KUBECTL}" ]] \
   && KUBECONFIG="${KUBECONFIG_PATH}" timeout 10 "${KUBECTL}" get --raw /readyz >/dev/null 2>&1 \
   && [[ "$(KUBECONFIG="${KUBECONFIG_PATH}" timeout 10 "${KUBECTL}" auth can-i '*' '*' --all-namespaces 2>/dev/null)" == yes ]]; then
  ready=1
fi
p() { if [[ "${1:-}" == --export ]]; then printf 'export %s=%q\n' "$2" "$3"; else printf '%s=%s\n' "$2" "$3"; fi; }
mode="${1:-}"
p "${mode}" KUBECONFIG "${KUBECONFIG_PATH}"
p "${mode}" DOCKER_HOST "${DOCKER_HOST}"
p "${mode}" KUBECTL "${KUBECTL}"
p "${mode}" KIND "${KIND}"
p "${mode}" CLUSTER_NAME "${CLUSTER_NAME}"
if [[ "${mode}" == --export ]]; then
  echo "export PATH=${KUBE_BIN}:${KIND_BIN}:\$PATH"
else
  p "" PATH_PREFIX "${KUBE_BIN}:${KIND_BIN}"
  p "" READY "${ready}"
  p "" MISSING "$(IFS=';'; echo "${missing[*]:-}")"
fi
