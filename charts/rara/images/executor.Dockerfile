# syntax=docker/dockerfile:1.7
# The GPU executor: rara with the `ml` extra on a CUDA runtime.
#   docker build -f charts/rara/images/executor.Dockerfile -t rara-executor .   (repository root)
# The build stage compiles nothing for the runtime stage to carry: it creates the virtual
# environment (pip caches, headers, build tools stay behind) on the same base image, so the
# interpreter the venv points at exists in the runtime stage too.

ARG CUDA_IMAGE=nvidia/cuda:12.4.1-runtime-ubuntu22.04

FROM ${CUDA_IMAGE} AS python
# Ubuntu 22.04 ships Python 3.10; deadsnakes carries maintained 3.11 builds for it.
RUN apt-get update \
 && apt-get install -y --no-install-recommends software-properties-common gpg-agent \
 && add-apt-repository -y ppa:deadsnakes/ppa \
 && apt-get update \
 && apt-get install -y --no-install-recommends python3.11 python3.11-venv ca-certificates \
 && apt-get purge -y --auto-remove software-properties-common gpg-agent \
 && rm -rf /var/lib/apt/lists/*

FROM python AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3.11 -m venv /opt/rara
WORKDIR /src
# The rara namespace spans these folders (pyproject.toml [tool.setuptools] lists them).
COPY pyproject.toml README.md* ./
COPY rara/ rara/
COPY worker/ worker/
COPY executor/ executor/
COPY operator/ operator/
COPY db/ db/
RUN /opt/rara/bin/pip install --no-compile ".[ml,s3]"

FROM python
LABEL org.opencontainers.image.title="rara-executor" \
      org.opencontainers.image.description="rara GPU executor (CUDA runtime, ml extra)"
ENV PATH=/opt/rara/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    HF_HOME=/home/rara/.cache/huggingface
RUN groupadd --system --gid 10001 rara \
 && useradd --system --uid 10001 --gid rara --home-dir /home/rara --create-home rara
COPY --from=build /opt/rara /opt/rara
USER 10001:10001
WORKDIR /home/rara
EXPOSE 50051 9100
ENTRYPOINT ["rara"]
CMD ["executor", "--listen", "0.0.0.0:50051"]
