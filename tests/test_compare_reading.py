"""Issue 26 items 3-5: outcomes apart from context, one sign convention, and what n can show."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest

from benchrun.stats import compare as C
from benchrun.stats.synthetic import lognormal_replicates, make_run


def _rows(rng, name, median, n, *, case="", direction="higher", suite="s", scale=1.0):
    vals = lognormal_replicates(rng, median * scale, 0.02, n)
    return pd.DataFrame({"suite": suite, "case": case, "metric": name, "unit": "u", "direction": direction,
                         "replicate": np.arange(1, n + 1), "value": vals, "status": "ok"})


def test_context_rows_get_no_verdict_and_the_shifted_primary_regresses():
    """10 primary metrics, 100 telemetry metrics, n = 5, one primary ×2 (lower: a regression)."""
    rng = np.random.default_rng(26)
    base, cand = [], []
    for i in range(10):
        base.append(_rows(rng, f"p{i}", 100, 5))
        cand.append(_rows(rng, f"p{i}", 100, 5, scale=0.5 if i == 3 else 1.0))
    for i in range(100):  # telemetry: some of it moves a lot, none of it is an outcome
        base.append(_rows(rng, f"cpu_utilization_pct_{i}", 50, 5, case="telemetry"))
        cand.append(_rows(rng, f"cpu_utilization_pct_{i}", 50, 5, case="telemetry", scale=3.0 if i % 2 else 1.0))
    res = C.compare_tables(pd.concat(base), pd.concat(cand), primary={f"p{i}" for i in range(10)})
    r = res.rows
    tele = r[r["case"] == "telemetry"]
    assert len(tele) == 100 and set(tele["role"]) == {"context"} and set(tele["verdict"]) == {""}
    assert tele["p_adjusted"].isna().all() and set(tele["correction"]) == {"none"}
    prim = r[r["role"] == "primary"].set_index("name")
    assert prim.loc["p3", "verdict"] == "regression" and res.family == 10
    assert set(prim.drop("p3")["verdict"]) <= {"no_change", "inconclusive"}
    assert res.suspected == [("s", "", "p3")]
    # the shifted metric's change, as measured, with better/worse
    assert -52 < prim.loc["p3", "change_pct"] < -48 and prim.loc["p3", "better_worse"] == "worse"
    assert all(math.isfinite(v) and v > 0 for v in prim["mde_pct"])


def test_a_large_change_at_n3_says_how_many_replicates_would_show_it():
    """×29 at n = 3 on a secondary outcome: the two-sided exact test cannot go below 0.1 at 3 vs 3."""
    rng = np.random.default_rng(29)
    base = pd.concat([_rows(rng, "gate", 100, 3), _rows(rng, "tflops", 0.005, 3)])
    cand = pd.concat([_rows(rng, "gate", 100, 3), _rows(rng, "tflops", 0.005, 3, scale=29.25)])
    res = C.compare_tables(base, cand, primary={"gate"})
    row = res.rows.set_index("name").loc["tflops"]
    assert row.verdict == "inconclusive" and math.isinf(row.mde_pct)
    m = re.fullmatch(r"large change, not significant at n = 3: rerun with ≥ (\d+) replicates", row.advice)
    assert m, row.advice
    n = int(m.group(1))
    assert row.replicates_needed == n and row.change_pct > 2000 and row.better_worse == "better"
    # the advice holds: with N replicates the same change is significant, with N - 1 it is not
    for reps, want in ((n, "improvement"), (n - 1, "inconclusive")):
        b = pd.concat([_rows(rng, "gate", 100, reps), _rows(rng, "tflops", 0.005, reps)])
        c = pd.concat([_rows(rng, "gate", 100, reps), _rows(rng, "tflops", 0.005, reps, scale=29.25)])
        assert C.compare_tables(b, c, primary={"gate"}).rows.set_index("name").loc["tflops", "verdict"] == want


def test_cli_json_and_report_agree_on_sign_and_better_worse(tmp_path, monkeypatch):
    """A lower-is-better latency that went up: +x % (worse) everywhere."""
    from typer.testing import CliRunner

    from benchrun.cli import app
    from benchrun.report.html import build_report
    from benchrun.stats.analysis import compare_runs, write_comparison

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    rng = np.random.default_rng(3)
    prim = {"spec": {"metrics": {"inference": {"primary": ["p99_latency_ms"]}}}}
    b = make_run(tmp_path, "base", {("s", "", "p99_latency_ms"): (lognormal_replicates(rng, 0.1485, 0.02, 5), "ms",
                                                                   "lower")}, spec=prim)
    c = make_run(tmp_path, "cand", {("s", "", "p99_latency_ms"): (lognormal_replicates(rng, 0.3174, 0.02, 5), "ms",
                                                                   "lower")}, spec=prim)
    gate, res = compare_runs(b, c)
    rec = res.records()[0]
    assert rec["change_pct"] > 100 and rec["better_worse"] == "worse" and rec["ratio"] < 1  # ratio: higher-is-better
    want = f"{rec['change_pct']:+.1f} %"
    runner = CliRunner()
    js = runner.invoke(app, ["compare", "base", "cand", "--json"])
    row = json.loads(js.output)["metrics"][0]
    assert (f"{row['change_pct']:+.1f} %", row["better_worse"]) == (want, "worse")
    text = runner.invoke(app, ["compare", "base", "cand"], terminal_width=250).output
    line = next(x for x in text.splitlines() if "p99_latency_ms" in x)
    assert want in line and "worse" in line
    # the change is the estimate the verdict is about, not the medians' ratio: the CLI says so, as the report does
    assert "not the ratio of the two medians shown" in " ".join(text.split())
    write_comparison(gate, res, "base", c)
    html = build_report(c).read_text()
    assert f"{want} " in html and "worse" in html.split(want, 1)[1][:80]
    from benchrun.stats.reading import format_change

    assert format_change(rec) == f"{want} (worse)"  # what run/show print beside the verdict
    # the forest plot: the same change as measured (right of 0: the value went up), said worse
    from benchrun.report import figures

    doc = json.loads((c / "structured" / "cand_comparison.json").read_text())
    [drawn] = figures.forest_rows(doc["metrics"])
    assert (f"{drawn['change_pct']:+.1f} %", drawn["better_worse"]) == (want, "worse")
    assert drawn["change_low_pct"] > 0  # the whole interval is an increase
    figs = []
    monkeypatch.setattr(figures, "_png", lambda fig: figs.append(fig) or b"")
    figures.forest_plot(doc["metrics"], "t")
    ax = figs[0].axes[0]
    marker = next(line for line in ax.get_lines() if line.get_marker() in ("o", "s") and len(line.get_xdata()))
    assert marker.get_xdata()[0] == pytest.approx(1 + rec["change_pct"] / 100)  # on the measured scale
    assert any(t.get_text().startswith(f"{want} worse") for t in ax.texts), [t.get_text() for t in ax.texts]
    assert "higher is better" not in ax.get_xaxis().get_label().get_text()
    assert "change as measured" in ax.get_xaxis().get_label().get_text()


def test_red_and_green_only_on_gating_rows_in_the_forest_plot_and_the_cli(tmp_path, monkeypatch):
    """A gating latency and a secondary throughput both regress: only the gating row is red."""
    from rich.console import Console
    from typer.testing import CliRunner

    from benchrun.cli import app
    from benchrun.report import figures
    from benchrun.stats import commands

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    rng = np.random.default_rng(4)
    prim = {"spec": {"metrics": {"inference": {"primary": ["p99_latency_ms"]}}}}

    def metrics(lat, tps):
        return {("s", "", "p99_latency_ms"): (lognormal_replicates(rng, lat, 0.02, 5), "ms", "lower"),
                ("s", "", "tokens_per_s"): (lognormal_replicates(rng, tps, 0.02, 5), "tok/s", "higher")}
    make_run(tmp_path, "base", metrics(0.15, 100), spec=prim)
    make_run(tmp_path, "cand", metrics(0.30, 50), spec=prim)
    monkeypatch.setattr(commands, "make_console",
                        lambda: Console(force_terminal=True, color_system="standard", width=250, highlight=False))
    res = CliRunner().invoke(app, ["compare", "base", "cand"])
    assert res.exit_code == 3, res.output  # the gating latency regressed
    lines = {m: next(x for x in res.output.splitlines() if m in x) for m in ("p99_latency_ms", "tokens_per_s")}
    red = "\x1b[31m"
    assert red in lines["p99_latency_ms"] and "regression" in lines["p99_latency_ms"]
    assert "regression" in lines["tokens_per_s"] and red not in lines["tokens_per_s"] and "\x1b[32m" not in \
        lines["tokens_per_s"]
    records = json.loads(CliRunner().invoke(app, ["compare", "base", "cand", "--json"]).stdout)["metrics"]
    assert {r["metric"]: (r["role"], r["verdict"]) for r in records} == {
        "s/p99_latency_ms": ("primary", "regression"), "s/tokens_per_s": ("secondary", "regression")}
    drawn = {r["metric"]: r for r in figures.forest_rows(records)}
    assert drawn["s/p99_latency_ms"]["color"] == figures.VERDICT_COLORS["regression"]
    assert drawn["s/tokens_per_s"]["color"] == figures.NEUTRAL
    figs = []
    monkeypatch.setattr(figures, "_png", lambda fig: figs.append(fig) or b"")
    figures.forest_plot(records, "t")
    ax = figs[0].axes[0]
    drawn_colors = {line.get_color() for line in ax.get_lines() if len(line.get_xdata()) and line.get_label()
                    .startswith("_")}
    assert figures.VERDICT_COLORS["regression"] in drawn_colors and figures.NEUTRAL in drawn_colors
    assert figures.VERDICT_COLORS["improvement"] not in drawn_colors
    said = {t.get_text() for t in ax.texts}
    assert any("worse (regression, not gating)" in t for t in said), said


def _aa(rng, metrics, n, shift=1.0, cv=0.02):
    base = pd.concat([pd.DataFrame({"suite": "s", "case": "", "metric": f"m{i}", "unit": "u", "direction": "higher",
                                    "replicate": np.arange(1, n + 1), "value": lognormal_replicates(rng, 100, cv, n),
                                    "status": "ok"}) for i in range(metrics)])
    cand = base.copy()
    cand["value"] = np.concatenate([lognormal_replicates(rng, 100 * shift, cv, n) for _ in range(metrics)])
    return base, cand


def test_no_change_is_tost_at_alpha():
    """"no change" = the 1 − 2α interval inside ±δ: reachable under A/A, and at most α when the truth
    sits on the band's edge (the two one-sided tests' level)."""
    rng = np.random.default_rng(27)
    res = C.compare_tables(*_aa(rng, 300, 10), delta_pct=3.0)
    r = res.rows
    nc = r[r["verdict"] == "no_change"]
    assert len(nc) > 0.5 * len(r)  # A/A at n = 10, CV 2 %: mostly shown equivalent
    m = np.log1p(0.03)
    assert ((nc["eq_low"] >= -m) & (nc["eq_high"] <= m)).all()
    assert ((nc["shift_low"] < -m) | (nc["shift_high"] > m)).any()  # the 95 % interval alone would not say it
    edge = C.compare_tables(*_aa(rng, 400, 10, shift=1.03), delta_pct=3.0).rows
    assert (edge["verdict"] == "no_change").mean() <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 400)


def _serve_tps(values):
    return pd.DataFrame({"suite": "serve", "case": "", "metric": "tps", "unit": "u", "direction": "higher",
                         "replicate": np.arange(1, len(values) + 1), "value": values, "status": "ok"})


def test_no_change_needs_an_interval_that_covers_1_minus_2_alpha():
    """Review 2026-12-06: 2 vs 2 replicates (the widest interval covers 66.7 %) and 3 vs 2 (80 %)
    were called "no change", the interval inside ±3 % but no test at α; 3 vs 3 (90 %) may be."""
    for b, c, cov in (([100, 102.5], [101, 103], 2 / 3), ([100, 102.5, 101], [101, 102.8], 0.8)):
        row = C.compare_tables(_serve_tps(b), _serve_tps(c), primary={"tps"}).rows.iloc[0]
        assert row.eq_high <= np.log1p(0.03) and row.eq_low >= -np.log1p(0.03)  # inside the band ...
        assert row.verdict == "inconclusive" and row.eq_coverage == pytest.approx(cov)  # ... but too little coverage
        assert f"covers {100 * cov:.1f} %, short of the 90 %" in row.note
    row = C.compare_tables(_serve_tps([100, 100.5, 101]), _serve_tps([100.2, 100.7, 100.9]), primary={"tps"}).rows.iloc[0]
    assert row.eq_coverage == pytest.approx(0.9) and row.verdict == "no_change" and "no change not shown" not in row.note


def test_context_rows_are_shown_beside_the_outcomes_they_explain():
    from benchrun.stats.commands import display_order

    recs = [{"suite": "gemm", "metric": "gemm/suite_cpu_pct_mean", "role": "context"},
            {"suite": "membw", "metric": "membw/triad", "role": "secondary"},
            {"suite": "gemm", "metric": "gemm/tflops", "role": "primary"},
            {"suite": "fio", "metric": "fio/memory_used_bytes_peak", "role": "context"},
            {"suite": "membw", "metric": "membw/suite_cpu_pct_mean", "role": "context"}]
    assert [r["metric"] for r in display_order(recs)] == [
        "gemm/tflops", "gemm/suite_cpu_pct_mean", "membw/triad", "membw/suite_cpu_pct_mean",
        "fio/memory_used_bytes_peak"]


def test_declared_secondaries_are_outcomes_even_when_they_are_telemetry(tmp_path):
    """The canary declares gpu_utilization_pct a secondary outcome: its telemetry rows are
    secondary (a verdict, in the BH family), not context; undeclared telemetry stays context."""
    from pathlib import Path

    import yaml

    from benchrun.stats.analysis import compare_runs
    from benchrun.stats.load import secondary_metrics
    from benchrun.telemetry.summary import summarise
    from benchrun.stats.reading import TELEMETRY_SUMMARIES

    canary = yaml.safe_load((Path(__file__).resolve().parents[1] / "specs/local/canary.yaml").read_text())
    assert "gpu_utilization_pct" in secondary_metrics(canary)
    rng = np.random.default_rng(6)
    spec = {"spec": {"metrics": {"inference": {"primary": ["s/tflops"],
                                               "secondary": ["gpu_utilization_pct", "s/p50_latency_ms"]}}}}

    def metrics(util):
        return {("s", "", "tflops"): (lognormal_replicates(rng, 1.0, 0.02, 5), "TFLOP/s", "higher"),
                ("s", "", "p50_latency_ms"): (lognormal_replicates(rng, 2.0, 0.02, 5), "ms", "lower"),
                ("s", "telemetry", "gpu_utilization_pct_mean"): (lognormal_replicates(rng, util, 0.02, 5), "%",
                                                                 "higher"),
                ("s", "telemetry", "cpu_utilization_pct_mean"): (lognormal_replicates(rng, util, 0.02, 5), "%",
                                                                 "higher")}
    make_run(tmp_path, "base", metrics(80.0), spec=spec)
    make_run(tmp_path, "cand", metrics(40.0), spec=spec)
    gate, res = compare_runs(tmp_path / "runs" / "base", tmp_path / "runs" / "cand")
    assert gate.passed, gate.message()
    r = res.rows.set_index("name")
    assert r.loc["gpu_utilization_pct_mean", "role"] == "secondary"
    assert r.loc["gpu_utilization_pct_mean", "correction"] == "bh"
    assert r.loc["gpu_utilization_pct_mean", "verdict"] == "regression"  # halved, in a family of 2
    assert (r.loc["cpu_utilization_pct_mean", "role"], r.loc["cpu_utilization_pct_mean", "verdict"]) == ("context", "")
    assert r.loc["p50_latency_ms", "role"] == "secondary" and r.loc["tflops", "role"] == "primary"
    # a declared primary that looks like telemetry still gates
    tele = pd.concat([_rows(rng, "gpu_utilization_pct_mean", 80, 5, case="telemetry"), _rows(rng, "x", 1, 5)])
    got = C.compare_tables(tele, tele.copy(), primary=["gpu_utilization_pct_mean"]).rows.set_index("name")
    assert got.loc["gpu_utilization_pct_mean", "role"] == "primary"
    # the summary statistics a declared quantity covers are the ones the telemetry summary writes
    from benchrun.telemetry.samples import Sample, samples_table

    samples = samples_table(Sample(t, "nvml", "gpu", "gpu_utilization_pct", v, "%", device_index=0)
                            for t, v in ((0.0, 50.0), (1.0, 60.0)))
    names = {row["name"] for row in summarise(samples) if row["name"].startswith("gpu_utilization_pct")}
    assert names and all(any(n == "gpu_utilization_pct" + s for s in TELEMETRY_SUMMARIES) for n in names)


def test_the_secondary_family_for_bh_excludes_context_rows():
    """Adding 100 moving telemetry rows changes neither the secondaries' BH-adjusted p nor their MDE."""
    from benchrun.stats.family import benjamini_hochberg

    rng = np.random.default_rng(8)
    base = [_rows(rng, "gate", 100, 5), _rows(rng, "tps", 100, 5), _rows(rng, "rps", 100, 5)]
    cand = [_rows(rng, "gate", 100, 5), _rows(rng, "tps", 100, 5, scale=0.9), _rows(rng, "rps", 100, 5, scale=1.02)]
    tb = [_rows(rng, f"suite_cpu_pct_mean_{i}", 50, 5, case="telemetry") for i in range(100)]
    tc = [_rows(rng, f"suite_cpu_pct_mean_{i}", 50, 5, case="telemetry", scale=2.0) for i in range(100)]
    alone = C.compare_tables(pd.concat(base), pd.concat(cand), primary={"gate"}).rows.set_index("name")
    mixed = C.compare_tables(pd.concat(base + tb), pd.concat(cand + tc), primary={"gate"}).rows.set_index("name")
    sec = ["tps", "rps"]
    assert list(mixed.loc[sec, "role"]) == ["secondary", "secondary"]
    want = benjamini_hochberg(mixed.loc[sec, "p_value"].to_numpy(float))
    assert np.allclose(mixed.loc[sec, "p_adjusted"].to_numpy(float), want)
    assert np.allclose(mixed.loc[sec, "p_adjusted"].to_numpy(float), alone.loc[sec, "p_adjusted"].to_numpy(float))
    assert np.allclose(mixed.loc[sec, "mde_pct"].to_numpy(float), alone.loc[sec, "mde_pct"].to_numpy(float))
    assert mixed.loc["tps", "verdict"] == "regression"


