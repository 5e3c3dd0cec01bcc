# The executor: rara with the ML stack (torch, transformers, peft, bm25s) and the RAG demo's
# plugins. Built by `make images` (.ci/cluster/images.sh), from the repository root:
#   docker build -f charts/rara/images/executor.Dockerfile \
#     --build-arg BASE_IMAGE=rara.local/debian:bookworm -t rara-executor .
#
# Why these choices (see also worker.Dockerfile):
# - Debian bookworm's python3 (3.11) on the locally made base: no CUDA base image and no PPA
#   (neither is reachable here). On a GPU node the NVIDIA container toolkit mounts the
#   driver; the CUDA user-space libraries come with torch's wheels.
# - torch from PyPI: for Linux x86_64, PyPI only has the CUDA build, and it does not import
#   without its nvidia-* libraries (measured: "libcublasLt.so.* not found"); the CPU-only
#   wheels live on download.pytorch.org, which is not reachable. So this image carries CUDA
#   torch (~4 GB of the image) and runs on CPU where there is no GPU. triton (~1 GB) is
#   removed: only torch.compile uses it, and nothing here compiles.
ARG BASE_IMAGE=rara.local/debian:bookworm

FROM ${BASE_IMAGE} AS python
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 ca-certificates \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb /var/log/apt /var/log/dpkg.log

FROM python AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3-venv \
 && rm -rf /var/lib/apt/lists/*
ARG EXTRA_CA_CERTS=""
RUN if [ -n "${EXTRA_CA_CERTS}" ]; then \
      printf '%s\n' "${EXTRA_CA_CERTS}" > /usr/local/share/ca-certificates/build-extra.crt \
      && update-ca-certificates >/dev/null; fi
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_CERT=/etc/ssl/certs/ca-certificates.crt
# pip in a venv of its own, installing into /opt/rara through --python (worker.Dockerfile).
RUN python3 -m venv /opt/pip && /opt/pip/bin/pip install --quiet pip==26.3 \
 && python3 -m venv --without-pip /opt/rara
WORKDIR /src

# The ML stack is a layer of its own (~5 GB), rebuilt only when a pyproject.toml changes: a
# change to rara's code rebuilds, pushes and pulls only the app layer (megabytes).
FROM build AS dependencies
COPY charts/rara/images/third_party.py ./
COPY pyproject.toml ./
COPY examples/rag/pyproject.toml examples/rag/
# The runtime's and the RAG demo's third-party pins; rara's own packages sit in /opt/rara-app
# (next stage), found by a .pth file.
RUN python3 third_party.py "pyproject.toml[s3]" examples/rag/pyproject.toml > requirements.txt \
 && /opt/pip/bin/pip --python /opt/rara/bin/python install --quiet --no-compile -r requirements.txt \
 && /opt/pip/bin/pip --python /opt/rara/bin/python uninstall --quiet -y triton \
 && /opt/rara/bin/python -c "import torch, transformers, peft, bm25s; print('torch', torch.__version__)" \
 && echo /opt/rara-app > /opt/rara/lib/python3.11/site-packages/rara-app.pth

FROM build AS app
COPY pyproject.toml README.md* ./
COPY rara/ rara/
COPY worker/ worker/
COPY executor/ executor/
COPY operator/ operator/
COPY db/ db/
COPY examples/ examples/
# rara and the RAG demo's plugins (examples/rag, import name rara_rag), without dependencies:
# those are the layer above.
RUN /opt/pip/bin/pip --python /opt/rara/bin/python install --quiet --no-compile --no-deps \
      --target /opt/rara-app . ./examples/rag

FROM python
LABEL org.opencontainers.image.title="rara-executor" \
      org.opencontainers.image.description="rara executor (ML stack; CUDA-capable torch, runs on CPU)"
ENV PATH=/opt/rara-app/bin:/opt/rara/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    HF_HOME=/home/rara/.cache/huggingface HF_HUB_OFFLINE=1
RUN groupadd --system --gid 10001 rara \
 && useradd --system --uid 10001 --gid rara --home-dir /home/rara --create-home rara
COPY --from=dependencies /opt/rara /opt/rara
COPY --from=app /opt/rara-app /opt/rara-app
USER 10001:10001
WORKDIR /home/rara
EXPOSE 50051 9100
ENTRYPOINT ["rara"]
CMD ["executor", "--listen", "0.0.0.0:50051"]
