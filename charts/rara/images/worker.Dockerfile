# rara without the ML stack: the image of the worker, the operator and the migration Job.
# Built by `make images` (.ci/cluster/images.sh), from the repository root:
#   docker build -f charts/rara/images/worker.Dockerfile \
#     --build-arg BASE_IMAGE=rara.local/debian:bookworm -t rara-worker .
#
# Why these choices:
# - The base is a Debian bookworm made on this machine (.ci/cluster/base-image.sh:
#   debootstrap + docker import): no image registry is reachable here, so no python:*-slim.
#   Debian's own python3 is 3.11, the version rara pins (no PPA needed).
# - Plain Dockerfile syntax (no `# syntax=` line, no RUN --mount): Debian's dockerd 20.10
#   builds with the legacy builder, and a BuildKit frontend would come from a registry.
# - Two stages: pip, its caches and python3-venv stay in the build stage; the runtime stage
#   gets the virtual environment only.
# - Non-root: uid/gid 10001 (the chart's securityContext sets runAsNonRoot and can check it).
ARG BASE_IMAGE=rara.local/debian:bookworm

FROM ${BASE_IMAGE} AS python
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 ca-certificates \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb /var/log/apt /var/log/dpkg.log

FROM python AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3-venv \
 && rm -rf /var/lib/apt/lists/*
# A TLS-intercepting egress (CI, corporate proxies) needs its CA to reach PyPI: passed as a
# build argument (PEM text), trusted in this build stage only, never in the runtime image.
ARG EXTRA_CA_CERTS=""
RUN if [ -n "${EXTRA_CA_CERTS}" ]; then \
      printf '%s\n' "${EXTRA_CA_CERTS}" > /usr/local/share/ca-certificates/build-extra.crt \
      && update-ca-certificates >/dev/null; fi
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_CERT=/etc/ssl/certs/ca-certificates.crt
RUN python3 -m venv /opt/rara && /opt/rara/bin/pip install --quiet pip==26.3
WORKDIR /src
# The rara namespace spans these folders (pyproject.toml [tool.setuptools] lists them).
COPY pyproject.toml README.md* ./
COPY rara/ rara/
COPY worker/ worker/
COPY executor/ executor/
COPY operator/ operator/
COPY db/ db/
COPY examples/ examples/
# The RAG demo's in-process handlers (corpus.collect, corpus.clean) are pure Python: its
# distribution (examples/rag, import name rara_rag) goes in WITHOUT its dependencies, so the
# ML stack stays in the executor image. Older trees kept the demo inside rara itself.
RUN /opt/rara/bin/pip install --quiet --no-compile ".[s3]" \
 && if [ -f examples/rag/pyproject.toml ]; then \
      /opt/rara/bin/pip install --quiet --no-compile --no-deps ./examples/rag; fi \
 && /opt/rara/bin/python -m compileall -q /opt/rara/lib \
 && /opt/rara/bin/pip uninstall --quiet -y pip

FROM python
LABEL org.opencontainers.image.title="rara" \
      org.opencontainers.image.description="rara worker, operator and migrations"
ENV PATH=/opt/rara/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
RUN groupadd --system --gid 10001 rara \
 && useradd --system --uid 10001 --gid rara --home-dir /home/rara --create-home rara
COPY --from=build /opt/rara /opt/rara
USER 10001:10001
WORKDIR /home/rara
ENTRYPOINT ["rara"]
CMD ["--help"]
