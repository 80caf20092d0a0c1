"""Review of the report, 2026-12: what the report's figures and captions leave out or overstate.

Each test here failed before its fix: a -100 % change and rows without a change in % vanished from
the forest plot unsaid; one replicate's headline described an interval no row had; "the first
finished run" was said of a run with earlier runs; the latency-throughput curve ran through load
points the load generator judged invalid; an unconfirmed regression was red in the headline.
"""

from __future__ import annotations

import re

import pytest

from benchrun.report import content as C
from benchrun.report import figures
from benchrun.stats.synthetic import make_run
from test_report_figures import captured  # noqa: F401  (fixture)


@pytest.fixture()
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    return tmp_path


def _headline(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub("<[^>]+>", " ", text[text.index("id='headline'"):text.index("id='details'")]))


# --- 1. the forest plot: a -100 % change is the worst regression, not a row to drop --------------

GONE = {"metric": "serve/tokens_per_second[c=8]", "gating": True, "verdict": "regression", "change_pct": -100.0,
        "change_low_pct": -100.0, "change_high_pct": -99.0, "better_worse": "worse", "scale": "absolute"}
NO_INTERVAL = {"metric": "serve/ttft_ms[c=8]", "gating": False, "verdict": "inconclusive", "change_pct": 20.0,
               "change_low_pct": None, "change_high_pct": None, "better_worse": "worse", "scale": "log"}
FROM_ZERO = {"metric": "serve/error_count[c=8]", "gating": True, "verdict": "regression", "change_pct": None,
             "change_low_pct": None, "change_high_pct": None, "baseline_median": 0.0, "difference": 5.0,
             "unit": "count", "scale": "absolute"}


def test_the_forest_plot_keeps_a_minus_100_percent_change_and_a_row_without_interval(captured):
    kept = [r["metric"] for r in figures.forest_rows([GONE, NO_INTERVAL, FROM_ZERO])]
    assert kept == ["serve/tokens_per_second[c=8]", "serve/ttft_ms[c=8]"]
    figures.forest_plot([GONE, NO_INTERVAL, FROM_ZERO], "t")
    ax = captured[0].axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["★ serve/tokens_per_second[c=8]", "serve/ttft_ms[c=8]"]
    texts = [t.get_text() for t in ax.texts]
    assert "◀" in texts  # clipped at the axis' left end, and said
    assert any(t.startswith("-100.0 % worse") for t in texts) and any("(no interval)" in t for t in texts), texts


def test_a_row_the_forest_plot_cannot_draw_is_named_in_its_caption(home):
    from benchrun.report.html import render_figures
    from benchrun.stats.analysis import compare_runs, write_comparison

    spec = {"spec": {"metrics": {"inference": {"primary": ["tokens_per_second", "error_count"]}}}}
    base = make_run(home, "base", {("serve", "c=8", "tokens_per_second"): ([100, 101, 99, 100, 102], "tok/s", "higher"),
                                   ("serve", "c=8", "error_count"): ([0, 0, 0, 0, 0], "count", "lower")}, spec=spec)
    cand = make_run(home, "cand", {("serve", "c=8", "tokens_per_second"): ([0, 0, 0, 0, 0], "tok/s", "higher"),
                                   ("serve", "c=8", "error_count"): ([5, 5, 6, 5, 5], "count", "lower")}, spec=spec)
    gate, res = compare_runs(base, cand)
    write_comparison(gate, res, "base", cand)
    forest = [f for f in render_figures(cand) if f["section"] == "comparison"]
    assert len(forest) == 1
    assert "not drawn: serve/error_count[c=8] (baseline median 0: no change in %; difference +5 count, regression)" \
        in forest[0]["caption"], forest[0]["caption"]
    assert "tokens_per_second" not in forest[0]["caption"]  # drawn: not named


def test_forest_not_drawn_names_only_rows_without_a_change_in_percent():
    assert figures.forest_not_drawn([GONE, NO_INTERVAL, {**FROM_ZERO, "role": "context"}]) == []
    assert figures.forest_not_drawn([{**FROM_ZERO, "baseline_median": 3.0, "difference": None, "gating": False}]) \
        == ["serve/error_count[c=8] (the comparison gave no change in %, regression (not gating))"]


# --- 2. one replicate: no interval, and the caption says so ----------------------------------------

