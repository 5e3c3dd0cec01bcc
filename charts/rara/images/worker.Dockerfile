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
# - Build stages: pip (a venv of its own), its caches and python3-venv stay there; the runtime
#   stage gets the virtual environment of the dependencies (/opt/rara, one layer, rebuilt
#   only when a pyproject.toml changes) and rara's own packages (/opt/rara-app, a layer of a
#   few MB), so a code change moves megabytes (charts/rara/images/third_party.py).
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
# pip lives in a venv of its own and installs into /opt/rara through --python: the runtime's
# venv never holds pip, so no stage has to uninstall it.
RUN python3 -m venv /opt/pip && /opt/pip/bin/pip install --quiet pip==26.3 \
 && python3 -m venv --without-pip /opt/rara
WORKDIR /src

# Two layers in the image: the third-party dependencies (this stage; rebuilt only when a
# pyproject.toml changes) and rara's own packages (the next; megabytes). A code change then
# rebuilds, pushes and pulls only the second (.ci/cluster/images.sh, docs/cluster.md).
FROM build AS dependencies
COPY charts/rara/images/third_party.py ./
COPY pyproject.toml ./
COPY examples/rag/pyproject.toml examples/rag/
# rara's own packages sit in /opt/rara-app (next stage); the venv finds them by a .pth file.
RUN python3 third_party.py "pyproject.toml[s3]" > requirements.txt \
 && /opt/pip/bin/pip --python /opt/rara/bin/python install --quiet --no-compile -r requirements.txt \
 && /opt/rara/bin/python -m compileall -q /opt/rara/lib \
 && echo /opt/rara-app > /opt/rara/lib/python3.11/site-packages/rara-app.pth

FROM build AS app
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
# ML stack stays in the executor image.
RUN /opt/pip/bin/pip --python /opt/rara/bin/python install --quiet --no-compile --no-deps \
      --target /opt/rara-app . ./examples/rag \
 && /opt/rara/bin/python -m compileall -q /opt/rara-app

FROM python
LABEL org.opencontainers.image.title="rara" \
      org.opencontainers.image.description="rara worker, operator and migrations"
ENV PATH=/opt/rara-app/bin:/opt/rara/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
RUN groupadd --system --gid 10001 rara \
 && useradd --system --uid 10001 --gid rara --home-dir /home/rara --create-home rara
COPY --from=dependencies /opt/rara /opt/rara
COPY --from=app /opt/rara-app /opt/rara-app
USER 10001:10001
WORKDIR /home/rara
ENTRYPOINT ["rara"]
CMD ["--help"]
