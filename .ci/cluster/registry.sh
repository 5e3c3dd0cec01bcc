#!/usr/bin/env bash
# An image registry for the kind cluster, so that images move by layer instead of whole.
#
# `kind load docker-image` streams an image's every layer into the node on every change: 5 GB
# for the executor when one line of rara changed (~3.5 min here). With a registry, the host
# pushes only the layers the registry lacks (the images keep their ML stack in a layer of its
# own: charts/rara/images/*.Dockerfile) and the node's containerd pulls the same way. Its
# blobs live in ~/.cache/rara/registry-data, so they outlive the cluster like the engine's
# images do. The pattern is kind's own "local registry" one: a registry container on the
# `kind` network, published on the host's loopback only, and containerd told (hosts.toml)
# that `localhost:PORT` means that container, over plain HTTP inside the docker network.
#
#   .ci/cluster/registry.sh up      start it (image built from the cached binary) and point
#                                   the cluster's nodes at it; idempotent
#   .ci/cluster/registry.sh push IMAGE...   tag each as localhost:PORT/NAME:TAG, push,
#                                   print the pushed names
#   .ci/cluster/registry.sh down    remove the container (the blobs stay cached)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The cache grows by each tree's app layers (megabytes) and each dependency change (GBs):
# past this size it is emptied before the registry starts, and refilled by the next pushes.
MAX_GB="${RARA_REGISTRY_MAX_GB:-15}"
IMAGE="rara.local/registry:${REGISTRY_VERSION}"

up() {
  [[ -x "${REGISTRY_BIN}/registry" ]] || "${HERE}/build-binaries.sh" >&2
  if ! docker image inspect "${IMAGE}" >/dev/null 2>&1; then
    local ctx; ctx="$(mktemp -d "${TMPDIR:-/tmp}/rara-registry.XXXXXX")"
    cp "${REGISTRY_BIN}/registry" "${ctx}/registry"
    # Storage on the mounted cache; deletes allowed so that an operator can prune by API.
    cat > "${ctx}/config.yml" <<'YAML'
version: 0.1
log: {level: warn, accesslog: {disabled: true}}
storage:
  filesystem: {rootdirectory: /var/lib/registry}
  delete: {enabled: true}
http: {addr: ":5000"}
YAML
    printf '%s\n' "FROM ${BASE_IMAGE}" "COPY registry /usr/local/bin/registry" \
      "COPY config.yml /etc/registry/config.yml" "EXPOSE 5000" \
      'ENTRYPOINT ["/usr/local/bin/registry", "serve", "/etc/registry/config.yml"]' > "${ctx}/Dockerfile"
    docker build -q -t "${IMAGE}" "${ctx}" >/dev/null
    rm -rf "${ctx}"
  fi
  if [[ "$(docker inspect -f '{{.State.Running}}' "${REGISTRY_NAME}" 2>/dev/null)" != true ]]; then
    docker rm -f "${REGISTRY_NAME}" >/dev/null 2>&1 || true
    mkdir -p "${REGISTRY_DATA}"
    if (( $(du -s --block-size=1G "${REGISTRY_DATA}" | cut -f1) > MAX_GB )); then
      log "registry cache over ${MAX_GB} GB: emptied"
      rm -rf "${REGISTRY_DATA:?}"/*
    fi
    docker network inspect kind >/dev/null 2>&1 || docker network create kind >/dev/null
    docker run -d --name "${REGISTRY_NAME}" --network kind \
      -p "127.0.0.1:${REGISTRY_PORT}:5000" -v "${REGISTRY_DATA}:/var/lib/registry" \
      "${IMAGE}" >/dev/null
  fi
  local i
  for i in $(seq 100); do
    # (python3, not curl: the one HTTP client every machine here has)
    python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' \
      "http://${REGISTRY}/v2/" >/dev/null 2>&1 && break
    ((i < 100)) || die "registry ${REGISTRY} does not answer"
    sleep 0.1
  done
  # Each node: `localhost:PORT` is the registry container by name, over HTTP. containerd reads
  # hosts.toml at each pull (kind-config.yaml sets its config_path), no restart needed.
  local node
  for node in $("${KIND}" get nodes --name "${CLUSTER_NAME}" 2>/dev/null); do
    docker exec -i "${node}" sh -c "mkdir -p '/etc/containerd/certs.d/${REGISTRY}' \
      && cat > '/etc/containerd/certs.d/${REGISTRY}/hosts.toml'" <<TOML
[host."http://${REGISTRY_NAME}:5000"]
  capabilities = ["pull", "resolve"]
TOML
  done
  log "registry ${REGISTRY} up ($(du -sh "${REGISTRY_DATA}" | cut -f1) cached)"
}

push() {
  local ref name pushed
  for ref in "$@"; do
    name="${ref##*/}"                       # rara.local/rara-worker:TAG -> rara-worker:TAG
    pushed="${REGISTRY}/${name}"
    docker tag "${ref}" "${pushed}"
    timed "push ${pushed}" docker push -q "${pushed}" >/dev/null
    # This engine's older tags of the same image would keep each old build alive (images.sh
    # removes only its own rara.local/ tags); the registry keeps its blobs either way.
    docker images --format '{{.Repository}}:{{.Tag}}' "${pushed%:*}" | grep -vxF "${pushed}" \
      | xargs -r docker rmi >/dev/null 2>&1 || true
    echo "${pushed}"
  done
}

down() {
  docker rm -f "${REGISTRY_NAME}" >/dev/null 2>&1 || true
}

case "${1:-}" in
  up) up ;;
  push) shift; push "$@" ;;
  down) down ;;
  *) echo "usage: $0 up | push IMAGE... | down" >&2; exit 2 ;;
esac
