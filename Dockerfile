# syntax=docker/dockerfile:1
# Two stages: one with torch exports the bundled models to ONNX; the runtime has ONNX Runtime (GPU build)
# and no torch.

# ---- build: import, export and check the bundled models --------------------------------------------
FROM python:3.11-slim AS models
# torch==2.13.0 from the default index is its CUDA build (several GB, only used here to export). A CPU
# wheel index can be given instead: --build-arg PIP_EXTRA_INDEX_URL=<index>.
ARG PIP_EXTRA_INDEX_URL=""
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY cli/ cli/
COPY modeldir/ modeldir/
COPY model/ model/
COPY service/ service/
COPY checkpoints/ checkpoints/
# The project pins what matters (torch==2.13.0) in pyproject.toml.
# hadolint ignore=DL3013
RUN pip install '.[export]' \
 && attnserve build --out /models

# ---- runtime ---------------------------------------------------------------------------------------
FROM nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04 AS runtime
ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# The distribution's Python, whatever its patch release: pinning it would break with each security update.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/attnserve
ENV PATH=/opt/attnserve/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md ./
COPY cli/ cli/
COPY modeldir/ modeldir/
COPY model/ model/
COPY service/ service/
# The serving dependencies only: onnxruntime-gpu, grpcio, tokenizers, numpy, prometheus-client, and the
# translation doors' sentencex (sentences), py3langid (detection) and language-data (names); no torch.
# hadolint ignore=DL3013
RUN pip install . && rm -rf /src
COPY --from=models /models /models

RUN useradd --system --uid 10001 --no-create-home attnserve
USER 10001
WORKDIR /home/attnserve
ENV ATTNSERVE_MODELS=/models/minilm,/models/numbers,/models/numbers-multilingual,/models/numbers-reranker,/models/numbers-language \
    ATTNSERVE_DEVICE=auto \
    ATTNSERVE_PORT=50051 \
    ATTNSERVE_METRICS_PORT=9464 \
    ATTNSERVE_HTTP_PORT=8080
# gRPC; the OpenAI-compatible HTTP API; HTTP for /metrics, /healthz, /readyz.
EXPOSE 50051 8080 9464
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
  CMD ["attnserve", "health", "--target", "localhost:50051"]
# SIGTERM drains (ATTNSERVE_DRAIN_SECONDS, default 30 s): give `docker stop` a longer timeout.
STOPSIGNAL SIGTERM
ENTRYPOINT ["attnserve", "serve"]
