#!/usr/bin/env bash
# The GPU check (issue 25): every CUDA path benchrun has, on one GPU, in one command.
#
#   bash benchmarks/gpu/check.sh             # on the device machine (one H200): the whole check
#   bash benchmarks/gpu/check.sh --dry-run   # anywhere: every step that needs no CUDA, then stop
#
# Output (summary.json, check.log, run.tar.gz, report.html, nvml_readings.json) goes to $OUT,
# or to --out DIR, else a temporary directory; the summary is printed at the end.
#
# What it installs, and why. The device machine starts bare and reaches no registry, but its
# image already has a CUDA torch (2.11.0+cu130 under /opt/torch/.venv/bin/python3, seen
# 2026-10/11) with numpy, pandas, pyarrow, scipy, matplotlib, psutil, pyyaml, rich, typer,
# nvidia-ml-py and friends (/work/.library/device/KINDS.md). torch is NOT installed here:
# the CUDA wheel cannot travel (torch 2.11.0 cp312 manylinux_2_28_x86_64 is 506.1 MiB, and its
# Linux CUDA dependencies another 943.7 MiB (cuDNN 349.1, NCCL 187.4, triton 179.5, cuSPARSELt
# 162.0, NVSHMEM 57.6, cuda-bindings 8.0) plus 1133.8 MiB of cuda-toolkit extras (cuBLAS 403.5,
# cuFFT 204.2, cuSOLVER 191.6, cuSPARSE 139.2, NVRTC 86.0, ...): about 2.5 GiB in all, against
# 64 MiB a device call may carry; torch 2.13.0, the project's CPU pin, is 502.2 MiB + the same
# order. Sizes read 2026-12-02 from PyPI's simple JSON API (file sizes, no download:
# benchmarks/README.md, "GPU check"). What benchrun needs and the image lacks (dagster and its
# integrations, duckdb, pydantic, ruamel.yaml, sqlalchemy, alembic, ...) travels as the wheels
# that benchmarks/gpu/wheels.sh fetches beforehand into benchmarks/gpu/wheels/ (git-ignored;
# name it in the device call's `carry`); here they are installed with pip --no-index --no-deps
# into /tmp/benchrun-site (about 20-40 s; nothing is downloaded) and put on PYTHONPATH after
# the checkout. Without that folder, or on another Python than 3.12 x86-64 (this machine's venv,
# CI), nothing is installed.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"

# The interpreter: $PYTHON, else the checkout's venv (this machine), else python3 (the device's,
# the one that holds torch).
py="${PYTHON:-}"
if [ -z "$py" ]; then
  if [ -x "$root/.venv/bin/python" ]; then py="$root/.venv/bin/python"; else py="$(command -v python3)"; fi
fi

site=""
if [ -d "$here/wheels" ] && compgen -G "$here/wheels/*.whl" >/dev/null \
   && "$py" -c 'import platform, sys; sys.exit(sys.version_info[:2] != (3, 12) or platform.machine() != "x86_64")'; then
  site="${BENCHRUN_GPU_SITE:-/tmp/benchrun-site}"
  start=$(date +%s)
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" "$here"/wheels/*.whl
  export BENCHRUN_GPU_SETUP_S=$(( $(date +%s) - start ))
  echo "installed $(ls "$here"/wheels/*.whl | wc -l) carried wheels into $site in ${BENCHRUN_GPU_SETUP_S} s"
elif [ -d "$here/wheels" ]; then
  echo "not installing benchmarks/gpu/wheels: they are for CPython 3.12 on x86-64, $py is not"
fi

export PYTHONPATH="$root${site:+:$site}${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
exec "$py" "$here/check.py" "$@"
