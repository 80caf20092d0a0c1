"""The membw (STREAM) suite run as a real subprocess, and its validation step."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchrun.suites.membw import KERNELS, ChunkPool, _check, _numpy_kernels
from helpers import run_builtin_suite

RUN_ID = "t-membw"


def run_suite(run_dir: Path, params: dict[str, Any], **env_extra: str):
    return run_builtin_suite("membw", RUN_ID, run_dir, params, **env_extra)


def test_stream_kernels_report_plausible_bandwidth(tmp_path: Path) -> None:
    proc, doc = run_suite(tmp_path, {"elements": 1_000_000, "iterations": 3, "device": "cpu", "threads": 2})
    assert proc.returncode == 0, proc.stderr
    assert doc["status"] == "ok"
    assert doc["context"]["elements"] == 1_000_000 and doc["context"]["triad_passes"] == 2
    assert doc["context"]["threads"] == 2 and doc["context"]["chunk_elements"] == 500_000
    by = {(m["name"], m["case"]): m["value"] for m in doc["metrics"]}
    assert len(by) == 8
    times = json.loads((tmp_path / doc["samples"]["iterations"]).read_text())["times"]
    for kernel in KERNELS:
        best = by[("bandwidth_best_gb_per_s", f"{kernel},threads=2")]
        median = by[("bandwidth_median_gb_per_s", f"{kernel},threads=2")]
        assert len(times[kernel]) == 3
        assert 0.05 < median <= best < 2000  # GB/s: anything outside is a counting bug
        arrays = 3 if kernel in ("add", "triad") else 2
        assert best == pytest.approx(arrays * 8 * 1_000_000 / min(times[kernel]) / 1e9)


def test_default_threads_are_the_usable_cpus(tmp_path: Path) -> None:
    proc, doc = run_suite(tmp_path, {"elements": 65536, "iterations": 1, "device": "cpu"})
    assert proc.returncode == 0, proc.stderr
    want = min(len(os.sched_getaffinity(0)), 64)
    assert doc["context"]["threads"] == want
    assert {m["case"] for m in doc["metrics"]} == {f"{k},threads={want}" for k in KERNELS}
    proc, doc = run_suite(tmp_path / "b", {"elements": 4096, "iterations": 1, "device": "cpu", "threads": 5})
    assert proc.returncode == 1 and "parameter threads" in doc["reason"]  # chunks of >= 1024 elements


def test_the_chunk_pool_runs_every_chunk_on_its_own_thread() -> None:
    pool = ChunkPool(10, 3)
    seen: list[tuple[int, int, int]] = []
    lock = threading.Lock()

    def record(lo: int, hi: int) -> None:
        with lock:
            seen.append((threading.get_ident(), lo, hi))

    for _ in range(2):
        seen.clear()
        pool.run(record)
        assert sorted((lo, hi) for _, lo, hi in seen) == [(0, 3), (3, 6), (6, 10)]
        assert len({t for t, _, _ in seen}) == 3
    with pytest.raises(ZeroDivisionError):
        pool.run(lambda lo, hi: 1 // (lo - 3) if lo == 3 else None)  # a worker's error reaches run()
    pool.run(record)  # and does not stick to the next call
    pool.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("membw-")]


def test_threaded_kernels_compute_what_one_thread_does() -> None:
    n = 10_007  # chunks of unequal size
    results = []
    for threads in (1, 3):
        kernels, close, arrays = _numpy_kernels(n, "float64", threads)
        for _ in range(3):
            for name in KERNELS:
                kernels[name]()
        close()
        _check(arrays, 2, "float64")
        results.append(arrays)
    for one, many in zip(*results):
        np.testing.assert_array_equal(one, many)


def test_validation_catches_a_kernel_that_did_not_run() -> None:
    n, iterations = 4096, 2
    a, b, c = np.full(n, 1.0), np.full(n, 2.0), np.zeros(n)
    for _ in range(iterations + 1):  # the real sequence passes
        np.copyto(c, a)
        np.multiply(c, 3.0, out=b)
        np.add(a, b, out=c)
        np.multiply(c, 3.0, out=a)
        np.add(a, b, out=a)
    _check((a, b, c), iterations, "float64")
    with pytest.raises(RuntimeError, match="validation failed"):
        _check((a, b, c + 1.0), iterations, "float64")


def test_cuda_requested_without_a_device_is_unavailable_not_a_number(tmp_path: Path) -> None:
    if any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia", "/dev/kfd")):
        pytest.skip("this host has a GPU device")
    proc, doc = run_suite(tmp_path, {"elements": 4096, "iterations": 1, "device": "cuda"})
    assert proc.returncode == 0, proc.stderr
    assert doc["status"] == "unavailable" and doc["metrics"] == [] and doc["samples"] == {}
    assert doc["reason"].startswith("unavailable: no CUDA device") or "torch not installed" in doc["reason"]


def test_too_few_elements_fail_naming_the_parameter(tmp_path: Path) -> None:
    proc, doc = run_suite(tmp_path, {"elements": 10})
    assert proc.returncode == 1
    assert doc["status"] == "failed" and "parameter elements" in doc["reason"]


def test_float32_iterations_past_overflow_fail_naming_the_parameter(tmp_path: Path) -> None:
    # the GPU spec's float32 arrays: 31 passes stay finite (15^31), more would overflow and
    # fail STREAM's validation with a confusing 'inf'
    proc, doc = run_suite(tmp_path, {"elements": 1024, "iterations": 31, "dtype": "float32", "device": "cpu"})
    assert proc.returncode == 1 and "parameter iterations=31: at most 30 with dtype float32" in doc["reason"]
    proc, doc = run_suite(tmp_path / "ok", {"elements": 1024, "iterations": 30, "dtype": "float32", "device": "cpu"})
    assert proc.returncode == 0 and doc["status"] == "ok", doc["reason"]


@pytest.mark.slow
def test_the_torch_kernels_pass_streams_validation() -> None:
    # The CUDA branch's kernels on torch CPU tensors (the suite runs them on CUDA only): the
    # replay STREAM validates against holds, and a skipped triad is caught.
    pytest.importorskip("torch")
    from benchrun.suites.membw import KERNELS, _check, _torch_kernels

    for skip in (None, "triad"):
        kernels, sync, arrays = _torch_kernels(4096, "float32", device="cpu")
        for _ in range(3 + 1):
            for name in KERNELS:
                if name != skip:
                    kernels[name]()
        sync()
        host = tuple(x.numpy() for x in arrays)
        if skip is None:
            _check(host, 3, "float32")
        else:
            with pytest.raises(RuntimeError, match="membw validation failed"):
                _check(host, 3, "float32")


def test_the_cgroup_cpu_quota_bounds_the_usable_cpus(tmp_path) -> None:
    # a pod limited to 4 CPUs on a 192-CPU node saw 192 in its affinity mask: membw's default
    # started a thread per CPU, throttled rather than run together
    from benchrun.suites._common import cgroup_cpu_quota

    (tmp_path / "cpu.max").write_text("400000 100000\n")
    assert cgroup_cpu_quota(str(tmp_path)) == 4
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_quota(str(tmp_path)) == 2  # 1.5 CPUs: two threads may run at once
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_quota(str(tmp_path)) is None
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("300000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_quota(str(tmp_path)) == 3  # cgroup v1
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_quota(str(tmp_path)) is None


def _fake_cpus(root: Path, l3: str, sockets: int = 2, cpus_per_socket: int = 2) -> None:
    for cpu in range(sockets * cpus_per_socket):
        socket = cpu // cpus_per_socket
        shared = f"{socket * cpus_per_socket}-{socket * cpus_per_socket + cpus_per_socket - 1}"
        for i, (level, kind, size, on) in enumerate([(1, "Data", "48K", str(cpu)), (1, "Instruction", "32K", str(cpu)),
                                                     (2, "Unified", "2048K", str(cpu)), (3, "Unified", l3, shared)]):
            d = root / f"cpu{cpu}" / "cache" / f"index{i}"
            d.mkdir(parents=True)
            for name, value in (("level", level), ("type", kind), ("size", size), ("shared_cpu_list", on)):
                (d / name).write_text(f"{value}\n")


def test_arrays_under_four_times_the_llc_are_flagged(tmp_path: Path, monkeypatch) -> None:
    from benchrun.suites import membw
    from benchrun.suites._runtime import SuiteContext

    _fake_cpus(tmp_path / "cpu", "256K")  # two sockets: 512 KiB of L3, each counted once
    monkeypatch.setattr(membw, "CPU_SYSFS", str(tmp_path / "cpu"))
    monkeypatch.setattr(membw, "cuda_available", lambda: False)
    llc = membw.last_level_cache()
    assert (llc["level"], llc["bytes"], llc["caches"]) == (3, 512 * 1024, 2)

    def run(elements: int) -> dict:
        ctx = SuiteContext({"BENCHRUN_RUN_DIR": str(tmp_path / f"run{elements}"), "BENCHRUN_SUITE": "membw",
                            "BENCHRUN_PARAMS": json.dumps({"elements": elements, "iterations": 1, "device": "cpu",
                                                           "threads": 1})})
        membw.run(ctx)
        return ctx.context

    small = run(65536)  # 512 KiB per float64 array: 1x the LLC
    assert small["llc"]["bytes"] == 512 * 1024 and small["verdict"] == "invalid"
    [reason] = small["verdict_reasons"]
    assert "0.5 MiB" in reason and "2.0 MiB" in reason and "elements to at least 262144" in reason
    big = run(262144)  # 2 MiB: exactly 4x
    assert big["verdict"] == "valid" and big["verdict_reasons"] == []


def test_an_unreadable_llc_is_said_not_checked(tmp_path: Path, monkeypatch) -> None:
    from benchrun.suites import membw

    monkeypatch.setattr(membw, "CPU_SYSFS", str(tmp_path / "none"))
    assert membw.last_level_cache() is None
    verdict, [reason] = membw.stream_rule(10**9, 8, None)
    assert verdict is None and "not checked" in reason


def test_the_cuda_default_sizes_each_array_past_four_times_the_l2(tmp_path: Path, monkeypatch) -> None:
    """The default 20M float64 (160 MB) is under 4x the L2 of an A100 (40 MiB) or an H100 (50 MiB),
    so every default CUDA run judged itself invalid. With no ``elements`` given, CUDA's arrays are
    sized from the device's L2; a given ``elements`` is kept (and judged). Played on the CPU: the
    torch kernels on CPU tensors, a perf-counter span for the CUDA events, an H100's properties."""
    from types import SimpleNamespace

    from benchrun.suites import membw
    from benchrun.suites._cudatime import BatchedTimer
    from benchrun.suites._runtime import SuiteContext

    torch = pytest.importorskip("torch")
    assert membw.past_the_cache(20_000_000, 50 * 2**20, 8) == 26_214_400  # 4 x 50 MiB / 8 B, a whole 2**20
    assert membw.past_the_cache(20_000_000, 40 * 2**20, 8) == 20_971_520
    assert membw.past_the_cache(20_000_000, 4 * 2**20, 8) == 20_000_000  # already past it

    def span(fn, k):
        import time

        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        return time.perf_counter() - t0

    real_kernels = membw._torch_kernels
    monkeypatch.setattr(membw, "cuda_available", lambda: True)
    monkeypatch.setattr(membw, "_torch_kernels", lambda n, dtype: real_kernels(n, dtype, device="cpu"))
    monkeypatch.setattr(membw, "_cuda_event_timer", lambda: BatchedTimer(span, min_span_s=0.0, probe_calls=1))
    # float32 keeps it light: the default 20M float32 (80 MB) is under 4 x a 24 MiB L2, which needs
    # 4 x 24 MiB / 4 B = 25,165,824 elements
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda _i: SimpleNamespace(name="NVIDIA H100 80GB HBM3 (played)", L2_cache_size=24 * 2**20))

    def run(params: dict) -> dict:
        ctx = SuiteContext({"BENCHRUN_RUN_DIR": str(tmp_path / f"run{len(params)}"), "BENCHRUN_SUITE": "membw",
                            "BENCHRUN_PARAMS": json.dumps({"iterations": 1, "dtype": "float32", **params})})
        membw.run(ctx)
        return ctx.context

    sized = run({})
    assert sized["elements"] == 25_165_824 and sized["verdict"] == "valid", sized
    assert sized["elements_source"].startswith("default, sized to 4x the GPU's L2")
    given = run({"elements": 1_048_576})
    assert given["elements"] == 1_048_576 and given["verdict"] == "invalid" and "elements_source" not in given
