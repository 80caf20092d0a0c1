"""Timing short CUDA kernels: K back-to-back calls between one pair of CUDA events.

A pair of events around a single call of a kernel that runs for microseconds measures the
launch gap as much as the kernel (the events and the kernel are enqueued one by one by the
host). Enqueuing K calls back to back between one pair of events keeps the GPU busy for the
whole span, and the span / K is the device time of one call. K is chosen, after a warm-up,
from a probe of :data:`PROBE_CALLS` calls, so that a timed span lasts at least
:data:`MIN_SPAN_S` (about 1 ms); a kernel that already runs that long gets K = 1.

This removes the launch gaps only while the host enqueues calls faster than the GPU runs them.
When a call is shorter than its launch (Python plus ``cudaLaunchKernel``, ~5-20 us), the GPU
waits between calls and span / K is the host's launch rate, not device time: each span's host
enqueue time is measured too, and a kernel whose enqueue took ≥ ``LAUNCH_BOUND_SHARE`` of its
device span is named in :attr:`BatchedTimer.launch_bound` (the suites record it as
``context.launch_bound``: such a time is an upper bound of the kernel's). A CUDA graph of the K
calls would remove the launches; not done (no GPU has run this code yet).

The selection (:func:`calls_per_span`, :class:`BatchedTimer`) is plain Python, checked on CPU
with a fake span; :func:`cuda_span` is the CUDA part. torch is imported only there.
"""

from __future__ import annotations

import math
from typing import Callable

MIN_SPAN_S = 1e-3  # a timed span of at least ~1 ms
PROBE_CALLS = 8  # calls timed together to estimate one call's device time
MAX_CALLS = 10_000  # K's ceiling (a kernel of < 0.1 us, or a probe that read 0)
LAUNCH_BOUND_SHARE = 0.9  # host enqueue time / device span at or above which a span is launch-bound

# span(fn, k): seconds for k back-to-back calls of fn, all finished
Span = Callable[[Callable[[], object], int], float]


def calls_per_span(per_call_s: float, min_span_s: float = MIN_SPAN_S, max_calls: int = MAX_CALLS) -> int:
    """K: the fewest back-to-back calls of ``per_call_s`` each that last at least ``min_span_s``
    (1 for a call that long already; ``max_calls`` for a call too short to measure)."""
    if not per_call_s > 0 or not math.isfinite(per_call_s):
        return max_calls
    return max(1, min(max_calls, math.ceil(min_span_s / per_call_s - 1e-9)))


class BatchedTimer:
    """Seconds per call of each named kernel, from spans of K back-to-back calls.

    The first :meth:`time` of a name is its warm-up: one call, then a probe of
    :data:`PROBE_CALLS` calls that sets the name's K (in :attr:`calls`); it returns the
    probe's seconds per call, for the caller to discard as it discards any warm-up.
    Later calls return span(K) / K.
    """

    def __init__(self, span: Span, min_span_s: float = MIN_SPAN_S, probe_calls: int = PROBE_CALLS) -> None:
        self._span = span
        self._min_span_s = min_span_s
        self._probe_calls = probe_calls
        self.calls: dict[str, int] = {}
        self.launch_bound: list[str] = []  # kernels whose spans the host's enqueuing paced (a list: JSON)

    def _timed(self, name: str, fn: Callable[[], object], k: int) -> float:
        device = self._span(fn, k)
        host = getattr(self._span, "last_host_s", None)
        if host is not None and device > 0 and host >= LAUNCH_BOUND_SHARE * device and name not in self.launch_bound:
            self.launch_bound.append(name)
        return device

    def warm(self, name: str, fn: Callable[[], object]) -> float:
        self._span(fn, 1)  # lazy initialisation (library handles, allocator) stays out of the probe
        per_call = self._timed(name, fn, self._probe_calls) / self._probe_calls
        self.calls[name] = calls_per_span(per_call, self._min_span_s)
        return per_call

    def time(self, name: str, fn: Callable[[], object]) -> float:
        if name not in self.calls:
            return self.warm(name, fn)
        k = self.calls[name]
        return self._timed(name, fn, k) / k


def cuda_span() -> Span:
    """span(fn, k) on the current CUDA stream: synchronise, record an event, enqueue k calls,
    record an event, wait for it; the device time between the events. ``span.last_host_s``: the
    host's time to enqueue them (see the module docstring: launch-bound spans)."""
    import time

    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def span(fn: Callable[[], object], k: int) -> float:
        torch.cuda.synchronize()
        start.record()
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        span.last_host_s = time.perf_counter() - t0  # type: ignore[attr-defined]
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    span.last_host_s = None  # type: ignore[attr-defined]
    return span
