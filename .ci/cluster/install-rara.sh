#!/usr/bin/env bash
# rara into the cluster of `make cluster`, the README's way: build the images (images.sh),
# push them to the cluster's registry (registry.sh), apply what the chart expects to exist (PostgreSQL, the
# database Secrets of the owner and of each process's login, an S3 server with its bucket and
# key pair, an RWX volume as the other option: rara-deps.yaml), create the logins
# (db-logins.sql), `helm upgrade --install` with the values a user of a one-node CPU cluster
# sets (values-kind.yaml + the image names and the S3 endpoint), then
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
# Into the registry: only the layers it lacks move (after a code change, rara's own few MB;
# the ML stack's 5 GB once), and the node pulls only the layers it lacks. `kind load`
# streamed every layer of every changed image into the node (~3.5 min for the executor).
"${HERE}/registry.sh" up
for key in "${!img[@]}"; do img["${key}"]="$("${HERE}/registry.sh" push "${img[${key}]}")"; done

# The artifact volume's directory on the node, owned by the pods' uid (hostPath has no fsGroup).
docker exec "${CLUSTER_NAME}-control-plane" install -d -o 10001 -g 10001 "/var/lib/rara-artifacts/${NAMESPACE}"
# Test credentials (the logins' passwords, the S3 key pair): made on the first install, read
# back from their Secrets on the next ones (pods already running keep what they were given).
kept() {  # SECRET KEY PREFIX: the Secret's value, else PREFIX and 32 random hex digits
  local v
  v="$(k -n "${NAMESPACE}" get secret "$1" -o "jsonpath={.data.$2}" 2>/dev/null | base64 -d)" || v=""
  [[ -n "${v}" ]] || v="$3$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
  printf '%s' "${v}"
}
OWNER_DB_PASSWORD="$(kept rara-db password "")"
WORKER_DB_PASSWORD="$(kept rara-db-worker password "")"
OPERATOR_DB_PASSWORD="$(kept rara-db-operator password "")"
S3_ACCESS_KEY="$(kept rara-s3 AWS_ACCESS_KEY_ID rara)"
S3_SECRET_KEY="$(kept rara-s3 AWS_SECRET_ACCESS_KEY "")"
export NAMESPACE POSTGRES_IMAGE="${img[POSTGRES_IMAGE]}" S3_IMAGE="${img[S3_IMAGE]}" \
  OWNER_DB_PASSWORD WORKER_DB_PASSWORD OPERATOR_DB_PASSWORD S3_ACCESS_KEY S3_SECRET_KEY
envsubst '${NAMESPACE} ${POSTGRES_IMAGE} ${S3_IMAGE} ${OWNER_DB_PASSWORD} ${WORKER_DB_PASSWORD} ${OPERATOR_DB_PASSWORD} ${S3_ACCESS_KEY} ${S3_SECRET_KEY}' \
  < "${HERE}/rara-deps.yaml" | k apply -f - >/dev/null
timed "postgres ready" k -n "${NAMESPACE}" rollout status deploy/rara-postgres --timeout=300s >/dev/null
# Ready is the kubelet's last word, which can predate a restart of the node or the server (a
# reused cluster after its engine restarted: "the database system is starting up"). The logins
# below need the server itself, so ask it, for up to five minutes.
answers() { k -n "${NAMESPACE}" exec deploy/rara-postgres -- psql -X -q -U rara -d rara -c 'select 1' >/dev/null 2>&1; }
pg_wait_start=$SECONDS
until answers; do
  ((SECONDS - pg_wait_start < 300)) || die "rara-postgres is Ready but has not answered a query for 300 s"
  sleep 1
done
# The logins before helm: the migration Job connects as the owner (a non-superuser owner of
# the database), the chart's pods as theirs once it is done (db-logins.sql says why the group
# roles are made here too). Passwords on stdin, not argv.
{ printf '\\set owner_password %s\n\\set worker_password %s\n\\set operator_password %s\n' \
    "${OWNER_DB_PASSWORD}" "${WORKER_DB_PASSWORD}" "${OPERATOR_DB_PASSWORD}"
  cat "${HERE}/db-logins.sql"; } \
  | k -n "${NAMESPACE}" exec -i deploy/rara-postgres -- psql -X -q -U rara -d rara >/dev/null
# The bucket is made by the S3 pod's init container: Ready means it exists.
timed "s3 ready" k -n "${NAMESPACE}" rollout status deploy/rara-s3 --timeout=300s >/dev/null

HELM="$("${ROOT}/.ci/go-tool.sh" helm)"
split() { echo "${1%:*}" "${1##*:}"; }
read -r wrepo wtag < <(split "${img[WORKER_IMAGE]}")
read -r erepo etag < <(split "${img[EXECUTOR_IMAGE]}")
timed "helm upgrade --install rara" "${HELM}" upgrade --install rara "${ROOT}/charts/rara" \
  --namespace "${NAMESPACE}" -f "${HERE}/values-kind.yaml" \
  --set-string "image.repository=${wrepo},image.tag=${wtag},image.pullPolicy=IfNotPresent" \
  --set-string "executorImage.repository=${erepo},executorImage.tag=${etag},executorImage.pullPolicy=IfNotPresent" \
  --set-string "artifacts.s3.endpoint=http://rara-s3.${NAMESPACE}.svc:7070" \
  --wait --timeout 10m "$@"

# Images of earlier installs in the node's containerd (5 GB per executor build; the disk is
# shared): whatever no container uses any more goes.
docker exec "${CLUSTER_NAME}-control-plane" crictl rmi --prune >/dev/null 2>&1 || true

k -n "${NAMESPACE}" apply -f "${ROOT}/examples/rag-refresh.yaml"
timed "WorkflowDefinition rag-refresh Ready" \
  k -n "${NAMESPACE}" wait --for=condition=Ready workflowdefinition/rag-refresh --timeout=180s
k -n "${NAMESPACE}" get workflowdefinitions,workerpools 2>/dev/null || true
log "installed in $((SECONDS - start))s"