def test_the_report_shows_context_in_its_own_collapsed_section(tmp_path, monkeypatch):
    from benchrun.report.html import build_report
    from benchrun.stats.analysis import compare_runs, write_comparison

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    rng = np.random.default_rng(9)
    spec = {"spec": {"metrics": {"inference": {"primary": ["s/tflops"]}}}}

    def metrics(cpu):
        return {("s", "", "tflops"): (lognormal_replicates(rng, 1.0, 0.02, 5), "TFLOP/s", "higher"),
                ("s", "", "triad_gbs"): (lognormal_replicates(rng, 20.0, 0.02, 5), "GB/s", "higher"),
                ("s", "telemetry", "suite_cpu_pct_mean"): (lognormal_replicates(rng, cpu, 0.02, 5), "%", "lower")}
    b = make_run(tmp_path, "base", metrics(40.0), spec=spec)
    c = make_run(tmp_path, "cand", metrics(90.0), spec=spec)
    gate, res = compare_runs(b, c)
    write_comparison(gate, res, "base", c)
    page = build_report(c).read_text()
    [table] = re.findall(r'<table class="comparison">.*?</table>', page, flags=re.S)
    assert "s/tflops" in table and "s/triad_gbs" in table and "suite_cpu_pct_mean" not in table
    assert "2 outcomes: primary and secondary" in page
    [ctx] = re.findall(r"<details id='context'>.*?</details>", page, flags=re.S)  # collapsed: no `open`
    assert "Context: telemetry, utilization, environment (1 row, no verdict)" in ctx
    assert "s/suite_cpu_pct_mean[telemetry]" in ctx and "s/tflops" not in ctx and "regression" not in ctx


