"""Issue 16 N: lineage addresses are relative to the store's root (moving the home keeps them
valid), and `benchrun rebuild-warehouse [RUN_ID...]` re-creates the facts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from benchrun.cli import app
from benchrun.errors import BenchrunError
from benchrun.store import open_store
from benchrun.warehouse import curate_run, lake, query
from benchrun.warehouse.lakecatalog import written_under
from benchrun.warehouse.rebuild import rebuild_warehouse
from benchrun.warehouse.lineage import trace
from test_store_helpers import make_run_dir


def _stored(home: Path, run_id: str):
    run_dir = make_run_dir(home, run_id)
    manifest = open_store(None, home).put_run_dir(run_dir, run_id)
    status = json.loads((run_dir / "status.json").read_text())  # as a run records it once its evidence is stored
    (run_dir / "status.json").write_text(json.dumps({**status, "artifact_manifest_digest": manifest.digest}))
    return run_dir, manifest


def test_lineage_survives_moving_the_home(tmp_path: Path) -> None:
    """Lineage stored absolute file:// addresses, so moving the home broke it."""
    old = tmp_path / "old"
    run_dir, manifest = _stored(old, "run-a")
    curate_run(run_dir, old, manifest)
    uris = query("SELECT DISTINCT raw_uri FROM measurement_fact WHERE raw_uri IS NOT NULL", old).table.column(0).to_pylist()
    assert uris and all(u.startswith("sha256/") for u in uris)  # relative to the store's root
    store_uri = query("SELECT store_uri, manifest_uri FROM artifact_lineage_dim", old).table.to_pylist()[0]
    assert store_uri["store_uri"] == "objects/" and store_uri["manifest_uri"].startswith("manifests/run-a/")
    new = tmp_path / "moved"
    shutil.move(str(old), str(new))
    with pytest.raises(BenchrunError, match="moved or copied.*rebuild-warehouse"):  # Iceberg's absolute paths
        trace(new, "run-a", "gflops")
    with pytest.raises(BenchrunError, match="run it without them"):  # a partial rebuild would lose the rest
        rebuild_warehouse(new, ["run-a"])
    report = rebuild_warehouse(new)
    assert list(report.rebuilt) == ["run-a"] and not report.failed
    assert written_under(lake.catalog(new)).removeprefix("file://").startswith(str(new.resolve()))
    [report] = trace(new, "run-a", "gflops")
    assert report.median == 11.0 and len(report.steps) == 3
    assert all("stored bytes re-hash to it" in s.checks for s in report.steps)


def test_rebuild_warehouse_from_run_directories_and_from_the_store(bench_home: Path) -> None:
    a, _ = _stored(bench_home, "run-a")
    b, _ = _stored(bench_home, "run-b")
    for rd in (a, b):
        curate_run(rd, bench_home)
    before = query("SELECT run_id, metric, value FROM measurement_fact ORDER BY ALL", bench_home).table.to_pylist()
    shutil.rmtree(bench_home / "warehouse")
    shutil.rmtree(b)  # run-b survives only in the artifact store
    out = CliRunner().invoke(app, ["rebuild-warehouse"])
    assert out.exit_code == 0, out.output
    assert "rebuilt run-a" in out.output and "rebuilt run-b" in out.output and "(no run directory)" in out.output
    after = query("SELECT run_id, metric, value FROM measurement_fact ORDER BY ALL", bench_home).table.to_pylist()
    assert after == before
    out = CliRunner().invoke(app, ["rebuild-warehouse", "run-a", "run-zz"])
    assert out.exit_code == 1 and "run-zz: no run directory" in str(out.exception)
    assert "rebuilt run-a" in out.output


