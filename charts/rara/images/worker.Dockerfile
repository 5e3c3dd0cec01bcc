# syntax=docker/dockerfile:1.7
# rara without the ML extras: the image of the worker, the operator and the migration Job.
#   docker build -f charts/rara/images/worker.Dockerfile -t rara-worker .   (repository root)
# Two stages: the build stage has pip's caches and build tools; the runtime stage gets only
# the virtual environment.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/rara
WORKDIR /src
# The rara namespace spans these folders (pyproject.toml [tool.setuptools] lists them).
COPY pyproject.toml README.md* ./
COPY rara/ rara/
COPY worker/ worker/
COPY executor/ executor/
COPY operator/ operator/
COPY db/ db/
RUN /opt/rara/bin/pip install --no-compile . \
 && /opt/rara/bin/python -m compileall -q /opt/rara/lib

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="rara" \
      org.opencontainers.image.description="rara worker, operator and migrations"
ENV PATH=/opt/rara/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# A fixed numeric uid: the chart's securityContext (runAsNonRoot) can verify it.
RUN groupadd --system --gid 10001 rara \
 && useradd --system --uid 10001 --gid rara --home-dir /home/rara --create-home rara
COPY --from=build /opt/rara /opt/rara
USER 10001:10001
WORKDIR /home/rara
ENTRYPOINT ["rara"]
CMD ["--help"]
