"""The HTML report (benchrun.report), the CLI commands, and the statistics assets through dg.materialize."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys

import dagster as dg
import numpy as np
import pandas as pd
import pytest

from benchrun.stats.analysis import compare_runs, write_comparison
from benchrun.stats.baseline import promote
from benchrun.stats.synthetic import lognormal_replicates, make_run
from resources.launcher import LauncherResource


def _metrics(rng, level=1.0, outlier=False):
    lat = list(lognormal_replicates(rng, 50, 0.02, 5))
    if outlier:
        lat[-1] = 90.0
    return {("serve", "c=8", "tokens_per_second"): (lognormal_replicates(rng, 100 * level, 0.02, 5), "tok/s", "higher"),
            ("serve", "c=8", "p99_latency_ms"): (lat, "ms", "lower"),
            ("gemm", "n=512", "tflops"): (lognormal_replicates(rng, 1.0, 0.02, 5), "TFLOP/s", "higher")}


def _serving(n_reps=5):
    return [[{"point": f"c={c}", "offered_load": c, "bucket": b, "tokens_per_second": 100.0 * c ** 0.7,
              "e2e_ms_p99": 200.0 + 20 * c + (5 if b == "1024/256" else 0), "ttft_ms_p99": 20.0 + 5 * c}
             for c in (1, 4, 8) for b in ("512/128", "1024/256", "all")] for _ in range(n_reps)]


def _requests(rng, n=400, reps=5):
    return [pd.DataFrame({"request_id": [f"r{j}" for j in range(n)], "point": "c=8", "bucket": "512/128",
                          "e2e_ms": rng.gamma(4, 10, n), "ttft_ms": rng.gamma(2, 5, n), "error": [None] * n})
            for _ in range(reps)]


@pytest.fixture()
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    return tmp_path


@pytest.mark.slow
def test_report_is_self_contained_with_all_sections(home):
    from benchrun.report.html import build_report

    rng = np.random.default_rng(0)
    for i in range(20):  # the change-point detector's first 15 nights set its reference
        make_run(home, f"hist-{i:02d}", _metrics(rng, 1.0 if i < 16 else 0.85),
                 status={"created_utc": f"2026-11-{i + 1:02d}T00:00:00Z"})
    base = make_run(home, "base", _metrics(rng), serving={"serve": _serving()})
    cand = make_run(home, "cand", _metrics(rng, 0.9, outlier=True), serving={"serve": _serving()},
                    requests={"serve": _requests(rng)},
                    spec={"spec": {"metrics": {"inference": {"slo": {"e2e_ms": 300, "ttft_ms": 50}}}}})
    gate, res = compare_runs(base, cand)
    write_comparison(gate, res, "base", cand)
    path = build_report(cand)
    assert path == cand / "reports" / "cand_report.html"
    text = path.read_text()
    # self-contained: no external references at all
    assert not re.search(r"(src|href)=[\"']?(https?:|//|file:)", text)
    assert "<script" not in text
    imgs = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
    # Informative figures only: 5 replicates give no interval narrower than their range, so no
    # strip plots; forest, latency-throughput (3 load points) and history.
    assert len(imgs) == 3
    assert all(base64.b64decode(i)[:8] == b"\x89PNG\r\n\x1a\n" for i in imgs)
    figs = sorted(p.name for p in (cand / "figures").iterdir() if p.suffix == ".png")
    assert figs == ["cand_comparison_forest.png", "cand_history_changepoints.png",
                    "cand_serve_report-latency-throughput.png"]
    # The verdict comes first and answers: a suspected regression against base, not confirmed.
    verdict = text[:text.index("id='headline'")]
    assert "suspected, not confirmed" in verdict and "base" in verdict
    # Headline: the change against the baseline, from the comparison's own numbers.
    comp = json.loads((cand / "structured" / "cand_comparison.json").read_text())
    tps = next(m for m in comp["metrics"] if m["name"] == "tokens_per_second")
    assert tps["verdict"] == "regression" and f"{(tps['ratio'] - 1) * 100:+.1f} %" in text
    headline = text[text.index("id='headline'"):text.index("id='details'")]
    assert "tokens_per_second" in headline and "tflops" in headline
    # Details collapsed, with what the old report showed.
    details = text[text.index("id='details'"):]
    assert details.count("<details>") >= 4
    assert "RegressionDetected" in details and "UnconfirmedRegression" in details
    assert "p99 per load point" in details and "c=8" in details
    assert "hist-16" in details  # the change point in the history (15 % drop from run 16 on)


def test_the_report_s_path_is_recorded_in_status_json(home):
    # the BenchmarkRun's reportRef is read from status.json in pods that pull nothing else
    from benchrun.report.html import write_report
    from benchrun.rundir import RunDir

    rng = np.random.default_rng(0)
    run = make_run(home, "r1", {("gemm", "n=512", "tflops"): (lognormal_replicates(rng, 1.0, 0.02, 5), "TFLOP/s",
                                                              "higher")}, sealed=False)
    path = write_report(run, figures_pending=False)
    st = RunDir.for_run("r1").read_status()
    assert st["report_ref"] == str(path) == str(run / "reports" / "r1_report.html")
    write_report(run, figures_pending=False)  # written again: the same path, status.json not rewritten
    assert RunDir.for_run("r1").read_status()["status_seq"] == st["status_seq"]


@pytest.mark.slow
def test_cli_compare_json_promote_report(home):
    rng = np.random.default_rng(1)
    make_run(home, "base", _metrics(rng), sealed=True)
    make_run(home, "cand", _metrics(rng))
    make_run(home, "drift", _metrics(rng), environment={"kernel": "7.0", "packages": {"torch": "9.9"}})
    run = lambda *a: subprocess.run([sys.executable, "-m", "benchrun.cli", *a], capture_output=True, text=True,
                                    env={**__import__("os").environ, "BENCHRUN_HOME": str(home)})
    r = run("promote", "base")
    assert r.returncode == 0 and (home / "published" / "current").read_text().splitlines()[0] == "base", r.stderr
    r = run("compare", "published/current", "cand", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["exit_code"] == 0 and doc["condition"]["status"] == "False" and not doc["refused"], doc
    rows = doc["metrics"]
    assert len(rows) == 3
    for row in rows:
        assert list(row)[:9] == ["metric", "baseline_median", "candidate_median", "ratio", "ci_low", "ci_high",
                                 "p_value", "verdict", "gating"]
        assert row["ci_low"] <= row["ratio"] <= row["ci_high"]
        assert row["verdict"] != "regression"  # an A/A pair
    assert {r["gating"] for r in rows} == {True, False}
    r = run("compare", "base", "cand")
    assert r.returncode == 0 and "tokens_per_second" in r.stdout and "RegressionDetected=False" in r.stdout
    r = run("compare", "base", "drift")
    assert r.returncode == 4 and "Traceback" not in r.stderr
    assert "environment.kernel" in r.stderr and r.stderr.count("\n") == 1
    r = run("compare", "base", "missing-run")
    assert r.returncode == 1 and "not found" in r.stderr and "Traceback" not in r.stderr
    # cand is signed, and its pinned spec (this fixture's) is not one today's rules admit: signed again all the
    # same (its signature verified, the spec read as written), so the report is written and verify passes
    r = run("report", "cand")
    assert r.returncode == 0 and (home / "runs" / "cand" / "reports" / "cand_report.html").is_file(), r.stderr
    assert "not signed again" not in r.stderr, r.stderr
    from benchrun.provenance.keys import load_signing_key

    r = run("verify", "cand", "--trust-keyid", load_signing_key(home).keyid)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.slow
def test_assets_and_checks_materialize(home):
    from bench_assets.stats_assets import ConfirmRoundResource, stats_assets, stats_checks

    rng = np.random.default_rng(2)
    make_run(home, "base", _metrics(rng), sealed=True, status={"cadence": "nightly"})
    promote("base", home)
    make_run(home, "cand", _metrics(rng, 0.85, outlier=True), status={"cadence": "nightly"},
             requests={"serve": _requests(rng, n=60)},
             spec={"spec": {"metrics": {"inference": {"slo": {"ttft_ms": 50}}}}})
    inst = dg.DagsterInstance.ephemeral()
    inst.add_dynamic_partitions("benchmark_run", ["cand"])
    partitioned = [a for a in stats_assets if a.key.path[-1] != "change_points"]
    # These hand-made runs have no pinned spec to re-run, so the confirmation round is off.
    res = dg.materialize([*partitioned, *stats_checks], instance=inst, partition_key="cand",
                         resources={"confirm_round": ConfirmRoundResource(enabled=False),
                                    "launcher": LauncherResource()}, raise_on_error=True)
    checks = {e.check_name: e for e in res.get_asset_check_evaluations()}
    assert checks["enough_replicates"].passed
    assert not checks["no_outliers"].passed and checks["no_outliers"].severity == dg.AssetCheckSeverity.WARN
    assert checks["lineage_complete"].passed
    p99 = checks["p99_has_enough_requests"]  # p99_latency_ms is primary; 5 × 60 requests at point c=8: too few
    assert not p99.passed and p99.severity == dg.AssetCheckSeverity.WARN and p99.metadata["required"].value == 368
    assert "serve c=8: 300 requests (needs 368)" in p99.description
    # tokens/s down 15 %: a gating regression, unconfirmed without a confirmation round
    assert not checks["no_gating_regression"].passed
    assert checks["no_gating_regression"].severity == dg.AssetCheckSeverity.ERROR
    status = json.loads((home / "runs" / "cand" / "status.json").read_text())
    cond = [c for c in status["conditions"] if c["type"] == "RegressionDetected"]
    assert cond and cond[0]["status"] == "Unknown"
    mats = {m.asset_key.path[-1]: m.materialization.metadata for m in res.get_asset_materialization_events()}
    headline = mats["trial_statistics"]["headline"]
    assert "metric_id" in [c.name for c in headline.schema.columns]
    assert any("tokens_per_second" in r.data["metric_id"] for r in headline.records)
    assert (home / "runs" / "cand" / "reports" / "cand_report.html").is_file()
    # lineage breaks when a raw file changes after the manifest
    (home / "runs" / "cand" / "raw" / "cand_gemm_r1.log").write_text("tampered\n")
    res2 = dg.materialize([*partitioned[:1], *stats_checks[:1]], instance=inst, partition_key="cand")
    lin = {e.check_name: e for e in res2.get_asset_check_evaluations()}["lineage_complete"]
    assert not lin.passed and lin.metadata["gaps"].value == 1


def test_a_check_that_raises_does_not_hide_the_others(home, monkeypatch):
    """The trial_statistics checks share one step: one that raises fails the step, the others still report."""
    from bench_assets import stats_assets

    make_run(home, "cand", _metrics(np.random.default_rng(4)))
    inst = dg.DagsterInstance.ephemeral()
    inst.add_dynamic_partitions("benchmark_run", ["cand"])

    def boom(run_id):
        raise RuntimeError("broken check")

    monkeypatch.setitem(stats_assets.TRIAL_STATISTICS_CHECKS, "no_outliers", boom)
    res = dg.materialize([stats_assets.trial_statistics, stats_assets.trial_statistics_checks], instance=inst,
                         partition_key="cand", raise_on_error=False)
    assert not res.success
    names = sorted(e.check_name for e in res.get_asset_check_evaluations())
    assert names == ["enough_replicates", "interval_width_within_budget", "lineage_complete",
                     "p99_has_enough_requests"]


def test_a_suite_that_failed_every_replicate_is_short_of_replicates(home):
    """The statistics hold ok replicates only, so a suite that failed all of them (here the one
    behind every primary) left no row to be short: every check passed, while a suite with 2 of
    3 ok failed enough_replicates. Zero ok replicates is short too, and names what."""
    from bench_assets import stats_assets

    rng = np.random.default_rng(6)
    spec = {"spec": {"trials": {"minReplicates": 3},
                     "metrics": {"inference": {"primary": ["wf/tokens_per_second[c=4]", "wf/ttft_ms[c=4]"]}}}}
    wf = {("wf", "c=4", "tokens_per_second"): (lognormal_replicates(rng, 100, 0.02, 3), "tok/s", "higher"),
          ("wf", "c=4", "ttft_ms"): (lognormal_replicates(rng, 20, 0.02, 3), "ms", "lower")}
    gemm = {("gemm", "n=64", "tflops"): (lognormal_replicates(rng, 1.0, 0.02, 3), "TFLOP/s", "higher")}
    make_run(home, "dead", {**gemm, **wf}, spec=spec, failed_replicates={"wf": [1, 2, 3]})
    make_run(home, "fine", {**gemm, **wf}, spec=spec)
    inst = dg.DagsterInstance.ephemeral()
    inst.add_dynamic_partitions("benchmark_run", ["dead", "fine"])
    checks = {}
    for run_id in ("dead", "fine"):
        res = dg.materialize([stats_assets.trial_statistics, stats_assets.trial_statistics_checks], instance=inst,
                             partition_key=run_id)
        checks[run_id] = {e.check_name: e for e in res.get_asset_check_evaluations()}
    enough = checks["dead"]["enough_replicates"]
    assert not enough.passed and enough.severity == dg.AssetCheckSeverity.ERROR
    assert "suite wf (0 ok, 3 failed)" in enough.description
    assert "primary wf/tokens_per_second[c=4] (no ok replicate)" in enough.description
    assert "primary wf/ttft_ms[c=4] (no ok replicate)" in enough.description
    assert "gemm" not in enough.description
    for name in ("interval_width_within_budget", "no_outliers"):  # nothing judged is nothing cleared
        assert not checks["dead"][name].passed and "wf/ttft_ms[c=4]" in checks["dead"][name].description
    fine = {n: c for n, c in checks["fine"].items() if n != "interval_width_within_budget"}  # 3 replicates: wide
    assert all(c.passed for c in fine.values()), {n: c.description for n, c in fine.items()}
    assert checks["fine"]["interval_width_within_budget"].metadata["unmeasured_primaries"].value == []


def test_confirm_resource_confirms_regression(home):
    from bench_assets.stats_assets import ConfirmRoundResource, baseline_comparison, no_gating_regression, \
        trial_statistics
    from benchrun.stats.load import replicate_table

    rng = np.random.default_rng(3)
    make_run(home, "base", _metrics(rng), sealed=True)
    promote("base", home)
    make_run(home, "cand", _metrics(rng, 0.85))
    make_run(home, "fresh-b", _metrics(rng))
    make_run(home, "fresh-c", _metrics(rng, 0.85))

    class Fake(ConfirmRoundResource):
        def hook(self, context, baseline_run, candidate_run, launcher):
            return lambda keys: (replicate_table(home / "runs" / "fresh-b"), replicate_table(home / "runs" / "fresh-c"))

    inst = dg.DagsterInstance.ephemeral()
    inst.add_dynamic_partitions("benchmark_run", ["cand"])
    res = dg.materialize([trial_statistics, baseline_comparison, no_gating_regression], instance=inst,
                         partition_key="cand", resources={"confirm_round": Fake(), "launcher": LauncherResource()})
    check = res.get_asset_check_evaluations()[0]
    assert not check.passed and check.metadata["regression_detected"].value == "True"
    doc = json.loads((home / "runs" / "cand" / "structured" / "cand_comparison.json").read_text())
    assert doc["confirmation"] == "confirmed"


def test_confirmation_round_that_cannot_run_says_why(home):
    """A baseline whose pinned spec is gone: RegressionDetected stays Unknown and names the
    missing file; the asset does not crash."""
    from bench_assets.stats_assets import ConfirmRoundResource, baseline_comparison, no_gating_regression, \
        trial_statistics

    rng = np.random.default_rng(3)
    make_run(home, "base", _metrics(rng), sealed=True)
    promote("base", home)
    make_run(home, "cand", _metrics(rng, 0.85))
    (home / "runs" / "base" / "structured" / "base_spec.yaml").unlink()
    inst = dg.DagsterInstance.ephemeral()
    inst.add_dynamic_partitions("benchmark_run", ["cand"])
    res = dg.materialize([trial_statistics, baseline_comparison, no_gating_regression], instance=inst,
                         partition_key="cand",
                         resources={"confirm_round": ConfirmRoundResource(), "launcher": LauncherResource()})
    check = res.get_asset_check_evaluations()[0]
    assert not check.passed and check.metadata["regression_detected"].value == "Unknown"
    status = json.loads((home / "runs" / "cand" / "status.json").read_text())
    cond = [c for c in status["conditions"] if c["type"] == "RegressionDetected"][0]
    # fail closed: the baseline's signed evidence lost a file, so nothing is judged (no round either)
    assert (cond["status"], cond["reason"]) == ("Unknown", "NotComparable")
    assert "base_spec.yaml (missing)" in cond["message"]


def test_change_points_asset(home):
    from bench_assets.stats_assets import change_points

    rng = np.random.default_rng(4)
    for i in range(24):  # the detector's first 15 nights set the reference
        make_run(home, f"n-{i:02d}", {("serve", "", "tokens_per_second"):
                                      (rng.normal(100 if i < 18 else 80, 1, 3), "tok/s", "higher")},
                 status={"cadence": "nightly", "created_utc": f"2026-11-{i + 1:02d}T00:00:00Z"})
    res = dg.materialize([change_points], instance=dg.DagsterInstance.ephemeral())
    meta = res.get_asset_materialization_events()[0].materialization.metadata
    assert meta["change_points"].value == 1 and meta["runs"].value == 24 and meta["new_change_points"].value == 1
    again = dg.materialize([change_points], instance=dg.DagsterInstance.ephemeral())  # same history: nothing new
    assert again.get_asset_materialization_events()[0].materialization.metadata["new_change_points"].value == 0
    fact = pd.read_parquet(home / "warehouse" / "change_point_fact" / "change_points.parquet")
    assert fact.run_id.tolist() == ["n-18"]
    assert "warmup" in meta["detector"].text


def test_a_failed_replicates_primary_is_not_an_unmeasured_primary():
    """`failed_replicates` is a count the comparison makes, never in the run's statistics: the
    checks called it "no ok replicate" and failed enough_replicates on every healthy run."""
    import pandas as pd

    from benchrun import checks

    summary = pd.DataFrame({"suite": ["wf"], "case": ["c=4"], "metric": ["ttft_ms"]})
    assert checks.unmeasured_primaries(summary, {"wf/ttft_ms[c=4]", "wf/failed_replicates"}) == []
    assert checks.unmeasured_primaries(summary, {"wf/p99_latency_ms[c=4]"}) == ["wf/p99_latency_ms[c=4]"]


def test_report_refuses_a_run_still_in_progress(tmp_path, monkeypatch, capsys):
    # review 2026-12-07: `benchrun report` on a Running run drew figures beside the measuring
    # benchmark and recorded the partial report as the run's, exit 0, with no word of it
    from helpers import cli_in_process

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    rd = make_run(tmp_path, "live", {("s", "", "tps"): ([100.0, 101.0, 99.0], "t/s", "higher")},
                  status={"phase": "Running"}, manifest=False)
    code, _out, err = cli_in_process(["report", "live"], monkeypatch, capsys)
    assert code == 1 and "run live is Running: its report is written when it ends" in err, err
    assert not (rd / "reports" / "live_report.html").exists()


def test_telemetry_summaries_short_of_replicates_are_counted_not_judged():
    """Found in review: enough_replicates failed (ERROR) on a healthy canary because 3 of fio's 5 measured
    windows were under two sampling periods, so only 2 replicates carried the telemetry summaries, which
    never gate. They are counted now; a measured metric short of replicates still fails the check."""
    import pandas as pd

    from benchrun import checks

    summary = pd.DataFrame([
        {"suite": "fio", "case": "randread", "metric": "iops", "n": 5},
        {"suite": "fio", "case": "telemetry", "metric": "suite_cpu_pct_mean", "n": 2},
        {"suite": "fio", "case": "telemetry", "metric": "background_cpu_pct_p95", "n": 2},
    ])
    suites = {"fio": (5, 0)}
    assert checks.short_of_replicates(summary, suites, set(), 5) == []  # was: the two telemetry rows
    assert checks.telemetry_short(summary, 5) == 2
    summary.loc[0, "n"] = 4
    [short] = checks.short_of_replicates(summary, suites, set(), 5)
    assert (short["what"], short["metric"], short["n"]) == ("metric", "iops", 4)
