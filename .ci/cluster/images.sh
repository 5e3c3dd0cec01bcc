#!/usr/bin/env bash
# Build rara's images with the project's Docker engine (`make images`):
#   rara.local/rara-worker:<tag>    worker, operator, migrations (no ML stack)
#   rara.local/rara-executor:<tag>  executor with the ML stack and the RAG demo plugins
#   rara.local/rara-postgres:15     PostgreSQL (Debian's package) for in-cluster tests
#   rara.local/rara-s3:<v>-<hash>   the S3 server (versitygw <v>) for the cluster's artifacts
# all FROM the locally made Debian base (base-image.sh), all running as uid 10001.
# <tag> is a hash of what goes into the image (the staged build context), so an unchanged
# tree reuses the images, and a changed one gets a new tag (pods roll on `helm upgrade`).
# Each image is also tagged :dev. Prints NAME=IMAGE lines and the sizes.
#
#   .ci/cluster/images.sh [worker] [executor] [postgres] [s3]     (default: all four)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"${HERE}/docker-up.sh" >/dev/null
"${HERE}/base-image.sh" >/dev/null

want=("$@"); ((${#want[@]})) || want=(worker executor postgres s3)

# The build context: only the files the Dockerfiles copy, as git sees them (tracked or
# untracked-but-not-ignored: no .venv, no egg-info, no __pycache__). The repository root
# holds gigabytes (.venv) that a plain `docker build .` would send to the engine.
CTX="$(mktemp -d "${TMPDIR:-/tmp}/rara-images.XXXXXX")"
trap 'rm -rf "${CTX}"' EXIT
( cd "${ROOT}" && git ls-files -z -c -o --exclude-standard -- pyproject.toml README.md rara worker executor operator db examples charts/rara/images \
    | xargs -0 -I{} sh -c 'test -f "{}" && printf "%s\0" "{}"' \
    | tar --null -T - -cf - ) | tar -C "${CTX}" -xf -
tag="$(cd "${CTX}" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-12)"

# A TLS-intercepting egress needs its CA inside the build stage to reach PyPI: the host's
# extra CAs (those it added to its own trust store) are passed as a build argument.
extra_ca=""
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  extra_ca="$(cat /usr/local/share/ca-certificates/*.crt)"
fi

build() {  # NAME DOCKERFILE TAG
  local name="$1" file="$2" t="$3" image="rara.local/rara-$1:$3"
  if docker image inspect "${image}" >/dev/null 2>&1; then
    log "${image}: present"
  else
    local t0=$SECONDS args=(-q -f "${CTX}/charts/rara/images/${file}" --build-arg "BASE_IMAGE=${BASE_IMAGE}"
      --build-arg "EXTRA_CA_CERTS=${extra_ca}")
    # The stage of the third-party dependencies (the ML stack: GBs) is tagged, so that the
    # prune below, which removes untagged stages, keeps it as the cache of the next build:
    # only a pyproject.toml change rebuilds it; a code change rebuilds the app layer only.
    if grep -q '^FROM .* AS dependencies$' "${CTX}/charts/rara/images/${file}"; then
      docker build "${args[@]}" --target dependencies -t "rara.local/rara-$1-dependencies:latest" "${CTX}" >/dev/null
    fi
    docker build "${args[@]}" -t "${image}" "${CTX}" >/dev/null
    log "${image}: built in $((SECONDS - t0))s"
  fi
  docker tag "${image}" "rara.local/rara-$1:dev"
  # Older builds of this image (other content tags) and the build stages left untagged: the
  # executor's are ~5 GB each, and the disk is shared.
  docker images --format '{{.Repository}}:{{.Tag}}' "rara.local/rara-$1" \
    | grep -vxF -e "${image}" -e "rara.local/rara-$1:dev" | xargs -r docker rmi >/dev/null 2>&1 || true
  docker image prune -f >/dev/null
  # Non-root, as the chart's runAsNonRoot requires.
  local user; user="$(docker image inspect -f '{{.Config.User}}' "${image}")"
  [[ "${user%%:*}" == 10001 ]] || die "${image} runs as '${user}', not uid 10001"
  printf '%s=%s\t%s\n' "$(echo "$1" | tr a-z A-Z)_IMAGE" "${image}" \
    "$(docker image inspect -f '{{.Size}}' "${image}" | awk '{printf "%.0f MB", $1/1e6}')"
}
# The S3 server: versitygw's static binary (.ci/go-tool.sh, built once from its Go module)
# in a context of its own (three files, not the Python tree), tagged by the server's version
# and a hash of that context, so an edited Dockerfile or script rebuilds it.
build_s3() {
  local bin ctx t image
  bin="$("${ROOT}/.ci/go-tool.sh" versitygw)"
  ctx="$(mktemp -d "${TMPDIR:-/tmp}/rara-s3-image.XXXXXX")"
  cp "${bin}" "${ctx}/versitygw"
  cp "${HERE}/s3.Dockerfile" "${HERE}/s3-make-buckets.sh" "${ctx}/"
  t="${bin##*/versitygw-}-$(cd "${ctx}" && sha256sum versitygw s3.Dockerfile s3-make-buckets.sh | sha256sum | cut -c1-8)"
  image="rara.local/rara-s3:${t}"
  if docker image inspect "${image}" >/dev/null 2>&1; then
    log "${image}: present"
  else
    docker build -q -f "${ctx}/s3.Dockerfile" --build-arg "BASE_IMAGE=${BASE_IMAGE}" -t "${image}" "${ctx}" \
      >/dev/null || { rm -rf "${ctx}"; die "${image}: build failed"; }
    log "${image}: built"
  fi
  rm -rf "${ctx}"
  docker images --format '{{.Repository}}:{{.Tag}}' rara.local/rara-s3 | grep -vxF "${image}" \
    | xargs -r docker rmi >/dev/null 2>&1 || true
  [[ "$(docker image inspect -f '{{.Config.User}}' "${image}")" == 10001:10001 ]] \
    || die "${image} does not run as uid 10001"
  printf 'S3_IMAGE=%s\t%s\n' "${image}" \
    "$(docker image inspect -f '{{.Size}}' "${image}" | awk '{printf "%.0f MB", $1/1e6}')"
}
for w in "${want[@]}"; do
  case "$w" in
    worker) build worker worker.Dockerfile "${tag}" ;;
    executor) build executor executor.Dockerfile "${tag}" ;;
    postgres) build postgres postgres.Dockerfile 15 ;;
    s3) build_s3 ;;
    *) die "unknown image '$w' (worker, executor, postgres, s3)" ;;
  esac
done
