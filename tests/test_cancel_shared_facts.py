"""A run canceled from another pod on Kubernetes: ``benchrun cancel``, the controller's
``cancel_deleted_run`` and the failure sensors run in a home that pulled only the run's status.json.
Its facts, curated by the worker while it was Analyzing, were left so: ``curate_final_status`` found
no manifest.json in that home and curated nothing, and the shared warehouse read ``Analyzing`` until a
rebuild (found in review). A real S3 API server (moto) on loopback; the parquet layout (with shared
state the Iceberg tables need a Postgres catalog), whose partitions go through the shared prefix."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchrun import runend, sharedstate
from benchrun.errors import BenchrunError
from benchrun.rundir import RunDir
from benchrun.warehouse import curate_run, query
from test_store_helpers import make_run_dir, s3_env, shared_bucket  # noqa: F401  (fixture)

RUN = "run-canceled-elsewhere"


@pytest.fixture
def bucket(s3_env: str, monkeypatch: pytest.MonkeyPatch) -> str:  # noqa: F811
    return shared_bucket(s3_env, monkeypatch)


def _worker_curated_while_analyzing(worker: Path) -> None:
    """The run worker sealed the run (manifest.json), ``warehouse_tables`` curated it while Analyzing,
    and the run was pushed; the worker is then stopped before its ``run_status`` step."""
    run_dir = make_run_dir(worker, RUN)
    RunDir(worker, RUN).update_status(phase="Analyzing", outcome="succeeded", finished_utc=None)
    curate_run(run_dir, worker)
    sharedstate.push_run(run_dir, worker)


def _shared_phase(reader: Path) -> list[tuple[str, str]]:
    """The run's benchmark_run_fact row as another pod reads it: the shared warehouse pulled, then queried."""
    sharedstate.pull_run(RUN, reader, warehouse=True)
    got = query("SELECT phase, outcome FROM benchmark_run_fact WHERE run_id = ?", reader, [RUN])
    return [(r["phase"], r["outcome"]) for r in got.table.to_pylist()]


def test_a_cancel_from_a_home_that_pulled_only_the_status_brings_the_shared_facts_to_canceled(
        parquet_layout: None, tmp_path: Path, bucket: str) -> None:
    _worker_curated_while_analyzing(tmp_path / "worker")
    assert _shared_phase(tmp_path / "before") == [("Analyzing", "succeeded")]

    canceler = tmp_path / "canceler"  # `benchrun cancel` (runctl.cancel_run) on another pod
    sharedstate.pull_run(RUN, canceler, status_only=True)
    assert not (canceler / "runs" / RUN / "manifest.json").exists()
    assert runend.cancel_run(canceler, RUN, "canceled by `benchrun cancel` (test)")

    assert sharedstate.shared_state().read_status(RUN)["phase"] == "Canceled"
    assert _shared_phase(tmp_path / "reader") == [("Canceled", "canceled")]
    # the worker's results and logs are still all there (the home that canceled pulled, never pruned)
    assert sharedstate.shared_state().list_keys(f"runs/{RUN}/raw/")


def test_a_pull_that_fails_does_not_lose_the_cancel(
        parquet_layout: None, tmp_path: Path, bucket: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    _worker_curated_while_analyzing(tmp_path / "worker")
    canceler = tmp_path / "canceler"
    sharedstate.pull_run(RUN, canceler, status_only=True)

    def unreachable(*args: object, **kwargs: object) -> None:
        raise BenchrunError("shared state: download failed (EndpointConnectionError)")

    monkeypatch.setattr(sharedstate, "pull_run", unreachable)
    assert runend.cancel_run(canceler, RUN, "canceled by `benchrun cancel` (test)")
    assert RunDir(canceler, RUN).read_status()["phase"] == "Canceled"
    assert sharedstate.shared_state().read_status(RUN)["phase"] == "Canceled"
    assert f"benchrun rebuild-warehouse {RUN}" in caplog.text
