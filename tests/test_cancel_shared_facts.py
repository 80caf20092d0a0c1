"""A run canceled from another pod on Kubernetes: ``benchrun cancel``, the controller's
``cancel_deleted_run`` and the failure sensors run in a home that pulled only the run's status.json.
Its facts, curated by the worker while it was Analyzing, were left so: ``curate_final_status`` found
no manifest.json in that home and curated nothing, and the shared warehouse read ``Analyzing`` until a
rebuild (found in review). The whole run was then pulled into that home (its requests and logs, on a
sensor tick that can be killed half-way), and a home whose files were behind its status curated them
(found in review): now only what those facts read is pulled, into a scratch folder. A real S3 API
server (moto) on loopback; the parquet layout (with shared state the Iceberg tables need a Postgres
catalog), whose partitions go through the shared prefix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchrun import runend, sharedstate
from benchrun.errors import BenchrunError
from benchrun.rundir import RunDir
from benchrun.telemetry.samples import Sample, telemetry_relpath, write_samples
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
    write_samples(run_dir / telemetry_relpath(RUN, "gemm", 1),  # what telemetry_slice_fact reads besides
                  [Sample(1796029160.0 + i, "psutil", "node", "cpu_util_pct", 50.0 + i, "%", interval_s=1.0)
                   for i in range(3)])
    RunDir(worker, RUN).update_status(phase="Analyzing", outcome="succeeded", finished_utc=None)
    curate_run(run_dir, worker)
    sharedstate.push_run(run_dir, worker)


def _shared_phase(reader: Path) -> list[tuple[str, str]]:
    """The run's benchmark_run_fact row as another pod reads it: the shared warehouse pulled, then queried."""
    sharedstate.pull_run(RUN, reader, warehouse=True)
    got = query("SELECT phase, outcome FROM benchmark_run_fact WHERE run_id = ?", reader, [RUN])
    return [(r["phase"], r["outcome"]) for r in got.table.to_pylist()]


def _shared_slices(reader: Path) -> tuple[int, int]:
    """The run's telemetry_slice_fact rows of its samples, and its environment rows with a window end
    (the run's finish: none while it was Analyzing), as another pod reads them."""
    sharedstate.pull_run(RUN, reader, warehouse=True)
    got = query("SELECT source, window_end_utc FROM telemetry_slice_fact WHERE run_id = ?", reader, [RUN])
    rows = got.table.to_pylist()
    return (sum(r["source"] == "psutil" for r in rows),
            sum(r["source"] == "environment" and r["window_end_utc"] is not None for r in rows))


