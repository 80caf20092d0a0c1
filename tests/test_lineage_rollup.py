"""`benchrun lineage` traces the number benchrun publishes, and the hot metrics publish that number too.

A metric with several rows per replicate (one per rank) is published as the median over the ok
replicates of each replicate's median over its rows (`benchrun.stats.perlaunch`: `benchrun show`, the
report, the comparison). Lineage grouped by rank_id instead: for all-reduce's `rank_p50_time_us` it
printed only per-rank medians (1803.6 and 1849.5 where show said 1826.6), and for
`slowest_rank_arrival_lag_us` (one row per replicate under whichever rank was slowest) it split the metric
by that rank ("rank 0: 57.10 over 1 replicates", "rank 1: 47.86 over 4" where show said 56.27 over 5) and
still said "lineage verified". The hot metrics split the slowest rank's lag the same way.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from benchrun.cli import app
from benchrun.commands import summary_rows
from benchrun.hotmetrics import Budget, render
from benchrun.stats.load import replicate_table
from benchrun.store import open_store
from benchrun.suites.result import metric, result_path
from benchrun.warehouse import curate_run
from benchrun.warehouse.lineage import trace
from test_store_helpers import make_run_dir

RUN = "run-rollup"
CASE = "bytes=1024"
# rank_p50_time_us: one row per rank in every replicate; the published value (each replicate's median of
# its two ranks: 15, 13.5, 18, 21, 26 -> 18) is neither rank's own median (rank 0: 12, rank 1: 20).
RANK_P50 = {1: (10.0, 20.0), 2: (14.0, 13.0), 3: (11.0, 25.0), 4: (30.0, 12.0), 5: (12.0, 40.0)}
# slowest_rank_arrival_lag_us: one row per replicate, under whichever rank was slowest there.
LAG = {1: (0, 57.1), 2: (1, 47.0), 3: (1, 56.27), 4: (1, 60.0), 5: (1, 40.0)}
FAILED = 6  # a replicate that failed part-way, its metrics kept: no part of any published figure


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("rollup") / "h"
    run_dir = make_run_dir(home, RUN, replicates=FAILED)
    launches = []
    for k in range(1, FAILED + 1):
        p = result_path(run_dir, RUN, "gemm", k)
        doc = json.loads(p.read_text())
        r0, r1 = RANK_P50.get(k, (999.0, 999.0))
        worst, lag = LAG.get(k, (0, 999.0))
        doc["metrics"] += [metric("rank_p50_time_us", r0, "us", "lower", case=CASE, rank_id=0, node_name="n0"),
                           metric("rank_p50_time_us", r1, "us", "lower", case=CASE, rank_id=1, node_name="n1"),
                           metric("slowest_rank_arrival_lag_us", lag, "us", "lower", case=CASE, rank_id=worst,
                                  node_name=f"n{worst}")]
        status = "failed" if k == FAILED else "ok"
        doc.update(status=status, reason="exit code 1" if status == "failed" else None)
        p.write_text(json.dumps(doc))
        # the launch record as a run writes it: what `benchrun show --all` summarises
        launches.append({"run_id": RUN, "layer": "micro", "suite": "gemm", "replicate": k,
                         "benchmark_case_id": doc["benchmark_case_id"], "status": status, "reason": doc["reason"],
                         "exit_code": 1 if status == "failed" else 0, "wall_s": 1.0, "t_request": 0.0,
                         "t_spawned": 0.0, "t_finished": 1.0, "log": "", "result": str(p.relative_to(run_dir)),
                         "metrics": doc["metrics"]})
    (run_dir / "structured" / f"{RUN}_launches.json").write_text(json.dumps(launches))
    manifest = open_store(None, home).put_run_dir(run_dir, RUN)
    status = json.loads((run_dir / "status.json").read_text())
    (run_dir / "status.json").write_text(json.dumps({**status, "artifact_manifest_digest": manifest.digest}))
    curate_run(run_dir, home, manifest)
    return home


def published(home: Path, name: str) -> tuple[float, int]:
    """The figure `benchrun show --all` prints (its summary rows) and its replicate count, checked against the
    trial statistics' own replicate table (the report's and the comparison's)."""
    run_dir = home / "runs" / RUN
    [row] = [r for r in summary_rows(run_dir, RUN) if r["metric"] == name and r["case"] == CASE]
    table = replicate_table(run_dir)
    per_rep = table[(table["metric"] == name) & (table["case"] == CASE)]["value"]
    assert statistics.median(per_rep) == row["median"]
    return row["median"], len(per_rep)


