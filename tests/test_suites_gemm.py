"""The gemm suite run as a real subprocess: measured values, sample file, failure paths."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from benchrun.suites.gemm import numpy_blas
from helpers import run_builtin_suite

RUN_ID = "t-gemm"


def run_suite(run_dir: Path, params: dict[str, Any], **env_extra: str):
    return run_builtin_suite("gemm", RUN_ID, run_dir, params, **env_extra)


def test_cpu_gemm_reports_consistent_tflops_and_call_times(tmp_path: Path) -> None:
    proc, doc = run_suite(tmp_path, {"sizes": [64, 192], "iterations": 5, "device": "cpu"})
    assert proc.returncode == 0, proc.stderr
    assert doc["status"] == "ok" and doc["reason"] is None
    assert doc["context"]["device"] == "cpu" and doc["context"]["dtype"] == "float32"
    assert doc["context"]["blas"]["name"] not in ("", None)
    by = {(m["name"], m["case"]): m for m in doc["metrics"]}
    assert {c for _, c in by} == {"n=64,float32,cpu", "n=192,float32,cpu"}
    calls = json.loads((tmp_path / doc["samples"]["calls"]).read_text())["calls"]
    for n in (64, 192):
        case = f"n={n},float32,cpu"
        times = calls[case]
        assert len(times) == 5 and all(t > 0 for t in times)
        p50 = by[("p50_call_ms", case)]["value"]
        p99 = by[("p99_call_ms", case)]["value"]
        assert 0 < p50 <= p99 <= max(times) * 1e3 + 1e-9
        tflops = by[("tflops", case)]
        assert tflops["unit"] == "TFLOP/s" and tflops["direction"] == "higher"
        # TFLOP/s is 2n^3 over the median call, and a 2-core VM is far below 100 TFLOP/s
        assert tflops["value"] == pytest.approx(2 * n**3 / (p50 / 1e3) / 1e12, rel=1e-9)
        assert 1e-5 < tflops["value"] < 100


def test_half_precision_without_cuda_is_unavailable_not_a_number(tmp_path: Path) -> None:
    proc, doc = run_suite(tmp_path, {"sizes": [64], "dtype": "bfloat16", "device": "cpu"})
    assert proc.returncode == 0
    assert doc["status"] == "unavailable"
    assert doc["reason"].startswith("unavailable: no CUDA device")
    assert doc["metrics"] == []


def test_cuda_requested_without_a_device_is_unavailable(tmp_path: Path) -> None:
    if any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0")):
        pytest.skip("this host has an NVIDIA device")
    proc, doc = run_suite(tmp_path, {"sizes": [64], "device": "cuda"})
    assert proc.returncode == 0
    assert doc["status"] == "unavailable" and "no CUDA device" in doc["reason"]


@pytest.mark.parametrize(
    ("params", "named"),
    [({"sizes": [-5]}, "sizes"), ({"sizes": "big"}, "sizes"), ({"iterations": 0}, "iterations"),
     ({"dtype": "int8"}, "dtype"), ({"sizes": [100000]}, "sizes"), ({"size": [512]}, "size")],
)
def test_bad_parameters_fail_with_the_parameter_named(tmp_path: Path, params: dict[str, Any], named: str) -> None:
    proc, doc = run_suite(tmp_path, params)
    assert proc.returncode == 1
    assert doc["status"] == "failed"
    assert f"parameter {named}" in doc["reason"]
    assert doc["metrics"] == []


def test_numpy_blas_names_the_library() -> None:
    blas = numpy_blas()
    assert isinstance(blas["name"], str) and blas["name"] != "unknown"


def test_warmup_calls_are_a_parameter_and_fp8_without_cuda_is_unavailable(tmp_path: Path) -> None:
    proc, doc = run_suite(tmp_path, {"sizes": [64], "iterations": 3, "warmup": 0, "device": "cpu"})
    assert proc.returncode == 0, proc.stderr
    assert doc["status"] == "ok" and doc["context"]["warmup_calls"] == 0
    proc, doc = run_suite(tmp_path / "fp8", {"sizes": [64], "dtype": "float8_e4m3fn"})
    assert proc.returncode == 0 and doc["status"] == "unavailable"
    assert doc["reason"].startswith("unavailable: no CUDA device") and doc["metrics"] == []
    proc, doc = run_suite(tmp_path / "bad", {"sizes": [64], "warmup": -1, "device": "cpu"})
    assert proc.returncode == 1 and "parameter warmup" in doc["reason"]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn"])
def test_the_timed_torch_calls_compute_the_product(dtype: str) -> None:
    # The CUDA branch's operands and call, run on CPU (torch has CPU kernels for both; the
    # suite itself times them on CUDA only): fp8 through _scaled_mm with a column-major b.
    torch = pytest.importorskip("torch")
    if dtype == "float8_e4m3fn" and not hasattr(torch, "_scaled_mm"):
        pytest.skip("this torch has no _scaled_mm")
    from benchrun.suites.gemm import _torch_operands

    result, call = _torch_operands(torch, 64, dtype, device="cpu")
    call()
    c = result()
    assert c.shape == (64, 64) and c.dtype == torch.bfloat16
    gen = torch.Generator(device="cpu").manual_seed(64)
    a = torch.randn((64, 64), dtype=torch.bfloat16, generator=gen)
    b = torch.randn((64, 64), dtype=torch.bfloat16, generator=gen)
    if dtype == "float8_e4m3fn":
        a, b = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
    want = a.float() @ b.float().t() if dtype == "float8_e4m3fn" else a.float() @ b.float()
    assert torch.allclose(c.float(), want, rtol=0.02, atol=0.5)


def test_cpu_blas_threads_are_capped_at_the_cgroup_quota(tmp_path, monkeypatch) -> None:
    # a pod limited to 1 CPU on a bigger host: OpenBLAS's default pool is one thread per CPU it sees

    import scipy.linalg  # noqa: F401  # scipy's own OpenBLAS too: its Fortran setter crashed a ctypes call

    from benchrun.suites import _common, gemm
    from benchrun.suites._runtime import SuiteContext

    before = [(setter, int(getter())) for _, setter, getter in _common.openblas_pools()]
    if not before:
        pytest.skip("numpy here is not on OpenBLAS")
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    (cgroup / "cpu.max").write_text("100000 100000\n")  # 1 CPU
    monkeypatch.setattr(_common, "CGROUP_ROOT", str(cgroup))
    monkeypatch.setattr(gemm, "cuda_available", lambda: False)
    ctx = SuiteContext({"BENCHRUN_RUN_DIR": str(tmp_path / "run"), "BENCHRUN_SUITE": "gemm",
                        "BENCHRUN_PARAMS": json.dumps({"sizes": [64], "iterations": 2, "device": "cpu"})})
    try:
        gemm.run(ctx)
        assert ctx.context["usable_cpus"] == 1 and ctx.context["threads"] == 1
        assert [lib["threads"] for lib in ctx.context["blas_threads"]["libraries"]] == [1] * len(before)
        assert [lib["threads_before"] for lib in ctx.context["blas_threads"]["libraries"]] == [n for _, n in before]
    finally:
        for setter, n in before:  # give the test process its pool back
            setter(n)
