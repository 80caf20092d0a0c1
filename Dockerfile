# syntax=docker/dockerfile:1
# One benchrun image: the Dagster code location (gRPC code server), the run worker the
# K8sRunLauncher starts, and the suites' pods on GPU nodes (`python -m benchrun.suites.<name>`).
#
#   docker build -t REGISTRY/benchrun:0.1.0-cpu  --build-arg VARIANT=cpu  .
#   docker build -t REGISTRY/benchrun:0.1.0-cuda --build-arg VARIANT=cuda .
#
# Both variants start from the same Python base: PyTorch's CUDA wheels carry their own CUDA
# runtime (cuBLAS, NCCL, cuDNN as pip packages), so the GPU node needs only the driver and
# the NVIDIA container toolkit. Every Python dependency is pinned exactly in pyproject.toml;
# tests/test_deploy.py fails when a pin below drifts from it.

ARG PYTHON_VERSION=3.11
FROM python:${PYTHON_VERSION}-slim-bookworm

# cpu | cuda: which PyTorch wheel index torch comes from (same torch version in both).
ARG VARIANT=cpu
ARG TORCH_VERSION=2.13.0
ARG TORCH_CUDA=cu128
ARG PIP_VERSION=26.3

LABEL org.opencontainers.image.title="benchrun" \
      org.opencontainers.image.description="Declarative, Kubernetes-native benchmark service for AI systems, on Dagster" \
      org.opencontainers.image.licenses="Apache-2.0" \
      dev.aisp.benchrun.variant="${VARIANT}"

# fio: the storage suite; git: the spec-commit and canary sensors read the spec repository;
# tini: signals reach the code server and the suites (the run worker cancels them).
RUN apt-get update \
 && apt-get install -y --no-install-recommends fio git tini ca-certificates \
 && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    BENCHRUN_HOME=/var/lib/benchrun \
    DAGSTER_HOME=/opt/dagster/dagster_home

WORKDIR /opt/benchrun
COPY pyproject.toml README.md workspace.yaml dagster.yaml ./
COPY benchrun/ benchrun/
COPY bench_assets/ bench_assets/
COPY resources/ resources/
COPY sensors/ sensors/
COPY schedules/ schedules/
COPY specs/ specs/

# torch first, from the variant's wheel index; then benchrun with the exact pins of
# pyproject.toml (pip refuses a torch other than the one installed, so the pin holds).
RUN python -m pip install "pip==${PIP_VERSION}" \
 && if [ "${VARIANT}" = "cuda" ]; then index="https://download.pytorch.org/whl/${TORCH_CUDA}"; \
    elif [ "${VARIANT}" = "cpu" ]; then index="https://download.pytorch.org/whl/cpu"; \
    else echo "VARIANT must be cpu or cuda, not ${VARIANT}" >&2; exit 2; fi \
 && python -m pip install --index-url "${index}" "torch==${TORCH_VERSION}" \
 && python -m pip install ".[torch]" \
 && python -m pip check

# An unprivileged user; the chart's and the Jobs' securityContext run as this uid.
RUN useradd --uid 10001 --user-group --home-dir /var/lib/benchrun --create-home benchrun \
 && mkdir -p /opt/dagster/dagster_home \
 && chown benchrun:benchrun /opt/dagster/dagster_home
USER 10001

EXPOSE 3030
ENTRYPOINT ["/usr/bin/tini", "--"]
# The Dagster code location (the Helm chart passes the same arguments as codeServerArgs).
CMD ["dagster", "code-server", "start", "--host", "0.0.0.0", "--port", "3030", "--module-name", "bench_assets.definitions", "--attribute", "defs"]
