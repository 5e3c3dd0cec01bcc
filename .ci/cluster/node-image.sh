#!/usr/bin/env bash
# Assemble the kind node image without any registry (obstacle 4: `kind build node-image`
# always runs `ctr content fetch` for etcd, CoreDNS, pause, kindnetd, local-path). We take
# the steps kind takes ourselves:
#   1. kind's base image (images/base of the kind Go module) on the local Debian base
#   2. component images (kube-apiserver, -controller-manager, -scheduler, kube-proxy, etcd,
#      CoreDNS, pause) from the binaries of build-binaries.sh, each a tiny `docker build`
#   3. run the base, copy the binaries in, `ctr -n k8s.io images import` the component
#      images, write /kind/version, commit.
# The tag carries the versions and a hash of the recipe, so a second run (or `make cluster`
# after a down) reuses it, and any change to the recipe rebuilds it. Prints the image name.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

recipe_hash="$(cat "${HERE}/node-image.sh" "${HERE}/versions.sh" "${HERE}"/node/* | sha256sum | cut -c1-12)"
IMAGE="${NODE_IMAGE}-${recipe_hash}"
if docker image inspect "${IMAGE}" >/dev/null 2>&1; then
  log "${IMAGE}: present"; echo "${IMAGE}"; exit 0
fi
"${HERE}/build-binaries.sh"
"${HERE}/base-image.sh" >/dev/null
go_env
KIND_SRC="$(go mod download -json "sigs.k8s.io/kind@${KIND_VERSION}" | jq -r .Dir)"
[[ -d "${KIND_SRC}/images/base/files" ]] || die "kind ${KIND_VERSION} module has no images/base/files"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/rara-node.XXXXXX")"
cid=""
cleanup() { [[ -z "${cid}" ]] || docker rm -f "${cid}" >/dev/null 2>&1 || true; rm -rf "${WORK}"; }
trap cleanup EXIT

# --- 1. node base ---
ctx="${WORK}/base"; mkdir -p "${ctx}/kind"
cp -r "${KIND_SRC}/images/base/files" "${ctx}/kind/files"; chmod -R u+w "${ctx}"
cp "${HERE}"/node/* "${ctx}/"
timed "node base image (apt-get in docker build)" \
  docker build -q --build-arg "BASE_IMAGE=${BASE_IMAGE}" -t "rara.local/kind-node-base:${recipe_hash}" "${ctx}" >/dev/null

# --- 2. component images: what `kubeadm config images list` names, built from our binaries ---
REG=registry.k8s.io
ETCD_TAG="${ETCD_VERSION#v}-0"   # cluster-up.sh tells kubeadm to use this tag (it asks for 3.7.0-0)
component() {  # NAME TAG FROM BINARY_PATH [extra Dockerfile lines]
  local name="$1" tag="$2" from="$3" bin="$4" extra="${5:-}" d="${WORK}/img-${1//\//_}"
  mkdir -p "$d"; cp "${bin}" "$d/"
  {
    echo "FROM ${from}"
    echo "COPY $(basename "${bin}") /usr/local/bin/$(basename "${bin}")"
    echo "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    printf '%s\n' "${extra}"
  } > "$d/Dockerfile"
  docker build -q -t "${REG}/${name}:${tag}" "$d" >/dev/null
  echo "${REG}/${name}:${tag}"
}
images=()
t=$SECONDS
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  images+=("$(component "$c" "${KUBE_VERSION}" scratch "${KUBE_BIN}/$c")")
done
# kube-proxy programs iptables: it needs the iptables/conntrack tools (upstream: distroless-iptables).
images+=("$(component kube-proxy "${KUBE_VERSION}" "${BASE_IMAGE}" "${KUBE_BIN}/kube-proxy" \
  'RUN apt-get update && apt-get install -y --no-install-recommends iptables nftables conntrack ipset && rm -rf /var/lib/apt/lists/*')")
images+=("$(component etcd "${ETCD_TAG}" scratch "${ETCD_BIN}/etcd")")
images+=("$(component coredns/coredns "${COREDNS_VERSION}" scratch "${COREDNS_BIN}/coredns" \
  'ENTRYPOINT ["/usr/local/bin/coredns"]')")
images+=("$(component pause "${PAUSE_VERSION}" scratch "${PAUSE_BIN}/pause" \
  $'RUN ["/usr/local/bin/pause", "-v"]\nUSER 65535:65535\nENTRYPOINT ["/usr/local/bin/pause"]')")
docker save -o "${WORK}/components.tar" "${images[@]}"
log "component images ($(du -m "${WORK}/components.tar" | cut -f1) MB): $((SECONDS - t))s"

# --- 3. kind's build container: binaries in, images imported, committed ---
t=$SECONDS
cid="$(docker run -d --entrypoint=sleep --security-opt seccomp=unconfined \
  "rara.local/kind-node-base:${recipe_hash}" infinity)"
for b in kubelet kubeadm kubectl; do docker cp "${KUBE_BIN}/$b" "${cid}:/usr/bin/$b"; done
for b in containerd containerd-shim-runc-v2 ctr; do docker cp "${CONTAINERD_BIN}/$b" "${cid}:/usr/local/bin/$b"; done
docker cp "${CRICTL_BIN}/crictl" "${cid}:/usr/local/bin/crictl"
docker cp "${WORK}/components.tar" "${cid}:/kind/components.tar"
docker exec -i "${cid}" bash -euo pipefail -s >&2 <<SH
chown root:root /usr/bin/kube* /usr/local/bin/containerd* /usr/local/bin/ctr /usr/local/bin/crictl
echo -n "${KUBE_VERSION}" > /kind/version
# kind's base image does this at build time: the CRI base spec, mounting product files.
ctr oci spec | jq '.hooks.createContainer[.hooks.createContainer| length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
  | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json
# the pause image we built, not kind's default
sed -i 's#sandbox_image = .*#sandbox_image = "${REG}/pause:${PAUSE_VERSION}"#' /etc/containerd/config.toml
containerd --version; runc --version | head -1
# kind's importer: a throwaway containerd in the build container, ctr import, stop.
(containerd > /tmp/containerd.log 2>&1 &)
for i in \$(seq 100); do ctr version >/dev/null 2>&1 && break; sleep 0.1; done
ctr --namespace=k8s.io images import --all-platforms --no-unpack --digests /kind/components.tar >/dev/null
ctr --namespace=k8s.io images ls -q | grep -v -e '@sha256' -e '^sha256:' | sort
pkill -x containerd; for i in \$(seq 100); do pgrep -x containerd >/dev/null || break; sleep 0.1; done
rm -rf /kind/components.tar /tmp/* /var/log/*
kubeadm config images list --kubernetes-version ${KUBE_VERSION} 2>/dev/null | sed 's/^/kubeadm wants: /'
SH
docker commit \
  --change 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' \
  --change 'ENV HTTP_PROXY="" HTTPS_PROXY="" NO_PROXY=""' \
  "${cid}" "${IMAGE}" >/dev/null
# Node images of older recipes (and their bases): ~1 GB each, nothing refers to them.
docker images --format '{{.Repository}}:{{.Tag}}' | grep -E '^rara\.local/kind-node(-base)?:' \
  | grep -vxF -e "${IMAGE}" -e "rara.local/kind-node-base:${recipe_hash}" | xargs -r docker rmi >/dev/null 2>&1 || true
log "node image assembled in $((SECONDS - t))s: ${IMAGE} ($(docker image inspect -f '{{.Size}}' "${IMAGE}" | awk '{printf "%.0f MB", $1/1e6}'))"
echo "${IMAGE}"