def test_a_failed_launch_that_tips_the_gate_to_welch_says_so():
    # 12 gating metrics at 5 vs 5: the exact rank test's smallest p (1/252) passes 0.05/12; a
    # failed launch in the gating suite adds a failure row to Holm's family (13), and every
    # gating metric switched to Welch without the note naming the failure as the cause
    import pandas as pd

    from benchrun.stats import compare as C

    rng = np.random.default_rng(0)

    def table(failed):
        rows = []
        for m in range(12):
            for r in range(1, 6):
                rows.append({"suite": "s", "case": "", "metric": f"m{m}", "unit": "ms", "direction": "lower",
                             "replicate": r, "value": 100 * np.exp(rng.normal(0, 0.02)), "status": "ok"})
        if failed:
            rows.append({"suite": "s", "case": "", "metric": "m0", "unit": "ms", "direction": "lower",
                         "replicate": 6, "value": np.nan, "status": "failed"})
        return pd.DataFrame(rows)

    quiet = C.compare_tables(table(False), table(False), primary={f"s/m{m}" for m in range(12)})
    assert not any("Welch" in n for n in quiet.notes)
    res = C.compare_tables(table(False), table(True), primary={f"s/m{m}" for m in range(12)})
    note = next(n for n in res.notes if "Welch" in n)
    assert "13 gating tests" in note and "1 failed-replicate row(s)" in note and "would gate" in note