@pytest.mark.parametrize("name, expected", [("rank_p50_time_us", 18.0), ("slowest_rank_arrival_lag_us", 56.27)])
def test_lineage_traces_the_published_median_of_a_metric_with_ranks(home: Path, name: str, expected: float) -> None:
    value, n = published(home, name)
    assert (value, n) == (expected, 5)
    [report] = trace(home, RUN, name)
    assert report.median == value and report.replicates == n
    assert report.rank_id is None  # the ranks rolled up: no one rank's figure
    # every row of every ok replicate is a verified step, its rank kept; the failed replicate is none
    assert sorted({s.replicate for s in report.steps}) == [1, 2, 3, 4, 5]
    assert all("stored bytes re-hash to it" in s.checks for s in report.steps)
    if name == "rank_p50_time_us":
        assert [(s.replicate, s.rank_id, s.value) for s in report.steps] == [
            (k, rank, RANK_P50[k][rank]) for k in range(1, 6) for rank in (0, 1)]
        assert report.rows_per_replicate == 2
        # the per-rank breakdown is extra detail, each rank's own median over its replicates
        assert [(r.rank_id, r.median, r.replicates) for r in report.ranks] == [(0, 12.0, 5), (1, 20.0, 5)]
    else:
        assert [(s.replicate, s.rank_id, s.value) for s in report.steps] == [
            (k, LAG[k][0], LAG[k][1]) for k in range(1, 6)]
        assert report.rows_per_replicate == 1 and report.ranks == []


def test_the_lineage_command_prints_the_published_figure_first(home: Path) -> None:
    env = {"BENCHRUN_HOME": str(home)}
    out = CliRunner().invoke(app, ["lineage", RUN, "slowest_rank_arrival_lag_us"], env=env)
    assert out.exit_code == 0, out.output
    assert f"case='{CASE}': median 56.27 us over 5 replicates" in out.output
    assert "rank 0: median" not in out.output and "over 1 replicates" not in out.output
    assert "r1 rank 0 = 57.1" in out.output and "r2 rank 1 = 47" in out.output
    out = CliRunner().invoke(app, ["lineage", RUN, "rank_p50_time_us"], env=env)
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    head = next(i for i, line in enumerate(lines) if f"case='{CASE}': median" in line)
    assert "median 18 us over 5 replicates" in lines[head]
    assert "rank 0: median 12 over 5 replicates; rank 1: median 20 over 5 replicates" in lines[head + 1]
    out = CliRunner().invoke(app, ["lineage", RUN, "rank_p50_time_us", "--json"], env=env)
    assert out.exit_code == 0, out.output
    [doc] = json.loads(out.output)
    assert doc["median"] == 18.0 and doc["replicates"] == 5 and doc["rank_id"] is None
    assert [r["rank_id"] for r in doc["ranks"]] == [0, 1] and len(doc["steps"]) == 10
    assert {s["rank_id"] for s in doc["steps"]} == {0, 1}


def test_hot_metrics_publish_a_metric_whose_rank_changes_between_replicates_as_one_rollup(home: Path) -> None:
    run_dir = home / "runs" / RUN
    status = json.loads((run_dir / "status.json").read_text())
    hm = render(run_dir, status, Budget(10_000))
    lag = [s for s in hm.series if s.name == "benchrun_slowest_rank_arrival_lag_us"]
    assert len(lag) == 1 and lag[0].value == published(home, "slowest_rank_arrival_lag_us")[0]
    assert "rank_id" not in dict(lag[0].labels) and "node_name" not in dict(lag[0].labels)
    assert any("slowest_rank_arrival_lag_us" in n for n in hm.notes)
    # every replicate had the same ranks: the per-rank series stay, each rank's median over the replicates
    ranks = {dict(s.labels)["rank_id"]: s.value for s in hm.series if s.name == "benchrun_rank_p50_time_us"}
    assert ranks == {"0": 12.0, "1": 20.0}
