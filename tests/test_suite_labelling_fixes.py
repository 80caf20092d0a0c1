"""Review fixes: a suite's case says what was measured, and a measurement that is not what its name
claims is not gated on.

- fio: buffered I/O (page cache, RAM) is named ``<case>,buffered``; the tmpfs fallback from the default
  ``direct: true`` is also judged ``invalid`` (benchrun.stats.validity);
- training: no MFU of a CPU run against a GPU peak (``peak_device``), the device and backend in the case;
- allreduce: the device and backend in the case (a gloo fallback is not an NCCL replicate);
- nccl-tests: older versions' ``error`` column is ``max_abs_error``, and the collective is in the case;
- vllm bench: percentile rows carry ``samples`` (the point's completed requests).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from benchrun.errors import BenchrunError
from benchrun.ingest import ingest_file
from benchrun.ingest.nccl_tests import metrics_from_file as nccl_rows
from benchrun.stats.validity import invalid_replicates, judged_invalid
from benchrun.suites.fio import filesystem_of
from helpers import run_builtin_suite

FIXTURES = Path(__file__).parent / "fixtures"
V2 = FIXTURES / "nccl_tests_all_reduce_perf_v2.txt"
LEGACY = FIXTURES / "nccl_tests_all_reduce_perf_legacy.txt"
needs_fio = pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed (apt-get install fio)")


def _shm_is_tmpfs() -> bool:
    fs = filesystem_of(Path("/dev/shm")) if Path("/dev/shm").is_dir() else None
    return bool(fs and fs["fstype"] == "tmpfs" and os.access("/dev/shm", os.W_OK))


FIO_RUN = "t-fio-label"


def _fio(tmp_path: Path, params: dict[str, Any]) -> dict[str, Any]:
    """The fio suite's result in ``tmp_path/FIO_RUN`` (a run directory is named after its run)."""
    run_dir = tmp_path / FIO_RUN
    run_dir.mkdir()
    proc, doc = run_builtin_suite("fio", FIO_RUN, run_dir, params)
    assert doc["status"] == "ok", (doc.get("reason"), proc.stderr[-2000:])
    return doc


# --- fio --------------------------------------------------------------------------------------------

@needs_fio
@pytest.mark.skipif(not _shm_is_tmpfs(), reason="needs a writable tmpfs at /dev/shm")
def test_tmpfs_default_is_buffered_and_judged_invalid(tmp_path: Path) -> None:
    """Found in review: /dev/shm with direct left at its default gave seq_read 8195 MiB/s of RAM, ok, under
    the disk case's name; only context.direct_note said so."""
    doc = _fio(tmp_path, {"directory": "/dev/shm", "size_mb": 1, "runtime_s": 0.1, "ramp_s": 0,
                          "cases": ["seq_read"]})
    assert {m["case"] for m in doc["metrics"]} == {"seq_read,buffered"}
    assert doc["context"]["direct"] is False and doc["context"]["verdict"] == "invalid"
    [reason] = doc["context"]["verdict_reasons"]
    assert "/dev/shm" in reason and "page cache" in reason and "direct: false" in reason
    assert judged_invalid(doc)
    # what show, the report and a comparison read: the replicate is not gateable
    found = invalid_replicates(tmp_path / FIO_RUN)
    assert found == {"fio": {"replicates": [1], "reasons": [reason]}}


@needs_fio
def test_explicit_buffered_io_is_named_buffered_and_stays_valid(tmp_path: Path) -> None:
    """direct: false on a disk measures mostly the page cache: its own case, a deliberate measurement."""
    if (filesystem_of(tmp_path) or {}).get("fstype") in ("tmpfs", "ramfs"):
        pytest.skip("tmp_path is on tmpfs")
    doc = _fio(tmp_path, {"size_mb": 1, "runtime_s": 0.1, "ramp_s": 0, "cases": ["seq_read", "rand_write"],
                          "direct": False})
    assert {m["case"] for m in doc["metrics"]} == {"seq_read,buffered", "rand_write,buffered"}
    assert "--direct=0" in doc["context"]["argv"] and "buffered" in doc["context"]["direct_note"]
    assert not judged_invalid(doc) and invalid_replicates(tmp_path / FIO_RUN) == {}


@needs_fio
def test_direct_io_keeps_its_plain_case_names(tmp_path: Path) -> None:
    if (filesystem_of(tmp_path) or {}).get("fstype") in ("tmpfs", "ramfs"):
        pytest.skip("tmp_path is on tmpfs")
    doc = _fio(tmp_path, {"size_mb": 1, "runtime_s": 0.1, "ramp_s": 0, "cases": ["seq_read"]})
    assert {m["case"] for m in doc["metrics"]} == {"seq_read"} and doc["context"]["direct"] is True
    assert not judged_invalid(doc)


# --- training ---------------------------------------------------------------------------------------

