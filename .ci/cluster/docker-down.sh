#!/usr/bin/env bash
# Stop the project's Docker engine and put the host back as docker-up.sh found it:
# daemons stopped, mounts under its roots unmounted, its bridge and the networks' bridges
# deleted, the iptables chains and rules dockerd (and cluster-up.sh) added removed, the
# FORWARD policy and sysctls restored, its cgroups removed. The image cache (data root) stays.
# Idempotent: safe to run when nothing is up.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
STATE="${DOCKER_RUN}/host-state"

stop_pid() {  # PIDFILE NAME: SIGTERM, wait up to 30 s, then SIGKILL
  local f="$1" name="$2" pid
  [[ -f "$f" ]] || return 0
  pid="$(cat "$f")"
  if kill -0 "${pid}" 2>/dev/null; then
    kill -TERM "${pid}"
    for _ in $(seq 300); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "${pid}" 2>/dev/null; then log "${name} (${pid}) ignored SIGTERM: SIGKILL"; kill -KILL "${pid}" || true; fi
  fi
  rm -f "$f"
}

if [[ -S "${DOCKER_SOCK}" ]] && docker version >/dev/null 2>&1; then
  # Containers first (kind nodes), then user networks: their bridges and rules go with them.
  ids="$(docker ps -aq)"; [[ -z "${ids}" ]] || docker rm -f ${ids} >/dev/null
  for n in $(docker network ls --format '{{.Name}}'); do
    case "$n" in bridge|host|none) ;; *) docker network rm "$n" >/dev/null || true ;; esac
  done
fi
stop_pid "${DOCKER_RUN}/dockerd.pid" dockerd
# Shims of containers that outlived dockerd (none normally) would keep mounts busy.
for p in $(pgrep -f "containerd-shim.*${DOCKER_RUN}" || true); do kill -KILL "$p" 2>/dev/null || true; done
stop_pid "${DOCKER_RUN}/containerd.pid" containerd

# Mounts under the engine's roots (overlay2 layers, netns files, shm), deepest first.
{ grep -E " (${DOCKER_DATA}|${DOCKER_RUN})[/ ]" /proc/self/mounts || true; } | awk '{print $2}' | sort -r \
  | while read -r m; do umount -l "$m" 2>/dev/null || true; done

# iptables: dockerd's chains (DOCKER*, and what it jumps to them) and our own FORWARD rules
# (comment "rara-cluster"). Only rules that name these; anything else is not ours.
clean_table() {  # TOOL TABLE
  local tool="$1" table="$2" rule chain
  command -v "${tool}" >/dev/null || return 0
  "${tool}" -t "${table}" -S 2>/dev/null | grep -E '^-A ' | grep -E -- '-j DOCKER|rara-cluster|DOCKER-|rara-docker0' \
    | grep -vE '^-A DOCKER' | while read -r rule; do
      # shellcheck disable=SC2086
      eval "${tool} -t ${table} ${rule/-A/-D}" 2>/dev/null || true
    done || true   # (grep finding nothing to delete is no error)
  for chain in $("${tool}" -t "${table}" -S 2>/dev/null | sed -n 's/^-N \(DOCKER[A-Z0-9-]*\)$/\1/p'); do
    "${tool}" -t "${table}" -F "${chain}" 2>/dev/null || true
  done
  for chain in $("${tool}" -t "${table}" -S 2>/dev/null | sed -n 's/^-N \(DOCKER[A-Z0-9-]*\)$/\1/p'); do
    "${tool}" -t "${table}" -X "${chain}" 2>/dev/null || true
  done
}
if ! pgrep -x dockerd >/dev/null; then   # another engine would own DOCKER* chains: leave them
  for tool in iptables ip6tables; do for table in filter nat; do clean_table "${tool}" "${table}"; done; done
else
  log "another dockerd is running: leaving DOCKER* iptables chains to it"
fi

# Bridges: ours, and any left by docker networks (br-<id>) that were not there before.
if ip link show "${DOCKER_BRIDGE}" >/dev/null 2>&1; then ip link del "${DOCKER_BRIDGE}"; fi
if [[ -f "${STATE}/links" ]]; then
  for l in $(ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E '^(br-|veth)' || true); do
    grep -qx "$l" "${STATE}/links" || ip link del "$l" 2>/dev/null || true
  done
fi

# Restore FORWARD policies and sysctls recorded before the engine started.
if [[ -d "${STATE}" ]]; then
  for t in iptables ip6tables; do
    p="$(cat "${STATE}/$t.forward-policy" 2>/dev/null || true)"
    [[ -n "$p" ]] && "$t" -P FORWARD "$p" 2>/dev/null || true
  done
  while IFS='=' read -r k v; do
    [[ -n "$k" ]] || continue
    [[ "$(sysctl -n "$k" 2>/dev/null)" == "$v" ]] || sysctl -q -w "$k=$v" >/dev/null 2>&1 || log "could not restore $k=$v"
  done < "${STATE}/sysctls"
fi

# nftables tables that iptables-nft created for dockerd (absent before docker-up) and that
# hold no rule any more: delete them, so `nft list ruleset` is as before.
if [[ -f "${STATE}/nft-tables" ]] && command -v nft >/dev/null && ! pgrep -x dockerd >/dev/null; then
  nft list tables 2>/dev/null | sort | comm -13 "${STATE}/nft-tables" - | while read -r _ family name; do
    if ! nft list table "${family}" "${name}" | grep -qvE '^[[:space:]]*(table .*|chain .*|type .*|policy .*|\}|)$'; then
      nft delete table "${family}" "${name}" || true
    fi
  done || true
fi

# cgroups (cgroup v1 hierarchies and v2): the engine's parent, once empty.
for d in /sys/fs/cgroup/*/"${DOCKER_CGROUP_PARENT}" /sys/fs/cgroup/"${DOCKER_CGROUP_PARENT}"; do
  [[ -d "$d" ]] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
done

# Compare with the record: say what (if anything) differs, then forget it.
if [[ -d "${STATE}" ]]; then
  for t in iptables ip6tables; do
    if ! diff <(grep -E '^[-:*]' "${STATE}/$t.save" | grep -v '^#' | sed 's/\[[0-9:]*\]//' | sort) \
              <("$t-save" 2>/dev/null | grep -E '^[-:*]' | sed 's/\[[0-9:]*\]//' | sort) >/dev/null; then
      log "note: $t differs from before docker-up (other users of the host may have changed it):"
      diff <(grep -E '^[-:*]' "${STATE}/$t.save" | sed 's/\[[0-9:]*\]//' | sort) \
           <("$t-save" 2>/dev/null | grep -E '^[-:*]' | sed 's/\[[0-9:]*\]//' | sort) | sed 's/^/    /' >&2 || true
    fi
  done
fi
rm -rf "${DOCKER_RUN}"
log "dockerd stopped; host restored"
