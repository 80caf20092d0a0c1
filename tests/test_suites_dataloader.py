"""The dataloader suite: a real parquet dataset read by pyarrow and by torch DataLoader workers."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from helpers import run_builtin_suite

RUN_ID = "t-dataloader"
HIDE_TORCH = Path(__file__).parent / "fixtures" / "hide_torch"


def run_suite(run_dir: Path, params: dict[str, Any], **env_extra: str):
    return run_builtin_suite("dataloader", RUN_ID, run_dir, params, **env_extra)


def _check_case(doc: dict[str, Any], gaps: dict[str, list[float]], case: str, batches: int, rows: int) -> None:
    by = {m["name"]: m["value"] for m in doc["metrics"] if m["case"] == case}
    assert set(by) == {"samples_per_s", "mb_per_s", "wall_samples_per_s", "p99_batch_latency_ms",
                       "first_batch_latency_ms"}
    assert len(gaps[case]) == batches and all(g >= 0 for g in gaps[case])
    assert by["samples_per_s"] > 0 and by["mb_per_s"] > 0
    # decoded bytes per row: id int64 + label int32 + 8 float32 features = 44 bytes
    assert by["mb_per_s"] == pytest.approx(by["samples_per_s"] * 44 / 1e6)
    assert by["first_batch_latency_ms"] == pytest.approx(gaps[case][0] * 1e3)
    assert 0 <= by["p99_batch_latency_ms"] <= max(gaps[case][1:]) * 1e3 + 1e-9
    # the whole read (start-up included) is the slower rate, over at least every gap
    assert by["wall_samples_per_s"] <= rows / sum(gaps[case]) + 1e-6
    assert "metrics_left_out" not in doc["context"]


@pytest.mark.slow
def test_pyarrow_and_torch_workers_read_every_row(tmp_path: Path) -> None:
    import tempfile

    rows, batch, files = 5000, 512, 2
    # a short TMPDIR: the workers' unix socket lives under it (see the test below)
    scratch = Path(tempfile.mkdtemp(prefix="dl-", dir="/tmp"))
    proc, doc = run_suite(tmp_path, {"rows": rows, "batch_size": batch, "workers": 2, "files": files, "feature_dim": 8},
                          TMPDIR=str(scratch))
    assert proc.returncode == 0, proc.stderr
    assert doc["status"] == "ok"
    gaps = json.loads((tmp_path / doc["samples"]["batches"]).read_text())["batch_gaps"]
    batches = files * math.ceil(rows / files / batch)
    _check_case(doc, gaps, "pyarrow", batches, rows)
    _check_case(doc, gaps, "torch_workers=2", batches, rows)
    assert doc["context"]["dataset_bytes_on_disk"] > 0
    assert list(scratch.iterdir()) == []  # the generated dataset was removed
    import shutil

    shutil.rmtree(scratch, ignore_errors=True)


def test_a_temp_directory_too_long_for_the_workers_socket_is_refused(tmp_path: Path) -> None:
    """Under pytest-xdist's temp paths the workers' sockets failed ("AF_UNIX path too long") and
    the loader waited forever: the suite now says so before measuring."""
    pytest.importorskip("torch")
    long = tmp_path / ("d" * 90)
    long.mkdir()
    proc, doc = run_suite(tmp_path, {"rows": 100, "batch_size": 50, "workers": 1, "files": 1, "feature_dim": 2},
                          TMPDIR=str(long))
    assert proc.returncode != 0
    assert "set TMPDIR to a path of at most 75 bytes" in proc.stderr + json.dumps(doc or {})


def test_without_torch_only_the_pyarrow_case_runs(tmp_path: Path) -> None:
    proc, doc = run_suite(tmp_path, {"rows": 3000, "batch_size": 1000, "files": 1, "feature_dim": 8},
                          PYTHONPATH=str(HIDE_TORCH))
    assert proc.returncode == 0, proc.stderr
    assert doc["status"] == "ok"
    assert {m["case"] for m in doc["metrics"]} == {"pyarrow"}
    assert doc["context"]["torch_case"] == "skipped: torch not installed"
    gaps = json.loads((tmp_path / doc["samples"]["batches"]).read_text())["batch_gaps"]
    _check_case(doc, gaps, "pyarrow", 3, 3000)


@pytest.mark.parametrize(("params", "named"), [({"batch_size": 0}, "batch_size"), ({"rows": "many"}, "rows"),
                                               ({"workers": -1}, "workers")])
def test_bad_parameters_fail_with_the_parameter_named(tmp_path: Path, params: dict[str, Any], named: str) -> None:
    proc, doc = run_suite(tmp_path, params)
    assert proc.returncode == 1
    assert doc["status"] == "failed" and f"parameter {named}" in doc["reason"]


def test_first_batch_latency_includes_what_iter_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """A DataLoader starts its workers in iter(loader); the clock started after it, so the first
    batch latency left start-up out. A fake clock: iter() takes 5 s, each batch 1 s."""
    import numpy as np

    from benchrun.suites import dataloader

    clock = [100.0]
    monkeypatch.setattr(dataloader.time, "perf_counter", lambda: clock[0])

    class SlowStart:
        def __iter__(self):
            clock[0] += 5.0  # worker start-up

            def batches():
                for k in range(3):
                    clock[0] += 1.0
                    yield {"id": np.arange(k * 4, k * 4 + 4)}
            return batches()

    r = dataloader.time_loader(SlowStart(), to_numpy=False)
    assert r["gaps"] == [6.0, 1.0, 1.0] and r["wall_s"] == 8.0
    assert r["rows"] == 12 and r["id_sum"] == sum(range(12))


def test_samples_per_s_is_the_steady_rate_after_the_first_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Review: samples_per_s divided every row by the whole read, worker start-up included (at the
    canary's size the first batch took 60 % of it: 74k samples/s reported, ~195k steady). A fake
    clock: iter() takes 5 s, then 3 batches of 4 rows (44 bytes a row), 1 s each."""
    import numpy as np

    from benchrun.suites import dataloader

    clock = [100.0]
    monkeypatch.setattr(dataloader.time, "perf_counter", lambda: clock[0])

    class SlowStart:
        def __iter__(self):
            clock[0] += 5.0

            def batches():
                for k in range(3):
                    clock[0] += 1.0
                    yield {"id": np.arange(k * 4, k * 4 + 4, dtype=np.int64), "x": np.zeros((4, 9), np.float32)}
            return batches()

    found, why = dataloader.case_metrics(dataloader.time_loader(SlowStart(), to_numpy=False))
    by = {name: value for name, value, *_ in found}
    assert why is None
    assert by["samples_per_s"] == pytest.approx(8 / 2.0)  # rows after the first batch / 2 s after its arrival
    assert by["mb_per_s"] == pytest.approx(8 * 44 / 2.0 / 1e6)
    assert by["wall_samples_per_s"] == pytest.approx(12 / 8.0)  # the whole read, start-up in it
    assert by["first_batch_latency_ms"] == pytest.approx(6000.0)
    assert by["p99_batch_latency_ms"] == pytest.approx(1000.0)