def test_compare_json_is_strict_json_a_strict_parser_reads(tmp_path, monkeypatch):
    """``mde_pct`` is inf where the exact test cannot reach α at this n: ``--json`` wrote the
    ``Infinity`` token, which jq, Go and browsers reject; now null."""
    from typer.testing import CliRunner

    from benchrun.cli import app

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    prim = {"spec": {"metrics": {"inference": {"primary": ["tokens_per_s"]}}}}
    make_run(tmp_path, "base", {("s", "", "tokens_per_s"): ([100.0, 101.0, 99.0], "tok/s", "higher"),
                                ("s", "", "ttft_ms"): ([10.0, 10.2, 9.9], "ms", "lower")}, spec=prim)
    make_run(tmp_path, "cand", {("s", "", "tokens_per_s"): ([100.5, 99.5, 100.2], "tok/s", "higher"),
                                ("s", "", "ttft_ms"): ([10.1, 10.0, 9.8], "ms", "lower")}, spec=prim)
    out = CliRunner().invoke(app, ["compare", "base", "cand", "--json"]).stdout

    def refuse(token):
        raise AssertionError(f"not JSON: {token}")

    records = json.loads(out, parse_constant=refuse)["metrics"]
    row = next(r for r in records if r["metric"] == "s/ttft_ms")  # a secondary: two-sided exact, 3 vs 3
    assert "mde_pct" in row and row["mde_pct"] is None  # none at this n


