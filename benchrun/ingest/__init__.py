"""Readers that turn other tools' outputs into benchrun metric rows.

A spec may run commands that do not speak Pipes (fio, nccl-tests, ``vllm bench serve``).
Their known outputs are read here into the same metric rows the built-in suites report
(:func:`benchrun.suites.result.metric`): ``{"name", "value", "unit", "direction", "case",
...join keys}``.

Use :func:`ingest_file`::

    rows = ingest_file("raw/r1_fio_r1_fio.json", "fio")

Kinds (each reader module exposes ``metrics_from_file(path) -> list[dict]``):

* ``fio`` — fio ``--output-format=json`` (:mod:`benchrun.ingest.fio`)
* ``nccl_tests`` — the stdout table of nccl-tests ``*_perf`` programs such as
  ``all_reduce_perf`` (:mod:`benchrun.ingest.nccl_tests`)
* ``vllm_bench`` — ``vllm bench serve`` result JSON (:mod:`benchrun.ingest.vllm_bench`)

Standard library (numpy for ``vllm_bench``, which shares the load generator's metric
definitions), so suites inside pods may use them.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError

READERS: dict[str, str] = {
    "fio": "benchrun.ingest.fio",
    "nccl_tests": "benchrun.ingest.nccl_tests",
    "vllm_bench": "benchrun.ingest.vllm_bench",
}


def ingest_file(path: str | os.PathLike[str], kind: str) -> list[dict[str, Any]]:
    """Metric rows read from ``path``, a ``kind`` output (one of :data:`READERS`).

    Raises BenchrunError naming the file when it is missing or not that tool's output, or
    naming the kind when no reader exists for it.
    """
    if kind not in READERS:
        raise BenchrunError(f"ingest kind {kind!r} is not known; use one of {', '.join(sorted(READERS))}")
    p = Path(path)
    if not p.is_file():
        raise BenchrunError(f"{p}: no such file to ingest as {kind}")
    try:
        module = importlib.import_module(READERS[kind])
    except ModuleNotFoundError as exc:
        raise BenchrunError(f"ingest kind {kind!r}: its reader {READERS[kind]} is not installed ({exc})") from None
    reader = getattr(module, "metrics_from_file", None)
    if reader is None:
        raise BenchrunError(f"ingest kind {kind!r}: {READERS[kind]} has no metrics_from_file(path)")
    return list(reader(p))