def test_a_read_of_one_batch_leaves_the_steady_metrics_out_and_says_why(tmp_path: Path) -> None:
    """Review: with one batch p99_batch_latency_ms fell back to the first batch's latency
    (start-up) and samples_per_s was the whole read's: no steady rate exists, so none is given."""
    proc, doc = run_suite(tmp_path, {"rows": 500, "batch_size": 1024, "files": 1, "feature_dim": 8},
                          PYTHONPATH=str(HIDE_TORCH))
    assert proc.returncode == 0, proc.stderr
    assert doc["status"] == "ok"
    assert {m["name"] for m in doc["metrics"]} == {"wall_samples_per_s", "first_batch_latency_ms"}
    left = doc["context"]["metrics_left_out"]["pyarrow"]
    assert left["metrics"] == ["samples_per_s", "mb_per_s", "p99_batch_latency_ms"]
    assert "1 batch" in left["reason"] and "no steady rate" in left["reason"]


@pytest.mark.slow
def test_the_measured_window_is_the_reads_alone(tmp_path: Path) -> None:
    """Review: the two reads' spans merge into min..max, so the torch import and the loader's
    construction between them counted as measured in the telemetry summaries."""
    import shutil
    import tempfile

    pytest.importorskip("torch")
    scratch = Path(tempfile.mkdtemp(prefix="dl-", dir="/tmp"))
    try:
        proc, doc = run_suite(tmp_path, {"rows": 2000, "batch_size": 500, "workers": 1, "files": 1,
                                         "feature_dim": 8}, TMPDIR=str(scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr
    gaps = json.loads((tmp_path / doc["samples"]["batches"]).read_text())["batch_gaps"]
    assert set(gaps) == {"pyarrow", "torch_workers=1"}
    window = doc["measured_window"]["end_unix"] - doc["measured_window"]["start_unix"]
    reads = sum(sum(g) for g in gaps.values())  # first arrival after iter() ... last arrival, per read
    assert reads <= window < reads + 0.15, (window, reads)  # importing torch alone takes longer