def _files(home: Path) -> set[str]:
    run_dir = home / "runs" / RUN
    return {p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*") if p.is_file()}


def test_a_cancel_from_a_home_that_pulled_only_the_status_brings_the_shared_facts_to_canceled(
        parquet_layout: None, tmp_path: Path, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _worker_curated_while_analyzing(tmp_path / "worker")
    pulled: list[str] = []  # what the cancel downloads of the run (pull_tree's `only` takes)
    pull_tree = sharedstate.SharedState.pull_tree

    def recorded(self: sharedstate.SharedState, home: Path, rel: str, *, only: Any = None, **kwargs: Any) -> int:
        taken = None if only is None else (lambda r: only(r) and not pulled.append(r))
        return pull_tree(self, home, rel, only=taken, **kwargs)

    monkeypatch.setattr(sharedstate.SharedState, "pull_tree", recorded)
    assert _shared_phase(tmp_path / "before") == [("Analyzing", "succeeded")]
    assert _shared_slices(tmp_path / "before") == (3, 0)

    canceler = tmp_path / "canceler"  # `benchrun cancel` (runctl.cancel_run) on another pod
    sharedstate.pull_run(RUN, canceler, status_only=True)
    assert not (canceler / "runs" / RUN / "manifest.json").exists()
    had = _files(canceler)
    assert runend.cancel_run(canceler, RUN, "canceled by `benchrun cancel` (test)")

    assert sharedstate.shared_state().read_status(RUN)["phase"] == "Canceled"
    assert _shared_phase(tmp_path / "reader") == [("Canceled", "canceled")]
    # telemetry_slice_fact curated again from the pulled samples, under the finished status
    assert _shared_slices(tmp_path / "reader") == (3, 2)
    # nothing of the run pulled into the home that canceled (its requests, logs, samples stay shared)
    assert _files(canceler) == had and not (canceler / "runs" / RUN / "raw").exists()
    assert sharedstate.files_behind(canceler, RUN)
    top = f"runs/{RUN}/"
    assert sorted(pulled) == sorted([
        f"{top}status.json", f"{top}manifest.json", f"{top}raw/{RUN}_gemm_r1_telemetry.parquet",
        *(f"{top}structured/{RUN}_{doc}" for doc in ("environment.json", "spec.yaml", "launches.json")),
        *(f"{top}structured/{RUN}_{suite}_r{k}.json" for suite in ("gemm", "serving") for k in (1, 2, 3))])
    # the worker's results and logs are still all there (the home that canceled pulled, never pruned)
    assert f"runs/{RUN}/raw/{RUN}_gemm_r1.log" in sharedstate.shared_state().list_keys(f"runs/{RUN}/raw/")


def test_a_home_whose_files_are_behind_never_curates_them(
        parquet_layout: None, tmp_path: Path, bucket: str) -> None:
    """A home holding the sealed run as it once was, then only a later status (the run re-run elsewhere,
    unsealed): its stale files are not curated under the new status (before, they were, and pushed)."""
    worker = tmp_path / "worker"
    _worker_curated_while_analyzing(worker)
    canceler = tmp_path / "canceler"
    sharedstate.pull_run(RUN, canceler)  # the sealed run, whole
    assert (canceler / "runs" / RUN / "manifest.json").is_file()

    (worker / "runs" / RUN / "manifest.json").unlink()  # re-run: running again, unsealed
    RunDir(worker, RUN).update_status(phase="Running", outcome=None)
    sharedstate.push_run(worker / "runs" / RUN, worker)
    assert f"runs/{RUN}/manifest.json" not in sharedstate.shared_state().list_keys(f"runs/{RUN}/")
    sharedstate.pull_run(RUN, canceler, status_only=True)
    assert sharedstate.files_behind(canceler, RUN)

    assert runend.cancel_run(canceler, RUN, "canceled by `benchrun cancel` (test)")
    assert sharedstate.shared_state().read_status(RUN)["phase"] == "Canceled"
    assert not (canceler / "warehouse").exists()  # nothing curated here, so nothing pushed
    assert _shared_phase(tmp_path / "reader") == [("Analyzing", "succeeded")]


def test_a_pull_that_fails_does_not_lose_the_cancel(
        parquet_layout: None, tmp_path: Path, bucket: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    _worker_curated_while_analyzing(tmp_path / "worker")
    canceler = tmp_path / "canceler"
    sharedstate.pull_run(RUN, canceler, status_only=True)

    pull_tree = sharedstate.SharedState.pull_tree

    def unreachable(self: sharedstate.SharedState, home: Path, rel: str, **kwargs: object) -> int:
        if rel == f"runs/{RUN}/":  # the run's files, not the status the cancel reads
            raise BenchrunError("shared state: download failed (EndpointConnectionError)")
        return pull_tree(self, home, rel, **kwargs)

    monkeypatch.setattr(sharedstate.SharedState, "pull_tree", unreachable)
    assert runend.cancel_run(canceler, RUN, "canceled by `benchrun cancel` (test)")
    assert RunDir(canceler, RUN).read_status()["phase"] == "Canceled"
    assert sharedstate.shared_state().read_status(RUN)["phase"] == "Canceled"
    assert f"benchrun rebuild-warehouse {RUN}" in caplog.text