def _fixed(name, values, direction="lower"):
    return pd.DataFrame({"suite": "s", "case": "telemetry", "metric": name, "unit": "%", "direction": direction,
                         "replicate": np.arange(1, len(values) + 1), "value": values, "status": "ok"})


def test_a_change_of_a_metric_never_below_zero_is_never_below_minus_100_pct_and_none_from_about_zero():
    # measured on a real canary pair: CPU share 20 → 1.55e-10 read "−100 %, CI low −228.9 %", and
    # 2.6e-10 → 0 read an interval of [−2.4e12, +1.3e12] %
    base = pd.concat([_fixed("cpu_a", [20.0, 35.0, 1.0, 24.0, 18.0]), _fixed("cpu_b", [2.6e-10, 0.0, 15.0, 0.0, 30.0]),
                      _fixed("temp", [-5.0, -4.0, -6.0, -5.5, -4.5])])
    cand = pd.concat([_fixed("cpu_a", [1.55e-10, 0.0, 0.0, 3e-10, 0.0]), _fixed("cpu_b", [0.0] * 5),
                      _fixed("temp", [-9.0, -8.0, -10.0, -9.5, -8.5])])
    r = C.compare_tables(base, cand, primary=set()).rows.set_index("name")
    assert r.loc["cpu_a", "scale"] == "absolute" and bool(r.loc["cpu_a", "nonnegative"])
    assert r.loc["cpu_a", "change_pct"] >= -100 and r.loc["cpu_a", "change_low_pct"] >= -100
    assert r.loc["cpu_a", "change_low_pct"] == -100  # the interval reached below −100 % before the bound
    assert math.isnan(r.loc["cpu_b", "change_pct"]) and math.isnan(r.loc["cpu_b", "change_low_pct"])  # median 2.6e-10
    assert r.loc["cpu_b", "verdict"] == ""  # context: no verdict either way
    # a metric that is below 0 keeps its own interval (no bound applies)
    assert not bool(r.loc["temp", "nonnegative"]) and r.loc["temp", "change_pct"] < -50


