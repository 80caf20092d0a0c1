"""The ``membw`` suite: STREAM copy/scale/add/triad memory bandwidth (numpy on CPU, torch on CUDA).

Parameters:
    elements    array length (default 20,000,000; STREAM wants each array well past the
                last-level cache)
    iterations  timed repetitions of the four kernels (default 10; the first pass is a
                warm-up and not timed, as in STREAM); at most 30 in float32, 250 in float64
                (the values grow 15x a pass)
    dtype       float64 | float32 (default float64, as STREAM)
    device      auto | cpu | cuda (default auto)

Bytes are counted as STREAM counts them: copy and scale move 2 arrays per element, add
and triad 3. On CPU the kernels write into preallocated arrays (``out=``) so no
allocation is timed. On CUDA each kernel is timed with a pair of CUDA events around it (device
time: launch gaps and the host's synchronise are not counted), the arrays in device memory
(HBM; size them far past the L2, e.g. 2**28 float32 = 1 GiB each). numpy has no fused multiply-add, so its triad is two passes and
moves 5 arrays per element while being credited with 3 (the reported triad figure is a
lower bound on the traffic; ``context.triad_passes`` says so). torch's
``add(b, c, alpha=q)`` is one pass.

Metrics (``case`` = kernel): ``bandwidth_best_gb_per_s`` (the best iteration, STREAM's
figure) and ``bandwidth_median_gb_per_s`` (GB = 1e9 bytes). Per-iteration times go to
``raw/<run_id>_membw_r<k>_iterations.json``.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from benchrun.suites._common import (
    ParamError,
    check_known,
    choice_param,
    cpu_model,
    cuda_available,
    int_param,
    percentile,
    torch_present,
    usable_cpus,
)
from benchrun.suites._runtime import SuiteContext, Unavailable, main
from benchrun.fsio import atomic_write_json

# the parameters the suite takes (checked when it starts, and by `benchrun validate`)
PARAMETERS = ("elements", "iterations", "dtype", "device")

KERNELS = ("copy", "scale", "add", "triad")
ARRAYS_MOVED = {"copy": 2, "scale": 2, "add": 3, "triad": 3}  # STREAM's accounting
SCALAR = 3.0
# a[] grows 15x a pass (c = a; b = 3c; c = a + b; a = b + 3c); the warm-up pass counts too
MAX_ITERATIONS = {"float32": 30, "float64": 250}


def _numpy_kernels(n: int, dtype: str) -> tuple[dict[str, Callable[[], None]], Callable[[], None], Any]:
    a = np.full(n, 1.0, dtype=dtype)
    b = np.full(n, 2.0, dtype=dtype)
    c = np.zeros(n, dtype=dtype)

    def triad() -> None:
        np.multiply(c, SCALAR, out=a)
        np.add(a, b, out=a)

    kernels = {
        "copy": lambda: np.copyto(c, a),
        "scale": lambda: np.multiply(c, SCALAR, out=b),
        "add": lambda: np.add(a, b, out=c),
        "triad": triad,
    }
    return kernels, (lambda: None), (a, b, c)


def _perf_counter_timer(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _cuda_event_timer() -> Callable[[Callable[[], None]], float]:
    """Seconds of device time one kernel takes, between two CUDA events on the current stream."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(fn: Callable[[], None]) -> float:
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    return timed


def _torch_kernels(n: int, dtype: str, device: str = "cuda") -> tuple[dict[str, Callable[[], None]], Callable[[], None], Any]:
    """The four kernels on torch tensors (``device`` a parameter only so they can be checked on CPU)."""
    import torch

    tdtype = getattr(torch, dtype)
    a = torch.full((n,), 1.0, dtype=tdtype, device=device)
    b = torch.full((n,), 2.0, dtype=tdtype, device=device)
    c = torch.zeros((n,), dtype=tdtype, device=device)
    kernels = {
        "copy": lambda: c.copy_(a),
        "scale": lambda: torch.mul(c, SCALAR, out=b),
        "add": lambda: torch.add(a, b, out=c),
        "triad": lambda: torch.add(b, c, alpha=SCALAR, out=a),
    }
    return kernels, (torch.cuda.synchronize if device == "cuda" else (lambda: None)), (a, b, c)


