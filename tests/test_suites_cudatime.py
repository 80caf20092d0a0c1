"""K back-to-back CUDA calls between one pair of events: the CPU-side choice of K, with a
fake span (no GPU here; the CUDA span itself runs only in tests/test_gpu_check.py)."""

from __future__ import annotations

import pytest

from benchrun.suites._cudatime import MAX_CALLS, MIN_SPAN_S, PROBE_CALLS, BatchedTimer, calls_per_span


@pytest.mark.parametrize(("per_call_s", "k"), [
    (2e-3, 1),          # a call that lasts a span already
    (1e-3, 1),
    (3e-4, 4),          # ceil(1 ms / 0.3 ms)
    (1e-5, 100),
    (2.5e-6, 400),
    (1e-12, MAX_CALLS),  # too short to measure: the ceiling
    (0.0, MAX_CALLS),
    (float("nan"), MAX_CALLS),
])
def test_k_is_the_fewest_calls_that_last_a_millisecond(per_call_s: float, k: int) -> None:
    assert MIN_SPAN_S == 1e-3
    assert calls_per_span(per_call_s) == k
    if k < MAX_CALLS:
        assert k * per_call_s >= MIN_SPAN_S * (1 - 1e-9)


class FakeGpu:
    """A span as CUDA events would see it when the host enqueues faster than the kernels run: a
    fixed latency between the start event and the first kernel, paid once per span, then the
    kernels back to back (a single-call pair of events pays it on every call)."""

    def __init__(self, kernel_s: float, gap_s: float) -> None:
        self.kernel_s, self.gap_s = kernel_s, gap_s
        self.spans: list[int] = []

    def span(self, fn, k: int) -> float:
        for _ in range(k):
            fn()
        self.spans.append(k)
        # back to back the GPU never idles once the queue is ahead: the gap is paid once
        return self.gap_s + k * self.kernel_s


def test_the_timer_warms_probes_then_times_k_calls_and_divides() -> None:
    gpu = FakeGpu(kernel_s=5e-6, gap_s=20e-6)  # a 5 us kernel behind a 20 us launch gap
    calls = []
    timer = BatchedTimer(gpu.span)
    timer.time("copy", lambda: calls.append(1))  # the warm-up: one call, then the probe
    assert gpu.spans == [1, PROBE_CALLS]
    per_probe_call = (20e-6 + PROBE_CALLS * 5e-6) / PROBE_CALLS  # 7.5 us
    k = timer.calls["copy"]
    assert k == calls_per_span(per_probe_call) == 134
    t = timer.time("copy", lambda: calls.append(1))
    assert gpu.spans[-1] == k and len(calls) == 1 + PROBE_CALLS + k
    assert t == pytest.approx(5e-6 + 20e-6 / k)  # one call's time: the gap spread over K calls
    assert abs(t - 5e-6) < 0.04 * 5e-6  # where a single-call pair of events said 25 us
    # each name gets its own K; a long kernel is timed one call at a time
    slow = FakeGpu(kernel_s=4e-3, gap_s=20e-6)
    timer2 = BatchedTimer(slow.span)
    timer2.time("gemm", lambda: None)
    assert timer2.calls == {"gemm": 1}
    assert timer2.time("gemm", lambda: None) == pytest.approx(4e-3 + 20e-6)


@pytest.mark.slow
def test_repeating_each_stream_kernel_k_times_keeps_streams_validation() -> None:
    # membw's CUDA loop (the warm-up pass probes, then K calls a timing) on torch CPU tensors with
    # a host-clock span: a kernel repeated back to back leaves the values one call leaves
    pytest.importorskip("torch")
    import time

    from benchrun.suites.membw import KERNELS, _check, _torch_kernels

    def span(fn, k: int) -> float:
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        return time.perf_counter() - t0

    kernels, sync, arrays = _torch_kernels(4096, "float32", device="cpu")
    timer = BatchedTimer(span, min_span_s=1e-4)
    iterations = 3
    for _ in range(iterations + 1):
        for name in KERNELS:
            timer.time(name, kernels[name])
    sync()
    assert set(timer.calls) == set(KERNELS) and all(k >= 1 for k in timer.calls.values())
    _check(tuple(x.numpy() for x in arrays), iterations, "float32")


class LaunchBoundGpu:
    """The host needs ``launch_s`` to enqueue a call that runs ``kernel_s`` < ``launch_s``: the
    GPU waits between calls, so the span is the host's pace, not the kernels'."""

    def __init__(self, kernel_s: float, launch_s: float) -> None:
        self.kernel_s, self.launch_s = kernel_s, launch_s
        self.last_host_s = None

    def span(self, fn, k: int) -> float:
        self.last_host_s = k * self.launch_s
        return k * self.launch_s + self.kernel_s


def test_a_span_the_hosts_enqueuing_paced_is_named_launch_bound() -> None:
    # batching K calls removes launch gaps only while the host is ahead of the GPU: a 5 us kernel
    # behind a 20 us launch measures about 20 us a call, and the suites must say so
    bound = LaunchBoundGpu(kernel_s=5e-6, launch_s=20e-6)
    timer = BatchedTimer(_with_host(bound))
    timer.time("copy", lambda: None)
    t = timer.time("copy", lambda: None)
    assert t == pytest.approx(20e-6, rel=0.01) and timer.launch_bound == ["copy"]
    ahead = FakeGpu(kernel_s=5e-6, gap_s=20e-6)
    timer2 = BatchedTimer(_with_host(ahead, host_per_call_s=1e-6))
    timer2.time("copy", lambda: None)
    timer2.time("copy", lambda: None)
    assert timer2.launch_bound == []


def _with_host(gpu, host_per_call_s: float | None = None):
    """A span function carrying ``last_host_s`` as :func:`benchrun.suites._cudatime.cuda_span` does."""
    def span(fn, k: int) -> float:
        device = gpu.span(fn, k)
        span.last_host_s = k * host_per_call_s if host_per_call_s is not None else gpu.last_host_s
        return device
    span.last_host_s = None
    return span
