#!/usr/bin/env bash
# rara into the cluster of `make cluster`, the README's way: build the images (images.sh),
# `kind load` them (no registry), apply what the chart expects to exist (PostgreSQL, the
# database Secret, an RWX artifact volume: rara-deps.yaml), `helm upgrade --install` with the
# values a user of a one-node CPU cluster sets (values-kind.yaml + the image names), then
# `kubectl apply -f examples/rag-refresh.yaml` and wait for Ready. Idempotent.
#   .ci/cluster/install-rara.sh [extra helm args...]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
NAMESPACE="${RARA_NAMESPACE:-rara}"
export KUBECONFIG="${KUBECONFIG_PATH}"
k() { "${KUBECTL}" "$@"; }
[[ -s "${KUBECONFIG}" ]] && k get --raw /readyz >/dev/null 2>&1 || die "no cluster: run make cluster"
start=$SECONDS

declare -A img
built="$("${HERE}/images.sh")"   # (not a process substitution: a failed build must stop here)
while IFS=$'=\t' read -r key ref _; do img["${key}"]="${ref}"; done <<< "${built}"
for ref in "${img[@]}"; do
  # kind load skips an image the node already has (same ID)
  timed "kind load ${ref}" "${KIND}" load docker-image --name "${CLUSTER_NAME}" "${ref}" >/dev/null
done

# The artifact volume's directory on the node, owned by the pods' uid (hostPath has no fsGroup).
docker exec "${CLUSTER_NAME}-control-plane" install -d -o 10001 -g 10001 "/var/lib/rara-artifacts/${NAMESPACE}"
export NAMESPACE POSTGRES_IMAGE="${img[POSTGRES_IMAGE]}"
envsubst '${NAMESPACE} ${POSTGRES_IMAGE}' < "${HERE}/rara-deps.yaml" | k apply -f - >/dev/null
timed "postgres ready" k -n "${NAMESPACE}" rollout status deploy/rara-postgres --timeout=300s >/dev/null

HELM="$("${ROOT}/charts/tools.sh")"
split() { echo "${1%:*}" "${1##*:}"; }
read -r wrepo wtag < <(split "${img[WORKER_IMAGE]}")
read -r erepo etag < <(split "${img[EXECUTOR_IMAGE]}")
timed "helm upgrade --install rara" "${HELM}" upgrade --install rara "${ROOT}/charts/rara" \
  --namespace "${NAMESPACE}" -f "${HERE}/values-kind.yaml" \
  --set-string "image.repository=${wrepo},image.tag=${wtag},image.pullPolicy=Never" \
  --set-string "executorImage.repository=${erepo},executorImage.tag=${etag},executorImage.pullPolicy=Never" \
  --wait --timeout 10m "$@"

# Images of earlier installs in the node's containerd (5 GB per executor build; the disk is
# shared): whatever no container uses any more goes.
docker exec "${CLUSTER_NAME}-control-plane" crictl rmi --prune >/dev/null 2>&1 || true

k -n "${NAMESPACE}" apply -f "${ROOT}/examples/rag-refresh.yaml"
timed "WorkflowDefinition rag-refresh Ready" \
  k -n "${NAMESPACE}" wait --for=condition=Ready workflowdefinition/rag-refresh --timeout=180s
k -n "${NAMESPACE}" get workflowdefinitions,workerpools 2>/dev/null || true
log "installed in $((SECONDS - start))s"
