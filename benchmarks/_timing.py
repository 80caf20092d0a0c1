"""Shared by the benchmark scripts: repeat a call and report its median and worst wall time."""

from __future__ import annotations

import statistics
import time
from typing import Callable


def timed(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """(median, max) seconds of ``repeats`` calls of ``fn``."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), max(times)
