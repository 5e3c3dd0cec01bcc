# shellcheck shell=bash
# Pinned versions and cache locations of everything `make cluster` builds. Sourced by the
# other scripts of .ci/cluster/. Every expensive artefact lives under ~/.cache/rara/ in a
# folder whose name carries its version: bumping a pin rebuilds, anything else reuses.
#
# Why these versions: Kubernetes is the one .ci/k8s-binaries.sh already builds for the
# operator tests (one Go build cache for both); kubeadm v1.37 asks for CoreDNS v1.14.6 and
# pause 3.10.2 (cmd/kubeadm/app/constants); kubelet >= 1.36 needs containerd >= 2.0
# (docs/cluster.md, obstacle 3); etcd is the one the operator tests already use.

RARA_CACHE="${RARA_CACHE:-${HOME}/.cache/rara}"

KUBE_VERSION="${RARA_KUBE_VERSION:-v1.37.2}"
ETCD_VERSION="${RARA_ETCD_VERSION:-v3.7.3}"
CONTAINERD_VERSION="${RARA_CONTAINERD_VERSION:-v2.3.7}"
CRICTL_VERSION="${RARA_CRICTL_VERSION:-v1.37.0}"
COREDNS_VERSION="${RARA_COREDNS_VERSION:-v1.14.6}"
PAUSE_VERSION="${RARA_PAUSE_VERSION:-3.10.2}"
KIND_VERSION="${RARA_KIND_VERSION:-v0.33.0}"
REGISTRY_VERSION="${RARA_REGISTRY_VERSION:-v3.1.2}"   # github.com/distribution/distribution/v3
DEBIAN_SUITE="${RARA_DEBIAN_SUITE:-bookworm}"
DEBIAN_MIRROR="${RARA_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

# Shared with .ci/k8s-binaries.sh (same layout): kube-apiserver and etcd are built there.
K8S_CACHE="${RARA_K8S_CACHE:-${RARA_CACHE}/k8s}"
KUBE_BIN="${K8S_CACHE}/kubernetes-${KUBE_VERSION}/bin"
ETCD_BIN="${K8S_CACHE}/etcd-${ETCD_VERSION}/bin"
CONTAINERD_BIN="${RARA_CACHE}/containerd-${CONTAINERD_VERSION}/bin"
CRICTL_BIN="${RARA_CACHE}/crictl-${CRICTL_VERSION}/bin"
COREDNS_BIN="${RARA_CACHE}/coredns-${COREDNS_VERSION}/bin"
PAUSE_BIN="${RARA_CACHE}/pause-${PAUSE_VERSION}/bin"
KIND_BIN="${RARA_CACHE}/kind-${KIND_VERSION}/bin"
KIND="${KIND_BIN}/kind"
REGISTRY_BIN="${RARA_CACHE}/registry-${REGISTRY_VERSION}/bin"
KUBECTL="${KUBE_BIN}/kubectl"
# debootstrap'd Debian root file systems (tarballs), one per flavour.
ROOTFS_CACHE="${RARA_CACHE}/rootfs-${DEBIAN_SUITE}"

# The project's own Docker engine: images persist across `make cluster-down` (data root in
# the cache), everything else (socket, pid, exec root) lives in a run dir that down removes.
DOCKER_DATA="${RARA_DOCKER_DATA:-${RARA_CACHE}/dockerd-data}"
DOCKER_RUN="${RARA_DOCKER_RUN:-${RARA_CACHE}/dockerd-run}"
DOCKER_SOCK="${DOCKER_RUN}/docker.sock"
DOCKER_BRIDGE="rara-docker0"          # its own bridge: never touches another engine's docker0
DOCKER_BIP="${RARA_DOCKER_BIP:-172.29.0.1/16}"
DOCKER_CGROUP_PARENT="rara-docker"    # its containers' cgroups, removed by down
export DOCKER_HOST="unix://${DOCKER_SOCK}"

# The cluster.
CLUSTER_NAME="${RARA_CLUSTER_NAME:-rara}"
NODE_IMAGE="rara.local/kind-node:${KUBE_VERSION}-${CONTAINERD_VERSION}"
KUBECONFIG_PATH="${RARA_KUBECONFIG:-${RARA_CACHE}/cluster/${CLUSTER_NAME}.kubeconfig}"
CLUSTER_STATE="${RARA_CACHE}/cluster"

# The image registry on the kind network (registry.sh): the host pushes to localhost:PORT, the
# node's containerd pulls the same names from the registry container. Its blobs persist
# across clusters (a cache like the engine's data root), so a warm CI run moves only the
# layers that changed.
REGISTRY_NAME="rara-registry"
REGISTRY_PORT="${RARA_REGISTRY_PORT:-5001}"
REGISTRY="localhost:${REGISTRY_PORT}"
REGISTRY_DATA="${RARA_REGISTRY_DATA:-${RARA_CACHE}/registry-data}"

# Base image for rara's own images (worker/operator, executor, PostgreSQL).
BASE_IMAGE="rara.local/debian:${DEBIAN_SUITE}"
