"""The ``gemm`` suite: dense matrix-multiply throughput (numpy/BLAS on CPU, torch on CUDA).

Parameters (``BENCHRUN_PARAMS``):
    sizes       list of n for n x n x n products (default [1024])
    iterations  timed calls per size after one warm-up call (default 10)
    dtype       auto | float32 | float64 | bfloat16 | float16 (default auto: bfloat16 on
                CUDA, float32 on CPU). numpy has no bfloat16/float16 GEMM worth measuring,
                so those on a machine without CUDA are ``unavailable``.
    device      auto | cpu | cuda (default auto: cuda when torch sees a CUDA device)

Metrics per size (``case`` = ``n=<n>,<dtype>,<device>``): ``tflops`` (2 n^3 / p50 call
time), ``p50_call_ms``, ``p99_call_ms``. Every call time is kept in
``raw/<run_id>_gemm_r<k>_calls.json`` (listed in ``samples``). ``context`` names the BLAS
(numpy's build configuration) or the CUDA device, the threads and the CPU model.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from benchrun.suites._common import (
    check_known,
    ParamError,
    choice_param,
    cpu_model,
    cuda_available,
    int_list_param,
    int_param,
    percentile,
    torch_present,
    usable_cpus,
)
from benchrun.suites._runtime import SuiteContext, Unavailable, main
from benchrun.fsio import atomic_write_json

DTYPES = ("auto", "float32", "float64", "bfloat16", "float16")
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


def _time_numpy(n: int, dtype: str, iterations: int) -> list[float]:
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, n)).astype(dtype)
    b = rng.standard_normal((n, n)).astype(dtype)
    c = np.empty((n, n), dtype=dtype)
    np.matmul(a, b, out=c)  # warm-up: BLAS thread pool start, page faults on c
    times = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        np.matmul(a, b, out=c)
        times.append(time.perf_counter() - t0)
    if not np.isfinite(c[0, 0]):
        raise RuntimeError(f"gemm n={n}: result is not finite")
    return times


def _time_torch_cuda(n: int, dtype: str, iterations: int) -> list[float]:
    import torch

    tdtype = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(n)
    a = torch.randn((n, n), device="cuda", dtype=tdtype, generator=gen)
    b = torch.randn((n, n), device="cuda", dtype=tdtype, generator=gen)
    c = torch.empty((n, n), device="cuda", dtype=tdtype)
    torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
    for i in range(iterations):
        starts[i].record()
        torch.matmul(a, b, out=c)
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)]


def run(ctx: SuiteContext) -> None:
    """Time n x n matrix products for each size; report TFLOP/s and call-time percentiles."""
    check_known(ctx, ("sizes", "iterations", "dtype", "device"))
    sizes = int_list_param(ctx, "sizes", [1024], minimum=1)
    if max(sizes) > MAX_N:
        raise ParamError(f"parameter sizes: {max(sizes)} is larger than {MAX_N}")
    iterations = int_param(ctx, "iterations", 10, minimum=1, maximum=100_000)
    dtype = choice_param(ctx, "dtype", "auto", DTYPES)
    device = choice_param(ctx, "device", "auto", ("auto", "cpu", "cuda"))

    cuda = cuda_available() if device in ("auto", "cuda") else False
    if device == "cuda" and not cuda:
        raise Unavailable("no CUDA device" if torch_present() else "torch not installed (CUDA gemm needs torch)")
    on_cuda = cuda
    if dtype == "auto":
        dtype = "bfloat16" if on_cuda else "float32"
    if not on_cuda and dtype in ("bfloat16", "float16"):
        raise Unavailable(f"no CUDA device ({dtype} gemm runs on CUDA; numpy has no {dtype} BLAS)")

    if on_cuda:
        import torch

        props = torch.cuda.get_device_properties(0)
        ctx.context.update(
            {
                "device": "cuda",
                "backend": f"torch {torch.__version__} matmul",
                "gpu_name": props.name,
                "gpu_uuid": str(getattr(props, "uuid", "")) or None,
                "cuda_version": torch.version.cuda,
                "tf32_allowed": bool(getattr(torch.backends.cuda.matmul, "allow_tf32", False)),
                "timer": "cuda events",
            }
        )
        timer = _time_torch_cuda
    else:
        ctx.context.update(
            {
                "device": "cpu",
                "backend": "numpy.matmul",
                "blas": numpy_blas(),
                "numpy_version": np.__version__,
                "cpu_model": cpu_model(),
                "usable_cpus": usable_cpus(),
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
    ctx.context["warmup_calls"] = 1

    samples: dict[str, Any] = {"unit": "s", "calls": {}}
    dev = ctx.context["device"]
    for n in sizes:
        times = timer(n, dtype, iterations)
        case = f"n={n},{dtype},{dev}"
        samples["calls"][case] = times
        p50 = percentile(times, 50)
        flops = 2.0 * n**3
        ctx.add_metric("tflops", flops / p50 / 1e12, "TFLOP/s", "higher", case=case)
        ctx.add_metric("p50_call_ms", p50 * 1e3, "ms", "lower", case=case)
        ctx.add_metric("p99_call_ms", percentile(times, 99) * 1e3, "ms", "lower", case=case)
        ctx.log(f"gemm {case}: {flops / p50 / 1e12:.4f} TFLOP/s, p50 {p50 * 1e3:.3f} ms over {iterations} calls")
    path = atomic_write_json(ctx.raw_file("calls", "json"), samples)
    ctx.samples["calls"] = str(path.relative_to(ctx.run_dir))


if __name__ == "__main__":
    main(run)
