#!/usr/bin/env bash
# `make cluster-down`: delete the kind cluster, stop the project's Docker engine and put the
# host back (docker-down.sh). Built binaries and images stay cached. Idempotent.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
if [[ -S "${DOCKER_SOCK}" ]] && docker version >/dev/null 2>&1; then
  "${HERE}/registry.sh" down
fi
if [[ -S "${DOCKER_SOCK}" ]] && docker version >/dev/null 2>&1 && [[ -x "${KIND}" ]]; then
  if "${KIND}" get clusters 2>/dev/null | grep -qx "${CLUSTER_NAME}"; then
    timed "kind delete cluster" "${KIND}" delete cluster --name "${CLUSTER_NAME}" --kubeconfig "${KUBECONFIG_PATH}"
  fi
fi
rm -f "${KUBECONFIG_PATH}"
"${HERE}/docker-down.sh"
