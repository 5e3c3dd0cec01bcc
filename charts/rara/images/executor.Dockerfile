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
RUN python3 -m venv /opt/rara && /opt/rara/bin/pip install --quiet pip==26.3
WORKDIR /src
# The heavy, slow-changing part first (its own layer, reused while only rara's code changes):
# the ML stack at the versions pyproject.toml pins in its `ml` extra (if it still has one;
# otherwise examples/rag brings the same pins in the last step).
COPY pyproject.toml ./
RUN /opt/rara/bin/python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"].get("optional-dependencies", {}).get("ml", [])))' \
      > /tmp/ml-requirements.txt \
 && if grep -q . /tmp/ml-requirements.txt; then \
      /opt/rara/bin/pip install --quiet --no-compile -r /tmp/ml-requirements.txt; fi
COPY README.md* ./
COPY rara/ rara/
COPY worker/ worker/
COPY executor/ executor/
COPY operator/ operator/
COPY db/ db/
COPY examples/ examples/
# The RAG demo's plugins: its own distribution (examples/rag, import name rara_rag) where the
# tree has it, else they ship inside rara (older trees).
RUN /opt/rara/bin/pip install --quiet --no-compile ".[ml,s3]" \
 && if [ -f examples/rag/pyproject.toml ]; then \
      /opt/rara/bin/pip install --quiet --no-compile ./examples/rag; fi \
 && /opt/rara/bin/pip uninstall --quiet -y triton pip \
 && /opt/rara/bin/python -c "import torch, transformers, peft, bm25s; print('torch', torch.__version__)"

FROM python
LABEL org.opencontainers.image.title="rara-executor" \
      org.opencontainers.image.description="rara executor (ML stack; CUDA-capable torch, runs on CPU)"
ENV PATH=/opt/rara/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    HF_HOME=/home/rara/.cache/huggingface HF_HUB_OFFLINE=1
RUN groupadd --system --gid 10001 rara \
 && useradd --system --uid 10001 --gid rara --home-dir /home/rara --create-home rara
COPY --from=build /opt/rara /opt/rara
USER 10001:10001
WORKDIR /home/rara
EXPOSE 50051 9100
ENTRYPOINT ["rara"]
CMD ["executor", "--listen", "0.0.0.0:50051"]
