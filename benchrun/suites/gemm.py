"""The ``gemm`` suite: dense matrix-multiply throughput (numpy/BLAS on CPU, torch on CUDA).

Parameters (``BENCHRUN_PARAMS``):
    sizes       list of n for n x n x n products (default [1024]; a repeated n is measured once)
    iterations  timed calls per size after the warm-up calls (default 10)
    warmup      untimed calls per size first (default 1; a GPU wants several to reach its
                boost clock)
    dtype       auto | float32 | float64 | bfloat16 | float16 | float8_e4m3fn (default auto:
                bfloat16 on CUDA, float32 on CPU). numpy has no bfloat16/float16/fp8 GEMM
                worth measuring, so those on a machine without CUDA are ``unavailable``.
                float8_e4m3fn runs ``torch._scaled_mm`` (e4m3 inputs, unit per-tensor scales,
                bf16 output) and needs compute capability >= 8.9 (Ada, Hopper and later).
    device      auto | cpu | cuda (default auto: cuda when torch sees a CUDA device)

Metrics per size (``case`` = ``n=<n>,<dtype>,<device>``): ``tflops`` (2 n^3 / p50 call
time), ``p50_call_ms``, ``p99_call_ms``. On CUDA each timing is K back-to-back calls
between one pair of CUDA events, divided by K (device time; the host only enqueues, and
a small product's launch gaps are not counted): K is chosen after the warm-up from a probe
so that a span lasts at least ~1 ms (1 for products that long), and is recorded in
``context.calls_per_timing`` per case and on ``p99_call_ms`` as ``calls_per_sample`` (with
K > 1 the percentiles are of K-call means). On CPU every call is timed (K = 1). Every call time is kept in
``raw/<run_id>_gemm_r<k>_calls.json`` (listed in ``samples``). ``context`` names the BLAS
(numpy's build configuration) or the CUDA device, the threads and the CPU model. On CPU the
OpenBLAS threads are capped at the usable CPUs (affinity and cgroup CPU quota,
``_common.usable_cpus``; a smaller OPENBLAS_NUM_THREADS / OMP_NUM_THREADS is kept):
``context.threads`` is the count the products ran with, ``context.blas_threads`` the detail.
"""

from __future__ import annotations

import os
import time
from typing import Any, Mapping, NamedTuple

import numpy as np

from benchrun.suites._common import (
    check_known,
    ParamError,
    Params,
    choice_param,
    cpu_model,
    cuda_available,
    int_list_param,
    int_param,
    percentile,
    cap_openblas_threads,
    torch_present,
    usable_cpus,
)
from benchrun.suites._cudatime import BatchedTimer, cuda_span
from benchrun.suites._runtime import SuiteContext, Unavailable, main
from benchrun.fsio import atomic_write_json

# the parameters the suite takes (checked when it starts, and by `benchrun validate`)
PARAMETERS = ("sizes", "iterations", "warmup", "dtype", "device")
# the metrics the suite may report (`benchrun validate` checks a primary names one; reporting another fails)
METRICS = ("tflops", "p50_call_ms", "p99_call_ms")

DTYPES = ("auto", "float32", "float64", "bfloat16", "float16", "float8_e4m3fn")
GPU_ONLY = ("bfloat16", "float16", "float8_e4m3fn")
FP8_MIN_CAPABILITY = (8, 9)
MAX_N = 32768


def numpy_blas() -> dict[str, Any]:
    """numpy's BLAS as its build configuration names it (name, version, configuration)."""
    try:
        config = np.show_config(mode="dicts")
    except TypeError:  # numpy < 1.26 has no mode=
        return {"name": "unknown"}
    blas = (config or {}).get("Build Dependencies", {}).get("blas", {})
    return {
        "name": blas.get("name", "unknown"),
        "version": blas.get("version"),
        "configuration": blas.get("openblas configuration"),
    }


def _time_numpy(n: int, dtype: str, iterations: int, warmup: int = 1) -> tuple[list[float], int, bool]:
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, n)).astype(dtype)
    b = rng.standard_normal((n, n)).astype(dtype)
    c = np.empty((n, n), dtype=dtype)
    for _ in range(warmup):  # BLAS thread pool start, page faults on c
        np.matmul(a, b, out=c)
    times = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        np.matmul(a, b, out=c)
        times.append(time.perf_counter() - t0)
    if not np.isfinite(c[0, 0]):
        raise RuntimeError(f"gemm n={n}: result is not finite")
    return times, 1, False