def test_a_small_change_on_an_absolute_row_without_a_margin_gets_no_large_change_advice():
    """A metric with a value ≤ 0 is compared by absolute difference; without a configured margin the
    advice took 0 as its bar, so a -1.7 % change read "large change, not significant ... more than 200
    replicates would be needed". Such a row is judged against the spec's δ % as measured."""
    def rows(values, name="lag_us"):
        return pd.DataFrame({"suite": "s", "case": "", "metric": name, "unit": "us", "direction": "lower",
                             "replicate": np.arange(1, len(values) + 1), "value": values, "status": "ok"})

    gate = [100.0, 101.0, 99.0, 100.5, 99.5]
    base = pd.concat([rows(gate, "gate"), rows([-3.0, 14.0, 13.0, 15.0, 13.9])])
    small = pd.concat([rows(gate, "gate"), rows([-2.5, 13.7, 13.3, 14.6, 13.9])])
    row = C.compare_tables(base, small, primary={"gate"}, delta_pct=5.0).rows.set_index("name").loc["lag_us"]
    assert row.scale != "log" and row.verdict == "inconclusive" and abs(row.change_pct) < 5
    assert row.advice == "", row.advice
    large = pd.concat([rows(gate, "gate"), rows([-3.0, 30.0, 9.0, 40.0, 29.0])])
    row = C.compare_tables(base, large, primary={"gate"}, delta_pct=5.0).rows.set_index("name").loc["lag_us"]
    assert row.verdict == "inconclusive" and abs(row.change_pct) > 5 and row.advice.startswith("large change"), row


