#!/usr/bin/env bash
# The Debian base every image of the project starts from, made here: no registry is
# reachable (docs/cluster.md, obstacle 4), so `FROM debian:bookworm` cannot be pulled.
#   debootstrap --variant=minbase bookworm  ->  rootfs tarball (cached)  ->  docker import
# The tarball is cached under ~/.cache/rara/rootfs-bookworm/ (~50 s to make, once); the
# import (a few seconds) is redone only when the engine lacks the image.
# Needs the project's engine (docker-up.sh). Prints the image name.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TARBALL="${ROOTFS_CACHE}/minbase.tar"
if docker image inspect "${BASE_IMAGE}" >/dev/null 2>&1; then
  log "${BASE_IMAGE}: present"; echo "${BASE_IMAGE}"; exit 0
fi
mkdir -p "${ROOTFS_CACHE}"
exec 9>"${ROOTFS_CACHE}/.lock"; flock 9
if [[ ! -s "${TARBALL}" ]]; then
  command -v debootstrap >/dev/null || \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap >/dev/null
  dir="$(mktemp -d "${TMPDIR:-/tmp}/rara-rootfs.XXXXXX")"
  trap 'rm -rf "${dir}"' EXIT
  timed "debootstrap ${DEBIAN_SUITE} (minbase)" \
    debootstrap --variant=minbase "${DEBIAN_SUITE}" "${dir}" "${DEBIAN_MIRROR}" >"${ROOTFS_CACHE}/debootstrap.log" 2>&1 \
    || { tail -20 "${ROOTFS_CACHE}/debootstrap.log" >&2; die "debootstrap failed"; }
  # What an image does not need: package lists, caches, docs kept small like Debian's own
  # images; apt configured not to keep downloads (images install with apt-get in one RUN).
  rm -rf "${dir}"/var/lib/apt/lists/* "${dir}"/var/cache/apt/*.bin "${dir}"/var/cache/apt/archives/*.deb \
         "${dir}"/var/log/* "${dir}"/tmp/* "${dir}"/usr/share/doc/* "${dir}"/usr/share/man/*
  printf 'Dir::Cache::pkgcache "";\nDir::Cache::srcpkgcache "";\nAPT::Install-Recommends "false";\n' \
    > "${dir}/etc/apt/apt.conf.d/docker-clean"
  printf 'path-exclude /usr/share/doc/*\npath-include /usr/share/doc/*/copyright\npath-exclude /usr/share/man/*\npath-exclude /usr/share/locale/*\n' \
    > "${dir}/etc/dpkg/dpkg.cfg.d/docker-nodoc"
  : > "${dir}/etc/hostname"; : > "${dir}/etc/resolv.conf"
  tar --numeric-owner -C "${dir}" -cf "${TARBALL}.tmp" . && mv "${TARBALL}.tmp" "${TARBALL}"
fi
timed "docker import ${BASE_IMAGE}" docker import \
  --change 'CMD ["bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  "${TARBALL}" "${BASE_IMAGE}" >/dev/null
log "${BASE_IMAGE}: $(docker image inspect -f '{{.Size}}' "${BASE_IMAGE}" | awk '{printf "%.0f MB", $1/1e6}')"
echo "${BASE_IMAGE}"