def fp8_unavailable(torch: Any) -> str | None:
    """Why fp8 GEMM cannot run on CUDA device 0 here, else None."""
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return f"torch {torch.__version__} has no torch._scaled_mm / float8_e4m3fn (fp8 gemm)"
    cap = tuple(torch.cuda.get_device_capability(0))
    if cap < FP8_MIN_CAPABILITY:
        return (f"no fp8 tensor cores on {torch.cuda.get_device_name(0)} (compute capability "
                f"{cap[0]}.{cap[1]} < {FP8_MIN_CAPABILITY[0]}.{FP8_MIN_CAPABILITY[1]})")
    return None


def _torch_operands(torch: Any, n: int, dtype: str, device: str = "cuda") -> Any:
    """The call to time on CUDA, ``c = a @ b`` in ``dtype`` (fp8: scaled_mm into bf16), and a getter of c.

    ``device`` is a parameter only so the calls can be checked on CPU (torch has CPU kernels
    for both); the suite times them on CUDA alone.
    """
    gen = torch.Generator(device=device).manual_seed(n)
    if dtype == "float8_e4m3fn":
        a = torch.randn((n, n), device=device, dtype=torch.bfloat16, generator=gen).to(torch.float8_e4m3fn)
        # _scaled_mm wants its second operand column-major: the transpose of a row-major matrix
        b = torch.randn((n, n), device=device, dtype=torch.bfloat16, generator=gen).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=device, dtype=torch.float32)
        # no out= (not every torch has _scaled_mm.out): the caching allocator hands the freed
        # output block back on the next call, so no cudaMalloc is timed
        last: dict[str, Any] = {}

        def fp8_call() -> None:
            last["c"] = torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

        return (lambda: last["c"]), fp8_call
    tdtype = getattr(torch, dtype)
    a = torch.randn((n, n), device=device, dtype=tdtype, generator=gen)
    b = torch.randn((n, n), device=device, dtype=tdtype, generator=gen)
    c = torch.empty((n, n), device=device, dtype=tdtype)
    return (lambda: c), (lambda: torch.matmul(a, b, out=c))


def _time_torch_cuda(n: int, dtype: str, iterations: int, warmup: int = 1) -> tuple[list[float], int, bool]:
    """``iterations`` timings of one call each (seconds), each K back-to-back calls between one
    pair of CUDA events / K, and K (chosen after the warm-up so a span lasts >= ~1 ms)."""
    import torch

    result, call = _torch_operands(torch, n, dtype)
    for _ in range(warmup):
        call()
    timer = BatchedTimer(cuda_span())
    timer.warm("gemm", call)
    times = [timer.time("gemm", call) for _ in range(iterations)]
    torch.cuda.synchronize()
    if not bool(torch.isfinite(result()[0, :8].float()).all()):
        raise RuntimeError(f"gemm n={n} {dtype}: result is not finite")
    # a launch-bound span is the host's pace, an upper bound of the kernel's (_cudatime)
    return times, timer.calls["gemm"], bool(timer.launch_bound)


class Settings(NamedTuple):
    """The suite's parameters, parsed."""

    sizes: list[int]
    iterations: int
    warmup: int
    dtype: str
    device: str


def settings(ctx: Params) -> Settings:
    """The parameters, checked (ParamError): the suite's first step, and ``benchrun validate``'s."""
    check_known(ctx, PARAMETERS)
    # each n once, in the order given (as allreduce dedupes its sizes): a repeated n was measured again
    # under the same case, its calls overwriting the first's in calls.json and its rows read as per-rank
    sizes = list(dict.fromkeys(int_list_param(ctx, "sizes", [1024], minimum=1)))
    if max(sizes) > MAX_N:
        raise ParamError(f"parameter sizes: {max(sizes)} is larger than {MAX_N}")
    return Settings(sizes=sizes,
                    iterations=int_param(ctx, "iterations", 10, minimum=1, maximum=100_000),
                    warmup=int_param(ctx, "warmup", 1, minimum=0, maximum=100_000),
                    dtype=choice_param(ctx, "dtype", "auto", DTYPES),
                    device=choice_param(ctx, "device", "auto", ("auto", "cpu", "cuda")))