def test_the_absolute_margin_note_names_outcome_rows_only():
    """The note "N metric(s) with a value ≤ 0 ... set comparison.absoluteMarginByMetric to allow a
    no_change verdict" listed telemetry context rows, which get no verdict whatever their margin."""
    def rows(name, values, case=""):
        return pd.DataFrame({"suite": "s", "case": case, "metric": name, "unit": "u", "direction": "lower",
                             "replicate": np.arange(1, len(values) + 1), "value": values, "status": "ok"})

    gate = [100.0, 101.0, 99.0, 100.5, 99.5]
    zeros = [0.0, 0.5, 0.0, 1.0, 0.0]
    base = pd.concat([rows("gate", gate), rows("lag_us", [-1.0, 2.0, 1.0, 3.0, 2.0]),
                      rows("background_cpu_pct_mean", zeros, case="telemetry")])
    res = C.compare_tables(base, base.copy(), primary={"gate"})
    roles = res.rows.set_index("name")["role"]
    assert roles["background_cpu_pct_mean"] == "context" and roles["lag_us"] != "context"
    [note] = [n for n in res.notes if "absoluteMarginByMetric" in n]
    assert note.startswith("1 metric(s) with a value ≤ 0") and "lag_us" in note and "background_cpu" not in note


def test_host_cpu_utilization_has_no_better_or_worse(tmp_path):
    """Host CPU utilization (the whole machine's busy share) was written "higher is better", so a
    quieter background read "-22.5 % worse" in compare and "(higher is better)" in the hot metrics.
    It is read with no direction: its change as measured, no better/worse, a HELP that says so —
    for runs recorded before (their rows say "higher") as for new ones."""
    from benchrun.hotmetrics import Budget, render
    from benchrun.stats.analysis import compare_runs
    from benchrun.stats.directions import NO_DIRECTION
    from benchrun.stats.load import replicate_table
    from benchrun.stats.reading import format_change

    rng = np.random.default_rng(9)
    spec = {"spec": {"metrics": {"inference": {"primary": ["s/tflops"]}}}}

    def metrics(util):
        return {("s", "", "tflops"): (lognormal_replicates(rng, 1.0, 0.02, 5), "TFLOP/s", "higher"),
                ("s", "telemetry", "cpu_utilization_pct_mean"): (lognormal_replicates(rng, util, 0.02, 5), "%",
                                                                 "higher"),
                ("s", "telemetry", "background_cpu_pct_mean"): (lognormal_replicates(rng, util / 2, 0.02, 5), "%",
                                                                "lower")}
    base = make_run(tmp_path, "base", metrics(92.0), spec=spec)
    cand = make_run(tmp_path, "cand", metrics(71.0), spec=spec)
    t = replicate_table(cand).set_index("metric")
    assert set(t.loc["cpu_utilization_pct_mean", "direction"]) == {NO_DIRECTION}
    assert set(t.loc["background_cpu_pct_mean", "direction"]) == {"lower"}
    gate, res = compare_runs(base, cand)
    assert gate.passed, gate.message()
    r = res.rows.set_index("name")
    cpu = r.loc["cpu_utilization_pct_mean"]
    assert cpu.role == "context" and cpu.verdict == "" and cpu.better_worse == ""
    assert -25 < cpu.change_pct < -20  # as measured: it went down
    assert r.loc["background_cpu_pct_mean", "better_worse"] == "better"  # less background load is better
    rec = next(x for x in res.records() if x["name"] == "cpu_utilization_pct_mean")
    assert format_change(rec).endswith("%") and "worse" not in format_change(rec)
    # an older comparison record (no change_pct): still no better/worse, and the change as measured
    old = {k: v for k, v in rec.items() if k not in ("change_pct", "better_worse")}
    assert format_change(old) == f"{rec['change_pct']:+.1f} %"
    # one written before the row had no direction: "higher", and its fall called worse; read back,
    # neither (was: "-22.5 % (worse)" in a rebuilt report or `show`)
    from benchrun.stats.reading import read_comparison

    ratio = cpu.candidate_median / cpu.baseline_median  # that record's ratio: higher-is-better, c/b
    written = {**rec, "direction": "higher", "better_worse": "worse", "ratio": ratio,
               "ci_low": ratio * 0.98, "ci_high": ratio * 1.02}
    no_pct = {k: v for k, v in written.items() if k not in ("change_pct", "change_low_pct", "change_high_pct")}
    for stored, pct in ((written, rec["change_pct"]), (no_pct, (ratio - 1) * 100)):
        back = read_comparison({"metrics": [stored]})["metrics"][0]
        assert back["direction"] == "none" and back["better_worse"] == ""
        assert format_change(back) == f"{pct:+.1f} %" and pct < -20  # as measured: it went down
    back = read_comparison({"metrics": [no_pct]})["metrics"][0]
    assert (back["change_low_pct"], back["change_high_pct"]) == pytest.approx(((ratio * 0.98 - 1) * 100,
                                                                                 (ratio * 1.02 - 1) * 100))
    status = {"run_id": "cand", "phase": "Succeeded"}
    text = render(cand, status, Budget(10_000, [])).text
    assert ("# HELP benchrun_cpu_utilization_pct_mean cpu_utilization_pct_mean in % (context: neither higher "
            "nor lower is better)") in text
    assert "# HELP benchrun_background_cpu_pct_mean background_cpu_pct_mean in % (lower is better)" in text


