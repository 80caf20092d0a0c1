"""The ``membw`` suite: STREAM copy/scale/add/triad memory bandwidth (numpy on CPU, torch on CUDA).

Parameters:
    elements    array length (default 20,000,000, and on CUDA at least 4x the GPU's L2 from the
                device's properties, e.g. 26,214,400 float64 on an H100's 50 MiB; STREAM wants
                each array well past the last-level cache)
    iterations  timed repetitions of the four kernels (default 10; the first pass is a
                warm-up and not timed, as in STREAM); at most 30 in float32, 250 in float64
                (the values grow 15x a pass)
    dtype       float64 | float32 (default float64, as STREAM)
    device      auto | cpu | cuda (default auto)
    threads     CPU only: threads the kernels are split across (default: the CPUs this
                process may use, ``os.sched_getaffinity``; at most elements / 1024). One
                thread measures what one core can pull, not the machine's bandwidth.

Bytes are counted as STREAM counts them: copy and scale move 2 arrays per element, add
and triad 3. On CPU the kernels write into preallocated arrays (``out=``) so no
allocation is timed; each kernel is cut into ``threads`` contiguous chunks, one per thread,
started together (the threads are made before any timing; numpy releases the GIL in large
ufuncs). A kernel's time runs from releasing the threads to the last chunk's end and is
credited with the whole arrays' bytes (``context.threads``; the case is
``<kernel>,threads=<n>``). On CUDA each timing is K back-to-back calls of a kernel between one pair of CUDA
events, divided by K (device time; K is chosen in the warm-up pass so that a span lasts at
least ~1 ms, and is 1 for arrays that big already; ``context.calls_per_timing`` gives K per
kernel). Repeating a kernel leaves the STREAM values as one call does, so the validation
holds. The arrays are in device memory (HBM; size them far past the L2, e.g. 2**28 float32
= 1 GiB each). numpy has no fused multiply-add, so its triad is two passes and
moves 5 arrays per element while being credited with 3 (the reported triad figure is a
lower bound on the traffic; ``context.triad_passes`` says so). torch's
``add(b, c, alpha=q)`` is one pass.

STREAM's rule: each array at least 4x the total last-level cache, or part of what is timed is
cache. On CPU the suite reads the LLC (``/sys/devices/system/cpu/cpu*/cache/index*``, the
highest level, summed over the distinct caches by their shared CPU lists) into
``context.llc``, and sets ``context.verdict`` ``valid`` | ``invalid`` (``verdict_reasons``
names the array size, 4x the LLC and the ``elements`` that would meet it; null with the
reason where the LLC cannot be read). The default 20M float64 (152.6 MiB per array) is
under the rule on hosts with more than 38 MiB of LLC: set ``elements`` there.

Metrics (``case`` = kernel on CUDA, ``<kernel>,threads=<n>`` on CPU): ``bandwidth_best_gb_per_s`` (the best iteration, STREAM's
figure) and ``bandwidth_median_gb_per_s`` (GB = 1e9 bytes). Per-iteration times go to
``raw/<run_id>_membw_r<k>_iterations.json``.
"""

from __future__ import annotations

import glob
import os
import time
import threading
from typing import Any, Callable, NamedTuple

import numpy as np

from benchrun.suites._common import (
    ParamError,
    Params,
    check_known,
    choice_param,
    cpu_model,
    cuda_available,
    int_param,
    percentile,
    torch_present,
    usable_cpus,
)
from benchrun.suites._cudatime import MIN_SPAN_S, BatchedTimer, cuda_span
from benchrun.suites._runtime import SuiteContext, Unavailable, main
from benchrun.fsio import atomic_write_json

# the parameters the suite takes (checked when it starts, and by `benchrun validate`)
PARAMETERS = ("elements", "iterations", "dtype", "device", "threads")
# the metrics the suite may report (`benchrun validate` checks a primary names one; reporting another fails)
METRICS = ("bandwidth_best_gb_per_s", "bandwidth_median_gb_per_s")