def test_lineage_of_a_per_rank_metric_keeps_its_ranks_apart(tmp_path: Path) -> None:
    """Lineage pooled both ranks into one median and said "over 6 replicates" for 3, each listed twice;
    then it gave only one median per rank, never the published one (each replicate's ranks taken as their
    median first, then the median over replicates: benchrun.stats.perlaunch). Now the headline is the
    published rollup over 3 replicates, every rank's row a step, the per-rank medians kept as detail."""
    from benchrun.suites.result import metric, result_path

    home = tmp_path / "h"
    run_dir = make_run_dir(home, "run-r")
    for k in (1, 2, 3):
        p = result_path(run_dir, "run-r", "gemm", k)
        doc = json.loads(p.read_text())
        doc["metrics"] += [metric("rank_p50_time_us", 10.0 * k + rank, "us", "lower", case="bytes=1024", rank_id=rank)
                           for rank in (0, 1)]
        p.write_text(json.dumps(doc))
    manifest = open_store(None, home).put_run_dir(run_dir, "run-r")
    status = json.loads((run_dir / "status.json").read_text())
    (run_dir / "status.json").write_text(json.dumps({**status, "artifact_manifest_digest": manifest.digest}))
    curate_run(run_dir, home, manifest)
    reports = trace(home, "run-r", "rank_p50_time_us")
    assert [(r.rank_id, r.median, r.replicates, [(s.replicate, s.rank_id) for s in r.steps]) for r in reports] == [
        (None, 20.5, 3, [(1, 0), (1, 1), (2, 0), (2, 1), (3, 0), (3, 1)])]
    assert [(k.rank_id, k.median, k.replicates) for k in reports[0].ranks] == [(0, 20.0, 3), (1, 21.0, 3)]
    out = CliRunner().invoke(app, ["lineage", "run-r", "rank_p50_time_us"], env={"BENCHRUN_HOME": str(home)})
    assert out.exit_code == 0 and "case='bytes=1024': median 20.5 us over 3 replicates" in out.output, out.output
    assert "rank 1: median 21 over 3 replicates" in out.output  # the per-rank detail, under the published line
    [plain] = trace(home, "run-r", "gflops")  # a metric without ranks: as before
    assert plain.rank_id is None and plain.replicates == 3


def test_the_tables_curated_again_at_the_final_status_are_those_that_read_it(tmp_path: Path) -> None:
    """run_status curated only benchmark_run_fact again: the run-window telemetry rows kept the
    null end they were curated with while the run was Analyzing (a rebuild then changed them)."""
    from benchrun.warehouse.curate import FINAL_STATUS_TABLES, build_tables
    from benchrun.warehouse.sources import load_sources

    run_dir = make_run_dir(tmp_path, "run-s")
    final = json.loads((run_dir / "status.json").read_text())

    def rows(status):
        (run_dir / "status.json").write_text(json.dumps(status))
        out = {}
        for table, produce in build_tables(load_sources(run_dir, None, tmp_path)).items():
            out[table] = [t.to_pylist() for t in produce() if t.num_rows]
        return out

    analyzing = rows({**final, "phase": "Analyzing", "finished_utc": None})
    done = rows(final)
    changed = sorted(t for t in done if done[t] != analyzing[t])
    assert changed == sorted(FINAL_STATUS_TABLES)


def test_lineage_verifies_the_median_of_the_ok_replicates_as_every_other_reader_does(tmp_path: Path) -> None:
    """Review: lineage's median took every replicate's rows, a failed one's partial metrics and one the launcher
    failed after it wrote ok included ("median 100 over 5" where show said 101 over 3)."""
    from benchrun.suites.result import result_path

    home = tmp_path / "h"
    run_dir = make_run_dir(home, "run-f")
    values = {}
    for k in (1, 2, 3):
        doc = json.loads(result_path(run_dir, "run-f", "gemm", k).read_text())
        values[k] = [m["value"] for m in doc["metrics"] if m["name"] == "gflops"][0]
    p = result_path(run_dir, "run-f", "gemm", 3)  # failed part-way, its partial metrics kept
    doc = json.loads(p.read_text())
    p.write_text(json.dumps({**doc, "status": "failed", "reason": "exit code 1"}))
    manifest = open_store(None, home).put_run_dir(run_dir, "run-f")
    status = json.loads((run_dir / "status.json").read_text())
    (run_dir / "status.json").write_text(json.dumps({**status, "artifact_manifest_digest": manifest.digest}))
    curate_run(run_dir, home, manifest)
    [report] = trace(home, "run-f", "gflops")
    assert report.replicates == 2 and [s.replicate for s in report.steps] == [1, 2]
    assert report.median == pytest.approx((values[1] + values[2]) / 2)
