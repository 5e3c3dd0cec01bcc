#!/usr/bin/env bash
# `make cluster`: a one-node kind cluster built entirely on this machine, then how to use it.
#   docker-up.sh      the project's Docker engine (own data root, socket, runtime wrapper)
#   build-binaries.sh Kubernetes, containerd, crictl, CoreDNS, pause, kind from Go modules
#   node-image.sh     the kind node image, assembled without a registry
#   kind create cluster --config kind-config.yaml (this host's settings, each explained there)
#   registry.sh       an image registry on the kind network (images move by changed layer)
# Idempotent: an existing cluster that answers is reused (one that does not is recreated);
# every build is cached under ~/.cache/rara/.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
start=$SECONDS

"${HERE}/docker-up.sh" >/dev/null
"${HERE}/build-binaries.sh"
image="$("${HERE}/node-image.sh")"

create_cluster() {
  # The node reaches its pods across the CNI bridge, and a privileged node writes the
  # host's non-namespaced sysctls: docker-up.sh recorded them, docker-down.sh restores them.
  export CLUSTER_NAME ETCD_TAG="${ETCD_VERSION#v}-0"
  envsubst '${CLUSTER_NAME} ${ETCD_TAG}' < "${HERE}/kind-config.yaml" > "${CLUSTER_STATE}/kind-config.yaml"
  local t=$SECONDS
  if ! "${KIND}" create cluster --image "${image}" --config "${CLUSTER_STATE}/kind-config.yaml" \
        --kubeconfig "${KUBECONFIG_PATH}" --wait 5m --retain; then
    log "kind create failed; node logs: ${KIND} export logs --name ${CLUSTER_NAME} DIR"
    exit 1
  fi
  log "cluster created in $((SECONDS - t))s"
}

# A cluster is reused only when it answers and its admin may do everything. The engine's data
# root is a cache, so a node container can outlive the run that made it (a run killed
# mid-way leaves it behind); restarted by the next engine, such a node has come back with an
# API server that refused its own admin ("nodes is forbidden") and failed a CI run.
cluster_answers() {
  local deadline=$((SECONDS + 120))
  until "${KUBECTL}" --kubeconfig "${KUBECONFIG_PATH}" get --raw /readyz >/dev/null 2>&1; do
    (( SECONDS < deadline )) || return 1
    sleep 2
  done
  [[ "$("${KUBECTL}" --kubeconfig "${KUBECONFIG_PATH}" auth can-i '*' '*' --all-namespaces 2>/dev/null)" == yes ]]
}

mkdir -p "${CLUSTER_STATE}"
if "${KIND}" get clusters 2>/dev/null | grep -qx "${CLUSTER_NAME}"; then
  "${KIND}" get kubeconfig --name "${CLUSTER_NAME}" > "${KUBECONFIG_PATH}"
  if cluster_answers; then
    log "cluster ${CLUSTER_NAME}: exists, reused"
  else
    log "cluster ${CLUSTER_NAME}: exists but does not answer its admin; recreating it"
    timed "kind delete cluster" "${KIND}" delete cluster --name "${CLUSTER_NAME}" --kubeconfig "${KUBECONFIG_PATH}"
    create_cluster
  fi
else
  create_cluster
fi
# Obstacle 5: the host's FORWARD policy is DROP once dockerd runs, but the node container's
# traffic crosses the kind network's bridge, which dockerd's own rules accept; pod traffic
# crosses the node's cni0 inside the node's netns, accepted by rara-forward.service there.
"${KUBECTL}" --kubeconfig "${KUBECONFIG_PATH}" wait --for=condition=Ready node --all --timeout=180s >/dev/null
"${KUBECTL}" --kubeconfig "${KUBECONFIG_PATH}" -n kube-system rollout status deployment/coredns --timeout=180s >/dev/null
"${HERE}/registry.sh" up
log "ready in $((SECONDS - start))s"

cat <<USAGE

rara cluster '${CLUSTER_NAME}' is up (Kubernetes ${KUBE_VERSION}, one node). To use it:
  eval "\$(.ci/cluster/env.sh --export)"    # KUBECONFIG, DOCKER_HOST, PATH (kubectl, kind)
  kubectl get nodes
  .ci/cluster/install-rara.sh                # images, pushed to ${REGISTRY}, PostgreSQL, helm install, example Ready
  (KUBECONFIG=${KUBECONFIG_PATH}  DOCKER_HOST=${DOCKER_HOST})
Tear down (cluster, engine, host state; caches stay): make cluster-down
USAGE