KERNELS = ("copy", "scale", "add", "triad")
ARRAYS_MOVED = {"copy": 2, "scale": 2, "add": 3, "triad": 3}  # STREAM's accounting
SCALAR = 3.0
# a[] grows 15x a pass (c = a; b = 3c; c = a + b; a = b + 3c); the warm-up pass counts too
MAX_ITERATIONS = {"float32": 30, "float64": 250}


CPU_SYSFS = "/sys/devices/system/cpu"  # where the cache sizes are read
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def _sysfs(directory: str, name: str) -> str:
    with open(os.path.join(directory, name), encoding="ascii") as fh:
        return fh.read().strip()


def last_level_cache(root: str | None = None) -> dict[str, Any] | None:
    """The last-level cache: the highest cache level sysfs lists (data or unified), its size
    summed over the distinct caches (one per shared CPU list: a socket's L3 counted once, every
    socket counted); None where sysfs shows none."""
    root = root or CPU_SYSFS
    found: dict[tuple[int, str], int] = {}
    for index in glob.glob(os.path.join(root, "cpu[0-9]*", "cache", "index[0-9]*")):
        try:
            if _sysfs(index, "type") == "Instruction":
                continue
            size, level, shared = _sysfs(index, "size"), int(_sysfs(index, "level")), _sysfs(index, "shared_cpu_list")
            number, unit = (size[:-1], size[-1].upper()) if size[-1:].isalpha() else (size, "")
            found[(level, shared)] = int(number) * _UNITS[unit]
        except (OSError, ValueError, KeyError):
            continue
    if not found:
        return None
    top = max(level for level, _ in found)
    sizes = [size for (level, _), size in found.items() if level == top]
    return {"level": top, "bytes": sum(sizes), "caches": len(sizes), "source": root}


def stream_rule(array_bytes: int, itemsize: int, llc: dict[str, Any] | None,
                where: str | None = None) -> tuple[str | None, list[str]]:
    """STREAM's rule (each array >= 4x the total LLC): (valid | invalid | None, reasons)."""
    if llc is None:
        return None, [f"last-level cache size not readable under {where or CPU_SYSFS}: STREAM's 4x rule not checked"]
    need = 4 * llc["bytes"]
    if array_bytes >= need:
        return "valid", []
    return "invalid", [f"each array is {array_bytes / 2**20:.1f} MiB, under 4x the {llc['bytes'] / 2**20:.1f} MiB "
                       f"L{llc['level']} cache ({need / 2**20:.1f} MiB): part of the traffic can be served by the "
                       f"cache (STREAM's rule); set elements to at least {-(-need // itemsize)}"]