def needs_gpu(params: Mapping[str, Any]) -> bool:
    """Whether these parameters can only run on a CUDA device: ``device: cuda``, or a GPU-only
    dtype (:data:`GPU_ONLY`) not pinned to the CPU. The launcher asks for a GPU by it
    (``benchrun.launch.placement.wants_gpu``); on a host without CUDA such a run is unavailable."""
    device = str(params.get("device", "auto")).lower()
    return device == "cuda" or (device != "cpu" and str(params.get("dtype", "auto")) in GPU_ONLY)


def run(ctx: SuiteContext) -> None:
    """Time n x n matrix products for each size; report TFLOP/s and call-time percentiles."""
    sizes, iterations, warmup, dtype, device = settings(ctx)

    cuda = cuda_available() if device in ("auto", "cuda") else False
    if device == "cuda" and not cuda:
        raise Unavailable("no CUDA device" if torch_present() else "torch not installed (CUDA gemm needs torch)")
    on_cuda = cuda
    if dtype == "auto":
        dtype = "bfloat16" if on_cuda else "float32"
    if not on_cuda and dtype in GPU_ONLY:
        raise Unavailable(f"no CUDA device ({dtype} gemm runs on CUDA; numpy has no {dtype} BLAS)")

    if on_cuda:
        import torch

        if dtype == "float8_e4m3fn":
            reason = fp8_unavailable(torch)
            if reason:
                raise Unavailable(reason)
        props = torch.cuda.get_device_properties(0)
        uuid = str(getattr(props, "uuid", "") or "") or None
        ctx.context.update(
            {
                "device": "cuda",
                "backend": f"torch {torch.__version__} "
                + ("_scaled_mm (e4m3 x e4m3 -> bf16, unit scales)" if dtype == "float8_e4m3fn" else "matmul"),
                "gpu_name": props.name,
                # NVML's spelling (GPU-<uuid>), so the result joins the telemetry's gpu_uuid
                "gpu_uuid": uuid if uuid is None or uuid.startswith("GPU-") else f"GPU-{uuid}",
                "compute_capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
                "cuda_version": torch.version.cuda,
                "tf32_allowed": bool(getattr(torch.backends.cuda.matmul, "allow_tf32", False)),
                "timer": "cuda events around K back-to-back calls (a span >= ~1 ms), / K",
            }
        )
        timer = _time_torch_cuda
    else:
        # OpenBLAS sizes its pool from the CPUs it sees, not the pod's quota: threads past the
        # quota are throttled, not run together, so cap them at the usable CPUs
        cpus = usable_cpus()
        blas_threads = cap_openblas_threads(cpus)
        counts = {lib["threads"] for lib in blas_threads["libraries"]}
        ctx.context.update(
            {
                "device": "cpu",
                "backend": "numpy.matmul",
                "blas": numpy_blas(),
                "numpy_version": np.__version__,
                "cpu_model": cpu_model(),
                "usable_cpus": cpus,
                "blas_threads": blas_threads,
                "threads": counts.pop() if len(counts) == 1 else None,
                "thread_env": {
                    k: os.environ[k]
                    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
                    if k in os.environ
                },
                "timer": "time.perf_counter",
            }
        )
        timer = _time_numpy
    ctx.context["dtype"] = dtype
    ctx.context["warmup_calls"] = warmup

    samples: dict[str, Any] = {"unit": "s", "calls": {}}
    dev = ctx.context["device"]
    for n in sizes:
        with ctx.measuring():  # the telemetry summaries' window (imports and device set-up left out)
            times, k, launch_bound = timer(n, dtype, iterations, warmup)
        case = f"n={n},{dtype},{dev}"
        samples["calls"][case] = times
        if launch_bound:
            ctx.context.setdefault("launch_bound", []).append(case)
        ctx.context.setdefault("calls_per_timing", {})[case] = k
        p50 = percentile(times, 50)
        flops = 2.0 * n**3
        ctx.add_metric("tflops", flops / p50 / 1e12, "TFLOP/s", "higher", case=case)
        ctx.add_metric("p50_call_ms", p50 * 1e3, "ms", "lower", case=case)
        ctx.add_metric("p99_call_ms", percentile(times, 99) * 1e3, "ms", "lower", case=case, samples=len(times),
                       calls_per_sample=k)
        ctx.log(f"gemm {case}: {flops / p50 / 1e12:.4f} TFLOP/s, p50 {p50 * 1e3:.3f} ms over {iterations} calls")
    path = atomic_write_json(ctx.raw_file("calls", "json"), samples)
    ctx.samples["calls"] = str(path.relative_to(ctx.run_dir))


if __name__ == "__main__":
    main(run)