TINY = {"layers": 1, "hidden": 16, "heads": 2, "seq_len": 8, "vocab": 32, "global_batch": 4, "steps": 6,
        "warmup_steps": 1, "lr": 0.01}


def _report(tmp_path: Path, device: str, backend: str, peak: float | None, **cfg_extra: Any) -> dict[str, Any]:
    from benchrun.suites._runtime import SuiteContext
    from benchrun.suites.training import report

    cfg = {**TINY, "device": device, "backend": backend, "scaling_sweep": False, "seed": 0, **cfg_extra}
    ranks = [{"rank_id": 0, "node_name": "n0", "step_times_s": [0.01] * 7, "measured_wall_s": 0.07,
              "time_to_first_step_s": 1.0, "peak_memory_bytes": 1}]
    doc = {"gpu_name": "NVIDIA H100 80GB HBM3" if device == "cuda" else None, "ranks": ranks,
           "losses": [3.0, 2.9, 2.8, 2.0, 1.9, 1.8, 1.7], "steps_done": 7, "steps_planned": 7, "diverged": None}
    ctx = SuiteContext({"BENCHRUN_RUN_DIR": str(tmp_path), "BENCHRUN_SUITE": "training"})
    report(ctx, doc, cfg, 1, 1, peak, None)
    [row] = ctx.training
    row["_metrics"] = ctx.metrics
    return row


def test_a_cpu_run_gets_no_mfu_against_a_gpu_peak(tmp_path: Path) -> None:
    """Found in review: backend auto, no CUDA at all: device cpu, not a fall-back, and the declared 989.4
    TFLOP/s gave mfu_pct 0.002 % with peak_source declared."""
    row = _report(tmp_path, "cpu", "gloo", 989.4)
    assert row["mfu_pct"] is None and row["peak_tflops_used"] is None and row["peak_source"] is None
    assert "ran on cpu" in row["mfu_reason"] and "peak_device: cpu" in row["mfu_reason"]
    assert not [m for m in row["_metrics"] if m["name"] == "mfu_pct"]
    # a peak declared as the CPU's gives the CPU run its MFU, and says whose peak it was
    row = _report(tmp_path / "b", "cpu", "gloo", 2.0, peak_device="cpu")
    assert row["mfu_pct"] == pytest.approx(100 * row["model_flops_per_token"] * row["tokens_per_second"] / 2e12)
    assert row["peak_source"] == "declared (cpu)"
    # and a CPU peak is not a GPU's
    row = _report(tmp_path / "c", "cuda", "nccl", 2.0, peak_device="cpu")
    assert row["mfu_pct"] is None and "cpu peak" in row["mfu_reason"]
    row = _report(tmp_path / "d", "cuda", "nccl", 989.4)
    assert row["mfu_pct"] is not None and row["peak_source"] == "declared (cuda)"


def test_training_case_names_device_and_backend(tmp_path: Path) -> None:
    cpu = _report(tmp_path, "cpu", "gloo", None)
    gpu = _report(tmp_path / "g", "cuda", "nccl", None)
    assert cpu["case"] == "L1-d16-T8-B4-n1x1,cpu,gloo" and gpu["case"] == "L1-d16-T8-B4-n1x1,cuda,nccl"
    assert {m["case"] for m in cpu["_metrics"]} == {cpu["case"]}


def test_peak_device_is_checked() -> None:
    from benchrun.spec.builtin_suites import check_parameters
    from benchrun.suites._common import ParamError

    check_parameters("training", {"peak_tflops_per_device": 2.0, "peak_device": "cpu"})
    with pytest.raises(ParamError, match="peak_device"):
        check_parameters("training", {"peak_tflops_per_device": 2.0, "peak_device": "tpu"})
    with pytest.raises(ParamError, match="set peak_tflops_per_device too"):
        check_parameters("training", {"peak_device": "cpu"})