def test_one_replicate_s_headline_says_no_interval_not_a_distribution_free_one(home):
    from benchrun.report.html import build_report

    one = C.HeadlineRow("s", "", "m", "u", "higher", 1, 1.0, None, None, None)
    assert C.coverage_said([C.SuiteHeadline("s", [one])], 0.95) == ("no interval (n = 1)", False)
    text = _headline(build_report(make_run(home, "one", {("gemm", "n=1", "tflops"): ([1.0], "TFLOP/s", "higher")}))
                     .read_text())
    assert "distribution-free interval" not in text and "95% interval" not in text, text
    assert "no interval (n = 1): a median interval needs at least 2 replicates" in text, text


# --- 3. "the first finished run" only when it is ---------------------------------------------------

def test_the_first_run_sentence_only_when_the_history_holds_no_other_run(home):
    from benchrun.report.html import build_report

    metrics = {("gemm", "n=1", "tflops"): ([1.0, 1.0, 1.0], "TFLOP/s", "higher")}
    first = build_report(make_run(home, "first", metrics, created_utc="2026-12-01T00:00:00Z")).read_text()
    assert "History: this is the first finished run of this workload on this hardware." in first
    # a later run whose every replicate failed: no metrics, so not in its own history, and no figure
    failed = build_report(make_run(home, "later", metrics, failed_replicates={"gemm": [1, 2, 3]},
                                   created_utc="2026-12-02T00:00:00Z")).read_text()
    assert "fig-history" not in failed and "first finished run" not in failed
    assert ("History: no figure: this run recorded no metrics to place on it (1 earlier finished run of this "
            "workload on this hardware).") in failed


def test_no_history_sentence_when_the_index_does_not_say():
    assert C.no_history_figure(None) == ""  # an older figure index: the history is unknown, not empty
    assert C.no_history_figure({"earlier_runs": 0, "this_run": True}).startswith("this is the first")
    assert C.no_history_figure({"earlier_runs": 2, "this_run": False}).startswith("no figure")


# --- 4. invalid load points: out of the curve, hollow, and said ------------------------------------

def _points(invalid_e2e: float = 900.0):
    return [{"point": f"c={c}", "offered_load": c, "bucket": "all", "tokens_per_second": 100.0 * c,
             "e2e_ms_p99": invalid_e2e if c == 16 else 200.0 + 10 * c} for c in (1, 4, 16)]


def test_latency_throughput_leaves_invalid_points_out_of_the_curve_and_draws_them_hollow(captured):
    import pandas as pd

    rows = pd.DataFrame(_points())
    figures.latency_throughput(rows.assign(invalid=rows["point"] == "c=16"), {}, "t")
    ax = captured[0].axes[0]
    curve, hollow = ax.get_lines()[:2]
    assert list(curve.get_xdata()) == [100.0, 400.0]  # c=16 is not on the curve
    assert list(hollow.get_xdata()) == [1600.0] and hollow.get_markerfacecolor() == "none"
    assert hollow.get_linestyle() == "None"
    assert figures.INVALID_LABEL in [t.get_text() for t in ax.get_legend().get_texts()]
    assert "16 invalid" in [t.get_text() for t in ax.texts]


def test_the_serving_figure_s_caption_names_the_invalid_points(home):
    from benchrun.report.html import render_figures

    ctx = {"verdicts": {"c=16": {"verdict": "invalid", "reasons": ["error rate 3.0 % > 1 %"]},
                        "c=1": {"verdict": "valid", "reasons": []}}}
    rd = make_run(home, "sweep", {("serve", "c=1", "tokens_per_second"): ([100.0] * 3, "tok/s", "higher")},
                  serving={"serve": [_points()] * 3}, contexts={"serve": ctx})
    fig = [f for f in render_figures(rd) if f["section"] == "serving"]
    assert len(fig) == 1
    assert "load generator judged invalid" in fig[0]["caption"]
    assert "c=16 (replicates 1, 2, 3: error rate 3.0 % > 1 %)" in fig[0]["caption"], fig[0]["caption"]
    assert "c=1 " not in fig[0]["caption"]


# --- 5. a regression the round did not confirm is not red -----------------------------------------

def test_a_gating_regression_not_confirmed_is_said_so_and_not_in_red():
    from benchrun.report.html import _change

    row = {"gating": True, "verdict": "regression", "change_pct": -40.0, "better_worse": "worse"}
    for state in ("not_confirmed", "not_run", "failed"):
        cell = _change({**row, "confirmation": state})
        assert "regression (not confirmed)" in cell and "v-regression" not in cell, cell
    assert "class='v-regression'" in _change({**row, "confirmation": "confirmed"})
    assert "class='v-regression'" in _change(row)  # a document from before confirmations were recorded
    assert "regression (not confirmed)" in _change({**row, "change_pct": None, "confirmation": "not_confirmed"})