def _check(arrays: Any, iterations: int, dtype: str) -> None:
    """STREAM's validation: replay the kernels on scalars and compare (catches a skipped kernel)."""
    aj, bj, cj = 1.0, 2.0, 0.0
    for _ in range(iterations + 1):
        cj = aj
        bj = SCALAR * cj
        cj = aj + bj
        aj = bj + SCALAR * cj
    got = [float(x[len(x) // 2]) for x in arrays]
    for name, want, have in zip("abc", (aj, bj, cj), got):
        if not abs(have - want) <= (1e-6 if dtype == "float64" else 1e-3) * abs(want):
            raise RuntimeError(f"membw validation failed: {name}[mid]={have!r}, expected {want!r}")


def run(ctx: SuiteContext) -> None:
    """Time the four STREAM kernels; report best and median GB/s per kernel."""
    check_known(ctx, PARAMETERS)
    n = int_param(ctx, "elements", 20_000_000, minimum=1024, maximum=4_000_000_000)
    iterations = int_param(ctx, "iterations", 10, minimum=1, maximum=100_000)
    dtype = choice_param(ctx, "dtype", "float64", ("float64", "float32"))
    if iterations > MAX_ITERATIONS[dtype]:
        raise ParamError(f"parameter iterations={iterations}: at most {MAX_ITERATIONS[dtype]} with dtype {dtype} "
                         "(the STREAM values grow 15x a pass and would overflow; validation would then fail)")
    device = choice_param(ctx, "device", "auto", ("auto", "cpu", "cuda"))

    on_cuda = cuda_available() if device in ("auto", "cuda") else False
    if device == "cuda" and not on_cuda:
        raise Unavailable("no CUDA device" if torch_present() else "torch not installed (CUDA membw needs torch)")
    itemsize = np.dtype(dtype).itemsize
    if on_cuda:
        import torch

        kernels, sync, arrays = _torch_kernels(n, dtype)
        props = torch.cuda.get_device_properties(0)
        timed = _cuda_event_timer()
        ctx.context.update({"device": "cuda", "backend": f"torch {torch.__version__}", "gpu_name": props.name,
                            "memory": "device (cudaMalloc through torch's caching allocator)",
                            "triad_passes": 1, "timer": "cuda events around each kernel"})
    else:
        kernels, sync, arrays = _numpy_kernels(n, dtype)
        timed = _perf_counter_timer
        ctx.context.update({"device": "cpu", "backend": f"numpy {np.__version__} ufuncs with out=",
                            "cpu_model": cpu_model(), "usable_cpus": usable_cpus(), "triad_passes": 2,
                            "timer": "time.perf_counter"})
    ctx.context.update({"elements": n, "dtype": dtype, "array_mib": n * itemsize / 2**20,
                        "bytes_counted_as": "STREAM (copy/scale 2 arrays, add/triad 3 arrays per element)",
                        "warmup_passes": 1})

    times: dict[str, list[float]] = {k: [] for k in KERNELS}
    for it in range(iterations + 1):
        for name in KERNELS:
            seconds = timed(kernels[name])
            if it > 0:
                times[name].append(seconds)
    sync()
    arrays = tuple(x.cpu().numpy() if hasattr(x, "cpu") else x for x in arrays)
    _check(arrays, iterations, dtype)

    for name in KERNELS:
        nbytes = ARRAYS_MOVED[name] * itemsize * n
        best = nbytes / min(times[name]) / 1e9
        median = nbytes / percentile(times[name], 50) / 1e9
        ctx.add_metric("bandwidth_best_gb_per_s", best, "GB/s", "higher", case=name)
        ctx.add_metric("bandwidth_median_gb_per_s", median, "GB/s", "higher", case=name)
        ctx.log(f"membw {name}: best {best:.2f} GB/s, median {median:.2f} GB/s")
    path = atomic_write_json(ctx.raw_file("iterations", "json"), {"unit": "s", "times": times})
    ctx.samples["iterations"] = str(path.relative_to(ctx.run_dir))


if __name__ == "__main__":
    main(run)