@pytest.mark.slow
def test_training_without_cuda_reports_no_mfu_against_the_declared_peak(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from benchrun.suites._common import cuda_available

    if cuda_available():
        pytest.skip("this host has CUDA: the run would be on the GPU")
    params = {**TINY, "checkpoint": False, "peak_tflops_per_device": 989.4}
    proc, doc = run_builtin_suite("training", "t-training-label", tmp_path, params)
    assert doc["status"] == "ok", (doc.get("reason"), proc.stderr[-2000:])
    [row] = doc["training"]
    assert row["device"] == "cpu" and row["case"].endswith(",cpu,gloo")
    assert row["mfu_pct"] is None and "ran on cpu" in row["mfu_reason"]
    assert not [m for m in doc["metrics"] if m["name"] == "mfu_pct"]


# --- allreduce --------------------------------------------------------------------------------------

@pytest.mark.slow
def test_allreduce_case_names_device_and_backend(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    proc, doc = run_builtin_suite("allreduce", "t-allreduce-label", tmp_path,
                                  {"world_size": 2, "sizes": [1024], "iterations": 3, "backend": "auto"})
    assert doc["status"] == "ok", (doc.get("reason"), proc.stderr[-2000:])
    backend = doc["context"]["backend"]
    device = "cuda" if backend == "nccl" else "cpu"
    assert {m["case"] for m in doc["metrics"]} == {f"bytes=1024,{device},{backend}"}
    assert list(doc["context"]["slowest_rank_by_case"]) == [f"bytes=1024,{device},{backend}"]


# --- nccl-tests -------------------------------------------------------------------------------------

def test_legacy_error_column_is_max_abs_error_not_a_count(tmp_path: Path) -> None:
    legacy = tmp_path / "all_reduce_perf.txt"
    text = LEGACY.read_text()
    lines = text.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.strip().startswith("1048576"))
    row = lines[i].split()
    row[7] = "2e-07"  # out-of-place largest error: a float, not a number of wrong elements
    lines[i] = "  ".join(row)
    legacy.write_text("\n".join(lines) + "\n")
    rows = ingest_file(legacy, "nccl_tests")
    assert not [r for r in rows if r["name"] == "wrong_values"]
    errs = {r["case"]: r for r in rows if r["name"] == "max_abs_error"}
    assert len(errs) == 6 * 2
    err = errs["collective=all_reduce,bytes=1048576,type=float,redop=sum,out_of_place"]
    assert err["value"] == 2e-07 and err["unit"] == "1" and err["direction"] == "lower"
    # the v2 #wrong column stays a count
    wrong = [r for r in ingest_file(V2, "nccl_tests") if r["name"] == "wrong_values"]
    assert wrong and {r["unit"] for r in wrong} == {"count"}


def test_the_collective_is_in_the_case(tmp_path: Path) -> None:
    """Found in review: all_reduce_perf's and all_gather_perf's tables gave the same cases."""
    gather = tmp_path / "node1_all_gather_perf.log"
    gather.write_text(V2.read_text())
    reduce_ = ingest_file(V2, "nccl_tests")
    gathered = ingest_file(gather, "nccl_tests")
    assert not {r["case"] for r in reduce_} & {r["case"] for r in gathered}
    assert {r["case"].split(",")[0] for r in gathered} == {"collective=all_gather"}
    avg = [r for r in gathered if r["name"] == "avg_busbw_gb_per_s"]
    assert [r["case"] for r in avg] == ["collective=all_gather"]
    # the caller's name wins over a file name that says none
    plain = tmp_path / "out.txt"
    plain.write_text(V2.read_text())
    assert {r["case"].split(",")[0] for r in nccl_rows(plain, collective="reduce_scatter_perf")} == {
        "collective=reduce_scatter"}
    with pytest.raises(BenchrunError, match="which collective"):
        ingest_file(plain, "nccl_tests")
    # newer nccl-tests name the program in their output: that line is read
    said = tmp_path / "out2.txt"
    said.write_text("# nccl-tests version 2.17.6\n# Collective test starting: ./build/alltoall_perf\n" + V2.read_text())
    assert {r["case"].split(",")[0] for r in ingest_file(said, "nccl_tests")} == {"collective=alltoall"}
    with pytest.raises(BenchrunError, match="says it is of alltoall_perf"):
        nccl_rows(said, collective="all_reduce")


# --- vllm bench -------------------------------------------------------------------------------------

def test_vllm_percentile_rows_carry_the_points_request_count(tmp_path: Path) -> None:
    """Found in review: a p99 of 40 requests had no samples, so stats.tails kept its verdict."""
    doc = {"date": "20250101-000000", "backend": "vllm", "model_id": "m", "num_prompts": 40,
           "request_rate": "inf", "max_concurrency": 4, "duration": 10.0, "completed": 40, "failed": 0,
           "total_input_tokens": 4000, "total_output_tokens": 4000, "request_throughput": 4.0,
           "output_throughput": 400.0, "total_token_throughput": 800.0,
           "mean_ttft_ms": 20.0, "median_ttft_ms": 19.0, "std_ttft_ms": 2.0, "p99_ttft_ms": 30.0,
           "mean_tpot_ms": 5.0, "median_tpot_ms": 5.0, "std_tpot_ms": 0.5, "p99_tpot_ms": 7.0,
           "mean_e2el_ms": 500.0, "median_e2el_ms": 490.0, "std_e2el_ms": 20.0, "p99_e2el_ms": 600.0}
    f = tmp_path / "result.json"
    f.write_text(json.dumps(doc))
    by = {r["name"]: r for r in ingest_file(f, "vllm_bench")}
    for name in ("p99_latency_ms", "p50_latency_ms", "ttft_ms", "decode_ms_per_token"):
        assert by[name]["samples"] == 40, name
    for name in ("tokens_per_second", "request_throughput_rps"):
        assert "samples" not in by[name], name

    from benchrun.stats.tails import percentile_of, requests_needed

    assert by["p99_latency_ms"]["samples"] < requests_needed(percentile_of("p99_latency_ms"), 0.95)