def past_the_cache(n: int, cache_bytes: int, itemsize: int) -> int:
    """``n``, or the length that puts each array at 4x ``cache_bytes`` (STREAM's rule) when that is
    longer, rounded up to a whole 2**20 elements."""
    need = -(-4 * cache_bytes // itemsize)
    return max(n, -(-need // 2**20) * 2**20)


def chunk_bounds(n: int, threads: int) -> list[tuple[int, int]]:
    """``threads`` contiguous [lo, hi) slices covering 0..n, sizes differing by at most one."""
    edges = [n * k // threads for k in range(threads + 1)]
    return [(edges[k], edges[k + 1]) for k in range(threads)]


def _numpy_kernels(n: int, dtype: str, threads: int = 1
                   ) -> tuple[dict[str, Callable[[], None]], Callable[[], None], Any]:
    """The four kernels on numpy arrays, each split into ``threads`` chunks run at once by a
    :class:`ChunkPool` (numpy releases the GIL inside large ufuncs, so the chunks run in
    parallel). The returned second function stops the pool's threads."""
    a = np.full(n, 1.0, dtype=dtype)
    b = np.full(n, 2.0, dtype=dtype)
    c = np.zeros(n, dtype=dtype)

    def triad(lo: int, hi: int) -> None:
        np.multiply(c[lo:hi], SCALAR, out=a[lo:hi])
        np.add(a[lo:hi], b[lo:hi], out=a[lo:hi])

    chunked: dict[str, Callable[[int, int], Any]] = {
        "copy": lambda lo, hi: np.copyto(c[lo:hi], a[lo:hi]),
        "scale": lambda lo, hi: np.multiply(c[lo:hi], SCALAR, out=b[lo:hi]),
        "add": lambda lo, hi: np.add(a[lo:hi], b[lo:hi], out=c[lo:hi]),
        "triad": triad,
    }
    pool = ChunkPool(n, threads)
    kernels = {name: (lambda f=f: pool.run(f)) for name, f in chunked.items()}
    return kernels, pool.close, (a, b, c)


class ChunkPool:
    """Runs ``f(lo, hi)`` over ``threads`` chunks of 0..n at once: chunk 0 on the calling thread,
    chunk k on worker thread k, all started together (a barrier) and all finished before
    :meth:`run` returns. The workers start here, once, so no thread start-up is timed."""

    def __init__(self, n: int, threads: int) -> None:
        self.bounds = chunk_bounds(n, threads)
        self._job: Callable[[int, int], Any] | None = None
        self._errors: list[BaseException] = []
        self._stop = False
        self._barrier = threading.Barrier(threads)
        self._workers = [threading.Thread(target=self._work, args=(k,), name=f"membw-{k}", daemon=True)
                         for k in range(1, threads)]
        for w in self._workers:
            w.start()

    def _work(self, k: int) -> None:
        while True:
            self._barrier.wait()
            if self._stop:
                return
            try:
                assert self._job is not None
                self._job(*self.bounds[k])
            except BaseException as exc:  # noqa: BLE001 - re-raised on the calling thread
                self._errors.append(exc)
            self._barrier.wait()

    def run(self, f: Callable[[int, int], Any]) -> None:
        if not self._workers:
            f(*self.bounds[0])
            return
        self._job = f
        self._errors.clear()
        self._barrier.wait()
        try:
            f(*self.bounds[0])
        finally:
            self._barrier.wait()
        if self._errors:
            raise self._errors[0]

    def close(self) -> None:
        if self._workers and not self._stop:
            self._stop = True
            self._barrier.wait()
            for w in self._workers:
                w.join()


def _perf_counter_timer(name: str, fn: Callable[[], None]) -> float:
    """Seconds of one call of kernel ``name``, by the host clock (the threads all done)."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _cuda_event_timer() -> BatchedTimer:
    """Seconds of device time per call of each kernel: K back-to-back calls between one pair of
    CUDA events, divided by K (K chosen in the warm-up pass so a span lasts >= ~1 ms)."""
    return BatchedTimer(cuda_span())


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


class Settings(NamedTuple):
    """The suite's parameters, parsed."""

    elements: int
    iterations: int
    dtype: str
    device: str
    threads: int


def settings(ctx: Params) -> Settings:
    """The parameters, checked (ParamError): the suite's first step, and ``benchrun validate``'s."""
    check_known(ctx, PARAMETERS)
    n = int_param(ctx, "elements", 20_000_000, minimum=1024, maximum=4_000_000_000)
    iterations = int_param(ctx, "iterations", 10, minimum=1, maximum=100_000)
    dtype = choice_param(ctx, "dtype", "float64", ("float64", "float32"))
    if iterations > MAX_ITERATIONS[dtype]:
        raise ParamError(f"parameter iterations={iterations}: at most {MAX_ITERATIONS[dtype]} with dtype {dtype} "
                         "(the STREAM values grow 15x a pass and would overflow; validation would then fail)")
    device = choice_param(ctx, "device", "auto", ("auto", "cpu", "cuda"))
    most = max(1, min(1024, n // 1024))  # chunks of at least 1024 elements
    threads = int_param(ctx, "threads", min(usable_cpus(), most), minimum=1, maximum=most)
    return Settings(n, iterations, dtype, device, threads)


def run(ctx: SuiteContext) -> None:
    """Time the four STREAM kernels; report best and median GB/s per kernel."""
    n, iterations, dtype, device, threads = settings(ctx)

    on_cuda = cuda_available() if device in ("auto", "cuda") else False
    if device == "cuda" and not on_cuda:
        raise Unavailable("no CUDA device" if torch_present() else "torch not installed (CUDA membw needs torch)")
    itemsize = np.dtype(dtype).itemsize
    if on_cuda:
        import torch

        props = torch.cuda.get_device_properties(0)
        l2 = int(getattr(props, "L2_cache_size", 0) or 0)
        if "elements" not in ctx.params and l2:
            # the default 20M float64 (160 MB) is under 4x the L2 of an A100 (40 MiB) or H100 (50 MiB):
            # every default run there judged itself invalid (found in review)
            n = past_the_cache(n, l2, itemsize)
            ctx.context["elements_source"] = "default, sized to 4x the GPU's L2 (STREAM's rule)"
        kernels, sync, arrays = _torch_kernels(n, dtype)
        batched = _cuda_event_timer()
        timed = batched.time
        ctx.context.update({"device": "cuda", "backend": f"torch {torch.__version__}", "gpu_name": props.name,
                            "memory": "device (cudaMalloc through torch's caching allocator)",
                            "triad_passes": 1,
                            "timer": f"cuda events around K back-to-back calls (a span >= {MIN_SPAN_S * 1e3:g} ms), / K",
                            "calls_per_timing": batched.calls, "launch_bound": batched.launch_bound})
        # STREAM's rule against the GPU's L2 (before, checked only on the CPU: 16 MB arrays fit an H100's
        # 50 MB L2, and back-to-back timed calls re-read what stays there, so L2 read as HBM bandwidth)
        llc = {"level": 2, "bytes": l2, "source": "torch.cuda.get_device_properties().L2_cache_size"} if l2 else None
    else:
        kernels, sync, arrays = _numpy_kernels(n, dtype, threads)
        timed = _perf_counter_timer
        ctx.context.update({"device": "cpu", "backend": f"numpy {np.__version__} ufuncs with out=",
                            "cpu_model": cpu_model(), "usable_cpus": usable_cpus(), "triad_passes": 2,
                            "threads": threads, "chunk_elements": -(-n // threads),
                            "timer": "time.perf_counter around all chunks of a kernel"})
        llc = last_level_cache()
    verdict, reasons = stream_rule(n * itemsize, itemsize, llc, where="the device's properties" if on_cuda else None)
    ctx.context.update({"llc": llc, "verdict": verdict, "verdict_reasons": reasons})
    for reason in reasons:
        ctx.log(f"membw: {reason}")
    ctx.context.update({"elements": n, "dtype": dtype, "array_mib": n * itemsize / 2**20,
                        "bytes_counted_as": "STREAM (copy/scale 2 arrays, add/triad 3 arrays per element)",
                        "warmup_passes": 1})

    times: dict[str, list[float]] = {k: [] for k in KERNELS}
    with ctx.measuring():  # the telemetry summaries' window (allocation and first touch left out)
        for it in range(iterations + 1):
            for name in KERNELS:
                seconds = timed(name, kernels[name])
                if it > 0:
                    times[name].append(seconds)
        sync()
    arrays = tuple(x.cpu().numpy() if hasattr(x, "cpu") else x for x in arrays)
    _check(arrays, iterations, dtype)

    for name in KERNELS:
        nbytes = ARRAYS_MOVED[name] * itemsize * n
        best = nbytes / min(times[name]) / 1e9
        median = nbytes / percentile(times[name], 50) / 1e9
        case = name if on_cuda else f"{name},threads={threads}"
        ctx.add_metric("bandwidth_best_gb_per_s", best, "GB/s", "higher", case=case)
        ctx.add_metric("bandwidth_median_gb_per_s", median, "GB/s", "higher", case=case)
        ctx.log(f"membw {name}: best {best:.2f} GB/s, median {median:.2f} GB/s")
    path = atomic_write_json(ctx.raw_file("iterations", "json"), {"unit": "s", "times": times})
    ctx.samples["iterations"] = str(path.relative_to(ctx.run_dir))


if __name__ == "__main__":
    main(run)
