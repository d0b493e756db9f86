# syntax=docker/dockerfile:1
# lmve images, from one Dockerfile:
#   api      (default) serves bundles: numpy, scikit-learn, FastAPI; no torch
#   trainer  lmve-train, lmve-evaluate, lmve-predict, lmve-convert-bundle: the api image plus CPU torch and the train extra
# Build:  docker build -t lmve:api .        docker build --target trainer -t lmve:trainer .
# Train:  docker run --rm -v lmve-bundles:/bundles lmve:trainer lmve-train --out /bundles/run
# Serve:  docker run -p 8000:8000 -v lmve-bundles:/bundles:ro lmve:api

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build-api
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY models ./models
COPY training ./training
COPY service ./service
# numba compiles the neighbour search's loops here, once, into a cache the runtime reads (a CPU other than
# the build's compiles it again when a bundle loads, before the server is ready)
ENV NUMBA_CACHE_DIR=/opt/numba-cache
RUN pip install -c constraints.txt ".[postgres]" && python -c "import models, service, psycopg, psycopg_pool" \
    && python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)" \
    && python -c "from models.centres.search import compile_loops; compile_loops()"

FROM build-api AS build-trainer
# The CPU wheel index keeps several GB of CUDA libraries out of the image.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN pip install --index-url "${TORCH_INDEX_URL}" "torch==2.13.0" \
    && pip install -c constraints.txt ".[train]" && python -c "import models, training, service, torch"

FROM ${PYTHON_IMAGE} AS runtime-base
ENV PATH=/opt/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 MPLCONFIGDIR=/tmp/matplotlib
RUN useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin lmve \
    && mkdir -p /bundles /state /store && chown lmve:lmve /bundles /state /store
WORKDIR /home/lmve

FROM runtime-base AS trainer
ENV NUMBA_CACHE_DIR=/opt/numba-cache
COPY --from=build-trainer /opt/venv /opt/venv
COPY --from=build-trainer --chown=10001:10001 /opt/numba-cache /opt/numba-cache
USER 10001:10001
CMD ["lmve-train", "--out", "/bundles/run", "--quiet"]

FROM runtime-base AS api
ENV LMVE_HOST=0.0.0.0 LMVE_PORT=8000 LMVE_GRPC_PORT=8081 LMVE_BUNDLE=/bundles/run/bundle LMVE_COMPUTE_THREADS=1 \
    NUMBA_CACHE_DIR=/opt/numba-cache
COPY --from=build-api /opt/venv /opt/venv
COPY --from=build-api --chown=10001:10001 /opt/numba-cache /opt/numba-cache
USER 10001:10001
EXPOSE 8000 8081
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=2).status == 200 else 1)"]
STOPSIGNAL SIGTERM
CMD ["lmve-serve"]