def test_a_change_the_comparison_withheld_is_withheld_by_every_reader():
    """Review: from a baseline median near zero the comparison withholds the % (change_pct null), but show,
    the report's headline and its forest plot rebuilt one from the absolute-scale "ratio": 0.001 → 5 read
    +499900 % (better); a lower-is-better row read about -100 %."""
    from benchrun.stats.reading import change_interval_of, change_of, format_change

    base = _fixed("goodput_rps", [0.0, 0.001, 0.002, 0.001, 0.0])
    cand = _fixed("goodput_rps", [4.0, 5.0, 6.0, 5.0, 5.0])
    res = C.compare_tables(base, cand, primary=set())
    [rec] = [r for r in res.records() if r["name"] == "goodput_rps"]
    assert rec["change_pct"] is None or math.isnan(rec["change_pct"])
    assert change_of(rec) == (None, "") and format_change(rec) == "" and change_interval_of(rec) == (None, None)
    old = {"ratio": 1.2, "direction": "lower", "ci_low": 1.1, "ci_high": 1.3}  # a record from before change_pct
    assert change_of(old)[0] == pytest.approx((1 / 1.2 - 1) * 100) and change_interval_of(old)[0] is not None


def _tab(values, name="tps"):
    return pd.DataFrame({"suite": "s", "case": "", "metric": name, "unit": "u", "direction": "higher",
                         "replicate": np.arange(1, len(values) + 1), "value": values, "status": "ok"})


def test_exit_0_says_whether_every_primary_was_shown_unchanged():
    # review 2026-12-07: a gating row `spread changed` or `inconclusive` exited 0 with "no gating
    # metric regressed" (NoGatingRegression), the words of a pair whose primaries were all shown
    # within their margin
    base = [100, 101, 99, 100.5, 99.5, 100.2, 99.8, 100.1]
    res = C.compare_tables(_tab(base), _tab([40, 120, 60, 130, 55, 125, 50, 70]), primary={"tps"})
    assert res.rows.iloc[0].verdict == "spread changed" and not res.gating_regression
    cond = res.condition()
    assert (cond["status"], cond["reason"]) == ("False", "NoRegressionShown"), cond
    assert "nor were 1 shown within their margin: s/tps spread changed" in cond["message"]
    res = C.compare_tables(_tab(base), _tab([100.3, 99.6, 100.4, 100.0, 99.9, 100.6, 99.4, 100.2]), primary={"tps"})
    assert res.rows.iloc[0].verdict == "no_change"
    assert res.condition()["reason"] == "NoGatingRegression"


def test_compare_json_carries_the_condition_and_the_notes(tmp_path, monkeypatch):
    # review 2026-12-07: --json wrote only the rows: "primaries measured in neither run" and the
    # RegressionDetected condition reached the text table alone
    from typer.testing import CliRunner

    from benchrun.cli import app

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    rng = np.random.default_rng(5)
    prim = {"spec": {"metrics": {"inference": {"primary": ["s/tokens_per_s", "gpu/tokens_per_s"]}}}}
    for run in ("base", "cand"):
        make_run(tmp_path, run, {("s", "", "tokens_per_s"): (lognormal_replicates(rng, 100, 0.01, 5), "tok/s", "higher")},
                 spec=prim)
    res = CliRunner().invoke(app, ["compare", "base", "cand", "--json"])
    doc = json.loads(res.stdout)
    assert res.exit_code == 0 and doc["exit_code"] == 0 and doc["refused"] is False, res.output
    assert doc["condition"]["type"] == "RegressionDetected" and doc["condition"]["status"] == "False"
    assert any("measured in neither run, so not judged: gpu/tokens_per_s" in n for n in doc["notes"]), doc["notes"]
    assert [m["metric"] for m in doc["metrics"]] == ["s/tokens_per_s"]
