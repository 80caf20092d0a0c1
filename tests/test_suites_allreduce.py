"""The allreduce suite: real gloo ranks on loopback, the summary maths, and the unavailable paths."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from benchrun.suites.allreduce import summarise
from helpers import run_builtin_suite

RUN_ID = "t-allreduce"
HIDE_TORCH = Path(__file__).parent / "fixtures" / "hide_torch"


def run_suite(run_dir: Path, params: dict[str, Any], **env_extra: str):
    return run_builtin_suite("allreduce", RUN_ID, run_dir, params, **env_extra)


@pytest.mark.slow
def test_gloo_ranks_report_latency_bandwidth_and_rank_samples(tmp_path: Path) -> None:
    sizes, iterations = [1024, 262144], 5
    proc, doc = run_suite(tmp_path, {"world_size": 2, "sizes": sizes, "iterations": iterations, "backend": "gloo"})
    assert proc.returncode == 0, proc.stderr
    assert doc["status"] == "ok"
    assert doc["context"]["backend"] == "gloo" and doc["context"]["world_size"] == 2
    samples = json.loads((tmp_path / doc["samples"]["ranks"]).read_text())["samples"]
    assert len(samples) == 2 * len(sizes) * iterations
    assert {s["rank_id"] for s in samples} == {0, 1} and len({s["pid"] for s in samples}) == 2
    assert all(s["elapsed_s"] > 0 for s in samples)
    by = {(m["name"], m["case"], m.get("rank_id")): m["value"] for m in doc["metrics"]}
    for size in sizes:
        case = f"bytes={size},cpu,gloo"  # the device and backend are in the case
        p50, p99 = by[("p50_latency_us", case, None)], by[("p99_latency_us", case, None)]
        assert 0 < p50 <= p99 < 10e6
        algbw = by[("algbw_gb_per_s", case, None)]
        assert algbw == pytest.approx(size / (p50 / 1e6) / 1e9)
        assert by[("busbw_gb_per_s", case, None)] == pytest.approx(algbw * 2 * (2 - 1) / 2)
        assert by[("rank_p50_time_us", case, 0)] > 0 and by[("rank_p50_time_us", case, 1)] > 0
        slow = [k for k in by if k[0] == "slowest_rank_arrival_lag_us" and k[1] == case]
        assert len(slow) == 1 and slow[0][2] in (0, 1)
        assert doc["context"]["slowest_rank_by_case"][case] == slow[0][2]


def test_summary_finds_the_late_rank_and_the_collective_time() -> None:
    # rank 2 arrives 3 ms late every iteration; the others wait for it inside the call
    docs = []
    for rank in range(3):
        late = 0.003 if rank == 2 else 0.0
        docs.append({"rank_id": rank, "records": [
            {"size_bytes": 4096, "iteration": i, "start_unix": 100.0 + i + late, "elapsed_s": 0.001 + (0.003 - late)}
            for i in range(4)]})
    s = summarise(docs)[4096]
    assert s["slowest_rank"] == 2
    assert s["arrival_lag_p50_s"] == pytest.approx([0.0, 0.0, 0.003])
    assert s["latency_s"] == pytest.approx([0.001] * 4)  # last completion - last arrival
    assert s["rank_p50_s"] == pytest.approx([0.004, 0.004, 0.001])


def test_without_torch_the_suite_is_unavailable(tmp_path: Path) -> None:
    proc, doc = run_suite(tmp_path, {"world_size": 2, "sizes": [1024]}, PYTHONPATH=str(HIDE_TORCH))
    assert proc.returncode == 0, proc.stderr
    assert doc["status"] == "unavailable" and doc["reason"] == "unavailable: torch not installed"
    assert doc["metrics"] == []


def test_nccl_without_cuda_is_unavailable(tmp_path: Path) -> None:
    if any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0")):
        pytest.skip("this host has an NVIDIA device")
    proc, doc = run_suite(tmp_path, {"world_size": 2, "sizes": [1024], "backend": "nccl"})
    assert proc.returncode == 0
    assert doc["status"] == "unavailable" and doc["reason"].startswith("unavailable: no CUDA device")


@pytest.mark.parametrize(("params", "named"), [({"world_size": 0}, "world_size"), ({"sizes": [2]}, "sizes"),
                                               ({"backend": "mpi"}, "backend")])
def test_bad_parameters_fail_with_the_parameter_named(tmp_path: Path, params: dict[str, Any], named: str) -> None:
    proc, doc = run_suite(tmp_path, params)
    assert proc.returncode == 1
    assert doc["status"] == "failed" and f"parameter {named}" in doc["reason"]


@pytest.mark.slow
def test_a_group_that_cannot_form_is_a_failed_replicate_with_each_rank_error(tmp_path: Path) -> None:
    # Node 0 of a two-node gang whose other node never comes: ranks 2 and 3 never join, so the
    # group cannot form whatever the machine's speed (a 1 ms deadline did form once, on a quick
    # moment). Its 1 s deadline passes; the ranks that came each say what happened to them.
    from benchrun.suites.allreduce import free_loopback_port

    proc, doc = run_suite(tmp_path, {"sizes": [1024], "iterations": 2, "timeout_s": 1}, BENCHRUN_NODES="2",
                          NODE_RANK="0", LOCAL_WORLD_SIZE="2", WORLD_SIZE="4", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(free_loopback_port()))
    assert proc.returncode == 1
    assert doc["status"] == "failed" and doc["metrics"] == []
    # torch says "wait timeout" / "Timed out ... waiting for clients" / "timed out ... connect"
    reason = doc["reason"]
    assert "rank 0:" in reason and "rank 1:" in reason and re.search(r"time(d)? ?out", reason.lower()), reason
    assert not (tmp_path / "raw" / f"{RUN_ID}_allreduce_r1_ranks.json").exists()


@pytest.mark.slow
def test_a_world_of_one_rank_reports_latency_and_algbw_but_no_busbw(tmp_path: Path) -> None:
    # one GPU: the GPU spec's allreduce is a world of 1 (here over gloo, the same code path)
    proc, doc = run_suite(tmp_path, {"world_size": 1, "sizes": [4096], "iterations": 3, "backend": "gloo"})
    assert proc.returncode == 0, proc.stderr
    assert doc["status"] == "ok" and doc["context"]["world_size"] == 1
    names = {m["name"] for m in doc["metrics"]}
    assert {"p50_latency_us", "algbw_gb_per_s", "rank_p50_time_us"} <= names
    assert "busbw_gb_per_s" not in names  # 2(n-1)/n = 0 for one rank: not a bandwidth


@pytest.mark.slow
def test_the_measured_window_is_the_timed_calls(tmp_path: Path) -> None:
    """Review: allreduce recorded no measured window, so its telemetry summaries covered the
    interpreter's start-up and the process group's set-up."""
    proc, doc = run_suite(tmp_path, {"world_size": 2, "sizes": [1024, 65536], "iterations": 3, "backend": "gloo"})
    assert proc.returncode == 0, proc.stderr
    samples = json.loads((tmp_path / doc["samples"]["ranks"]).read_text())["samples"]
    window = doc["measured_window"]
    assert window["start_unix"] == pytest.approx(min(s["start_unix"] for s in samples), abs=1e-6)
    assert window["end_unix"] == pytest.approx(max(s["start_unix"] + s["elapsed_s"] for s in samples), abs=1e-6)


@pytest.mark.slow
def test_a_failed_rank_leaves_its_traceback_and_the_ranks_stopped_after_it_say_so(tmp_path: Path) -> None:
    """Review: the worker wrote its traceback into rank<r>.json, which the parent deleted: only
    "Type: message" reached the reason, and a rank the parent killed after another failed read
    "exit code -9, no samples". A gang whose other node never comes, 1 s deadline."""
    from benchrun.suites.allreduce import free_loopback_port

    proc, doc = run_suite(tmp_path, {"sizes": [1024], "iterations": 2, "timeout_s": 1}, BENCHRUN_NODES="2",
                          NODE_RANK="0", LOCAL_WORLD_SIZE="2", WORLD_SIZE="4", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(free_loopback_port()))
    assert proc.returncode == 1 and doc["status"] == "failed"
    kept = doc["context"]["rank_tracebacks"]
    assert kept, doc
    for rank, rel in kept.items():
        assert rel == f"raw/{RUN_ID}_allreduce_r1_rank{rank}_traceback.txt"
        text = (tmp_path / rel).read_text()
        assert text.startswith("Traceback (most recent call last)") and "init_process_group" in text
        assert f"allreduce: rank {rank} failed:\nTraceback (most recent call last)" in proc.stderr
    reason = doc["reason"]
    assert "exit code -9" not in reason, reason
    for rank in ("0", "1"):  # each rank: its own error, or stopped because one that failed is named
        if rank not in kept:
            assert re.search(rf"rank {rank}: stopped after ranks? [\d, ]*\b({'|'.join(kept)})\b[\d, ]* failed",
                             reason), reason
