#!/usr/bin/env bash
# Start the project's own Docker engine (idempotent): kind needs one, and it must not touch
# any other engine on the machine. Everything it owns is named after the project:
#   socket, pid file, exec root   ~/.cache/rara/dockerd-run/      (removed by docker-down.sh)
#   data root (images: cached)    ~/.cache/rara/dockerd-data/     (kept: the node image and
#                                                                  base images survive a down)
#   bridge rara-docker0, cgroup parent rara-docker, its own containerd
# Before it starts, the host state it will change (sysctls, FORWARD policy, iptables) is
# recorded, so that docker-down.sh can put it back.
# Prints `export DOCKER_HOST=…` for a person who wants to use it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Sysctls that dockerd, kind's node entrypoint, kubelet or kube-proxy change; several are not
# namespaced (a privileged kind node writes the host's /proc/sys), so down restores them all.
SYSCTLS=(net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
  vm.overcommit_memory kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys
  kernel.keys.root_maxbytes fs.inotify.max_user_watches fs.inotify.max_user_instances
  net.netfilter.nf_conntrack_max net.ipv6.conf.all.disable_ipv6 net.ipv6.conf.all.forwarding)

running() { [[ -S "${DOCKER_SOCK}" ]] && docker version >/dev/null 2>&1; }
# The runtime wrapper dockerd calls (a copy: the engine must not depend on this checkout);
# refreshed on every call, so a running engine picks up a changed wrapper at once.
mkdir -p "${DOCKER_RUN}"
install -m 0755 "${HERE}/runc-wrapper" "${DOCKER_RUN}/runc-wrapper"
if running; then
  log "dockerd already running (${DOCKER_SOCK})"
  echo "export DOCKER_HOST=${DOCKER_HOST}"; exit 0
fi

[[ "$(id -u)" == 0 ]] || die "needs root (a Docker engine, iptables, mounts)"
# Debian's engine (dockerd 20.10) — the only one the package mirror offers; installs in ~10 s.
if ! command -v dockerd >/dev/null; then
  timed "apt-get install docker.io" bash -c \
    'DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends docker.io iptables nftables jq >/dev/null'
fi
# nft: to list (and on down, delete) the nftables tables iptables-nft creates for dockerd.
command -v nft >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nftables >/dev/null
for t in dockerd containerd runc iptables nft jq; do command -v "$t" >/dev/null || die "$t missing"; done

mkdir -p "${DOCKER_RUN}" "${DOCKER_DATA}"
# --- record the host state we are about to change (only once: a crashed start must not
# overwrite the original record with already-changed values) ---
STATE="${DOCKER_RUN}/host-state"
if [[ ! -d "${STATE}" ]]; then
  mkdir -p "${STATE}.tmp"
  for s in "${SYSCTLS[@]}"; do
    v="$(sysctl -n "$s" 2>/dev/null)" && printf '%s=%s\n' "$s" "$v"
  done > "${STATE}.tmp/sysctls"
  lsmod 2>/dev/null | awk '{print $1}' > "${STATE}.tmp/modules" || true
  for t in iptables ip6tables; do
    "$t-save" > "${STATE}.tmp/$t.save" 2>/dev/null || true
    "$t" -S FORWARD 2>/dev/null | sed -n 's/^-P FORWARD //p' > "${STATE}.tmp/$t.forward-policy" || true
  done
  nft list tables 2>/dev/null | sort > "${STATE}.tmp/nft-tables" || true
  ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort > "${STATE}.tmp/links"
  mv "${STATE}.tmp" "${STATE}"
fi

# --- the engine's own bridge (dockerd creates docker0 otherwise, which another engine owns) ---
if ! ip link show "${DOCKER_BRIDGE}" >/dev/null 2>&1; then
  ip link add "${DOCKER_BRIDGE}" type bridge
  ip addr add "${DOCKER_BIP}" dev "${DOCKER_BRIDGE}"
  ip link set "${DOCKER_BRIDGE}" up
fi

# --- its own containerd (dockerd 20.10 would otherwise attach to /run/containerd's, if any) ---
cat > "${DOCKER_RUN}/containerd.toml" <<TOML
version = 2
root = "${DOCKER_DATA}/containerd"
state = "${DOCKER_RUN}/containerd"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "${DOCKER_RUN}/containerd.sock"
[debug]
  address = "${DOCKER_RUN}/containerd-debug.sock"
TOML
if ! [[ -S "${DOCKER_RUN}/containerd.sock" ]] || ! ctr --address "${DOCKER_RUN}/containerd.sock" version >/dev/null 2>&1; then
  setsid containerd --config "${DOCKER_RUN}/containerd.toml" >"${DOCKER_RUN}/containerd.log" 2>&1 < /dev/null &
  echo $! > "${DOCKER_RUN}/containerd.pid"
  for _ in $(seq 100); do ctr --address "${DOCKER_RUN}/containerd.sock" version >/dev/null 2>&1 && break; sleep 0.1; done
fi

cat > "${DOCKER_RUN}/daemon.json" <<JSON
{
  "data-root": "${DOCKER_DATA}",
  "exec-root": "${DOCKER_RUN}/exec",
  "pidfile": "${DOCKER_RUN}/dockerd.pid",
  "hosts": ["${DOCKER_HOST}"],
  "containerd": "${DOCKER_RUN}/containerd.sock",
  "bridge": "${DOCKER_BRIDGE}",
  "cgroup-parent": "${DOCKER_CGROUP_PARENT}",
  "storage-driver": "overlay2",
  "runtimes": {"rara-runc": {"path": "${DOCKER_RUN}/runc-wrapper"}},
  "default-runtime": "rara-runc",
  "log-driver": "json-file",
  "log-opts": {"max-size": "10m", "max-file": "2"}
}
JSON
t=$SECONDS
# setsid: the engine outlives this script (and make) but is ours to stop: docker-down.sh.
setsid dockerd --config-file "${DOCKER_RUN}/daemon.json" >"${DOCKER_RUN}/dockerd.log" 2>&1 < /dev/null &
for _ in $(seq 300); do running && break; sleep 0.1; done
running || { tail -20 "${DOCKER_RUN}/dockerd.log" >&2; die "dockerd did not come up (log: ${DOCKER_RUN}/dockerd.log)"; }
log "dockerd up in $((SECONDS - t))s (data root ${DOCKER_DATA})"
echo "export DOCKER_HOST=${DOCKER_HOST}"
