# syntax=docker/dockerfile:1
# lmve API image: multi-stage, CPU-only torch, non-root, health-checked.
# Build:  docker build -t lmve .
# Train:  docker run --rm -v lmve-bundles:/bundles lmve lmve-train --out /bundles/run
# Serve:  docker run -p 8000:8000 -v lmve-bundles:/bundles:ro lmve

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# The CPU wheel index keeps several GB of CUDA libraries out of the image.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY constraints.txt ./
RUN pip install --index-url "${TORCH_INDEX_URL}" "torch==2.13.0"
COPY pyproject.toml README.md ./
COPY models ./models
COPY training ./training
COPY service ./service
RUN pip install -c constraints.txt . && python -c "import models, training, service"

FROM ${PYTHON_IMAGE} AS runtime
ENV PATH=/opt/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    LMVE_HOST=0.0.0.0 LMVE_PORT=8000 LMVE_BUNDLE=/bundles/run/bundle LMVE_TORCH_THREADS=1 \
    MPLCONFIGDIR=/tmp/matplotlib
COPY --from=build /opt/venv /opt/venv
RUN useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin lmve \
    && mkdir -p /bundles && chown lmve:lmve /bundles
USER 10001:10001
WORKDIR /home/lmve
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=2).status == 200 else 1)"]
STOPSIGNAL SIGTERM
CMD ["lmve-serve"]
