"""What the report says (benchrun.report.content) and its HTML helpers, without figures."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from benchrun.report import content as C
from benchrun.report.html import _table
from benchrun.stats.analysis import TrialStatistics
from benchrun.stats.load import RunInfo

SPEC = {"spec": {"metrics": {"inference": {"enabled": True, "primary": ["ttft_ms", "tokens_per_second"]},
                             "training": {"enabled": False, "primary": ["mfu_pct"]}},
                 "layers": [{"name": "micro", "suites": [{"name": "gemm"}, {"name": "fio"}]},
                            {"name": "component", "suites": [{"name": "serving_sweep"}]},
                            {"name": "end_to_end", "suites": [{"name": "serving_workflow"}]}]}}


def _row(suite, metric, case="", median=10.0, lo=9.0, hi=11.0, mn=8.0, mx=12.0, n=6):
    return {"suite": suite, "case": case, "metric": metric, "unit": "u", "direction": "higher", "n": n,
            "median": median, "median_ci_low": lo, "median_ci_high": hi, "median_ci_coverage": 0.95,
            "min": mn, "max": mx}


def _stats(rows):
    return TrialStatistics("r", 0.95, 3, pd.DataFrame(), pd.DataFrame(rows), pd.DataFrame())


def test_headlines_lead_with_primary_metrics_end_to_end_first_and_mark_uninformative_intervals():
    stats = _stats([_row("fio", "iops"), _row("fio", "bandwidth_mib_per_s"), _row("gemm", "tflops"),
                    _row("serving_sweep", "ttft_ms", "c=1", lo=8.0, hi=12.0), _row("serving_sweep", "p50_latency_ms"),
                    _row("serving_workflow", "tokens_per_second", "c=4"), _row("odd", "a"), _row("odd", "b"),
                    _row("odd", "c")])
    comparison = {"metrics": [{"suite": "serving_workflow", "case": "c=4", "name": "tokens_per_second",
                               "metric": "serving_workflow/tokens_per_second[c=4]", "ratio": 0.9, "verdict": "regression",
                               "gating": True}]}
    heads = C.headlines(stats, SPEC, comparison)
    assert [h.suite for h in heads] == ["serving_workflow", "serving_sweep", "gemm", "fio", "odd"]
    assert [(r.metric, r.case) for r in heads[1].rows] == [("ttft_ms", "c=1")]  # primaries only
    assert [r.metric for r in heads[3].rows] == ["bandwidth_mib_per_s"]  # the suite's known headline
    assert [r.metric for r in heads[4].rows] == ["a", "b"]  # unknown suite: its first two
    assert heads[0].rows[0].change["ratio"] == 0.9
    assert heads[0].rows[0].gating and heads[1].rows[0].gating  # bare names gate in every suite
    qualified = {"spec": {**SPEC["spec"], "metrics": {"inference": {"enabled": True, "primary": [
        "serving_workflow/tokens_per_second[c=4]", "ttft_ms[c=1]"]}}}}
    heads = C.headlines(stats, qualified, comparison)
    assert [h.suite for h in heads][:2] == ["serving_workflow", "serving_sweep"]
    assert heads[0].rows[0].gating and heads[1].rows[0].gating
    assert heads[1].rows[0].metric == "ttft_ms"  # shown by name in every suite that reports it
    assert heads[2].rows[0].informative  # [9, 11] inside the range [8, 12]
    assert not heads[1].rows[0].informative  # the interval is the whole range: says nothing more


def test_verdict_says_regressions_and_baseline():
    run = RunInfo("r", Path("."), {"phase": "Succeeded", "outcome": "succeeded", "benchmark_class_requested":
                                   "publication_grade", "benchmark_class_granted": "realism_grade",
                                   "layers": {"micro": {"ok": 5, "failed": 1, "launches": 6}},
                                   "conditions": [{"type": "PublicationGuaranteesMet", "status": "False",
                                                   "message": "downgraded"}]}, {}, {})
    v = C.verdict(run, None)
    assert (v.phase, v.regressions, v.baseline) == ("Succeeded", "not compared", None)
    assert v.replicates == "6 launches: 5 ok, 1 failed" and v.problems == ["PublicationGuaranteesMet: downgraded"]
    comp = {"baseline": "b", "gate": {"passed": True, "message": "only runtime_version differs"},
            "condition": {"status": "True"}, "metrics": [{"gating": True, "verdict": "regression"},
                                                          {"gating": False, "verdict": "regression"}]}
    v = C.verdict(run, comp)
    assert (v.regressions, v.regression_level, v.baseline) == ("1 confirmed", "bad", "b")
    comp["condition"] = {"status": "False"}
    comp["metrics"][0]["verdict"] = "no_change"
    assert C.verdict(run, comp).regressions == "none"
    # review 2026-12-07: every primary inconclusive (ttft_ms +75.6 % among them) read "none" in green
    comp["metrics"] = [{"gating": True, "verdict": "inconclusive"}, {"gating": True, "verdict": "no_change"},
                       {"gating": True, "verdict": "spread changed"}]
    v = C.verdict(run, comp)
    assert (v.regressions, v.regression_level) == (
        "none shown; 2 of 3 not shown within the margin either (inconclusive, spread changed: see each MDE)", "warn")
    comp["metrics"] = [{"gating": False, "verdict": "regression"}]
    assert C.verdict(run, comp).regressions.startswith("nothing gates")
    # review 2026-12-07: a primary measured in neither run (or contended replicates kept) is
    # NoRegressionShown, never the all-clear; its rows were all within the margin and it read "none" in green
    comp["metrics"] = [{"gating": True, "verdict": "no_change"}]
    comp["condition"] = {"status": "False", "reason": "NoRegressionShown", "message": (
        "no gating metric was shown to regress, primaries measured in neither run were not tested: ttft_ms")}
    v = C.verdict(run, comp)
    assert (v.regressions, v.regression_level) == (
        "none shown; primaries measured in neither run were not tested: ttft_ms", "warn")
    comp["condition"] = {"status": "False", "reason": "NoGatingRegression", "message": "no gating metric regressed"}
    assert (C.verdict(run, comp).regressions, C.verdict(run, comp).regression_level) == ("none", "ok")


def test_the_verdict_counts_only_what_the_round_confirmed():
    # review 2026-12-06: two gating suspects, one confirmed by the round and one not, read "2 confirmed"
    # (every gating row with verdict regression; the no_gating_regression check's metadata too)
    run = RunInfo("r", Path("."), {"phase": "Succeeded", "layers": {}}, {}, {})
    rows = [{"metric": "serve/a", "gating": True, "verdict": "regression", "confirmation": "confirmed"},
            {"metric": "serve/b", "gating": True, "verdict": "regression", "confirmation": "not_confirmed"},
            {"metric": "serve/c", "gating": True, "verdict": "no_change", "confirmation": ""}]
    comp = {"baseline": "b", "gate": {"passed": True}, "condition": {"status": "True"}, "metrics": rows}
    v = C.verdict(run, comp)
    assert (v.regressions, v.regression_level) == ("1 confirmed, 1 suspected, not confirmed", "bad")
    confirmed, unconfirmed = C.gating_regressions(rows)
    assert [m["metric"] for m in confirmed] == ["serve/a"] and [m["metric"] for m in unconfirmed] == ["serve/b"]
    rows[0]["confirmation"] = "not_confirmed"
    comp["condition"] = {"status": "False"}
    assert C.verdict(run, comp).regressions == "2 suspected, not confirmed"


def test_a_column_with_one_value_on_every_row_is_said_once():
    html = _table([{"a": 1, "note": "BCa needs ≥ 10 replicates"}, {"a": 2, "note": "BCa needs ≥ 10 replicates"}],
                  [("a", "A"), ("note", "BCa")])
    assert html.count("BCa needs") == 1 and "Every row: BCa: BCa needs" in html
    assert "<th>BCa</th>" not in html and html.count("<tr>") == 3


def test_pick_skips_nan_and_reads_renamed_fields():
    assert C.pick({"ci_low": math.nan, "low": 2.0}, "ci_low", "low") == 2.0
    assert C.interval_of({"ci_low": 1.0, "ci_high": 3.0, "coverage": 0.9}) == (1.0, 3.0, 0.9)


def test_comparison_table_labels_the_shift_and_shows_the_medians_change_beside_it():
    """A '+72 %' change sat beside two medians that both went down: change_pct is the Hodges–Lehmann
    shift, not the medians' ratio, and the column said 'change %'."""
    from types import SimpleNamespace

    import pandas as pd

    from benchrun.report.html import _details_html

    row = {"metric": "tokens_per_second", "gating": False, "role": "secondary", "baseline_median": 100.0,
           "candidate_median": 80.0, "change_pct": 72.0, "change_low_pct": -10.0, "change_high_pct": 150.0,
           "verdict": "inconclusive"}
    near_zero = {**row, "metric": "errors", "baseline_median": 0.0, "candidate_median": 0.0, "change_pct": None,
                 "change_low_pct": None, "change_high_pct": None, "verdict": "no_change"}
    comparison = {"baseline": "base", "metrics": [row, near_zero], "condition": {}}
    empty = pd.DataFrame()
    text = _details_html(SimpleNamespace(status={}), SimpleNamespace(summary=empty, tails=empty), comparison, [])
    assert "estimated shift % (+ = up)" in text and "change % (+ = up)" not in text
    assert "medians&#x27; change %" in text or "medians' change %" in text
    assert "<td>-20</td>" in text and "<td>72</td>" in text  # the medians fell 20 %; the shift says +72 %
    assert "Hodges–Lehmann" in text and "not the medians' ratio" in text


def test_the_headline_says_the_coverage_its_intervals_have(tmp_path, monkeypatch):
    """At n = 5 the interval is [min, max], coverage 0.9375: the CLI's headline title said "95%
    interval" and the report's caption "distribution-free 95% interval"."""
    from typer.testing import CliRunner

    from benchrun.cli import app
    from benchrun.report.html import build_report
    from benchrun.stats.analysis import trial_statistics_for_run, write_trial_statistics
    from benchrun.stats.synthetic import make_run

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "250")
    spec = {"spec": {"metrics": {"inference": {"enabled": True, "primary": ["tps"]}}}}
    five = [100.0, 101, 99, 100.5, 99.5]
    rd = make_run(tmp_path, "five", {("s", "", "tps"): (five, "t/s", "higher")}, spec=spec)
    write_trial_statistics(trial_statistics_for_run(rd), rd)
    out = " ".join(CliRunner().invoke(app, ["show", "five"]).output.split())
    assert "headline (median over replicates, 93.8% interval, below the 95% asked: too few replicates for it)" in out
    html = build_report(rd).read_text()
    headline = html[html.index("id='headline'"):html.index("id='details'")]
    assert "95% interval" not in headline and "distribution-free interval (93.8% interval, below the 95% asked" \
        in headline
    assert "[99, 101]†</span> <span class='muted'>93.8%</span>" in headline  # the row's own, † or not
    # two suites, n = 5 and n = 10: the range in the title, each row's coverage beside its interval
    ten = five + [100.2, 99.8, 100.1, 99.9, 100.3]
    rd = make_run(tmp_path, "mixed", {("s", "", "tps"): (five, "t/s", "higher"),
                                      ("t", "", "tps"): (ten, "t/s", "higher")}, spec=spec)
    write_trial_statistics(trial_statistics_for_run(rd), rd)
    out = CliRunner().invoke(app, ["show", "mixed"]).output
    assert "interval coverage 93.8%–97.9% (per row), some below the 95% asked" in " ".join(out.split()), out
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if "tps" in line and "│" in line}
    assert "93.8%" in rows["s"] and "97.9%" in rows["t"], rows


def test_coverage_said_is_the_nominal_level_only_when_no_row_has_a_coverage():
    heads = [C.SuiteHeadline("s", [C.HeadlineRow("s", "", "m", "u", "higher", 1, 1.0, None, None, None)])]
    assert C.coverage_said(heads, 0.95) == ("no interval (n = 1)", False)  # no row has one: no level to name
    heads[0].rows.append(C.HeadlineRow("s", "", "k", "u", "higher", 3, 1.0, 0.9, 1.1, None))
    assert C.coverage_said(heads, 0.95) == ("95% interval", False)  # an interval without a coverage: the level
    heads[0].rows.pop()
    heads[0].rows.append(C.HeadlineRow("s", "", "n", "u", "higher", 10, 1.0, 0.9, 1.1, 0.978515625))
    assert C.coverage_said(heads, 0.95) == ("97.9% interval", False)  # above the level asked: no warning


def test_the_n_mark_covers_baseline_replicates_left_out_and_contended_ones_kept():
    # review 2026-12-07: (1) 5 contended baseline replicates kept (too few quiet ones) showed a plain
    # `5/5` in compare, the headline and the report; (2) baseline replicates left out showed a
    # plain `5` in the headline (only the candidate's n was looked at) where compare showed `3/5 ‡`
    from benchrun.stats.reading import left_out_notes, n_shown

    kept = {"metric": "serve/tps", "suite": "serve", "n_baseline": 5, "n_candidate": 5,
            "contention": "baseline: 5 contended, kept (only 0 quiet replicates, fewer than 3)"}
    assert n_shown(kept) == "5/5 ‡"
    assert left_out_notes([kept]) == ["‡ serve: baseline: 5 contended, kept (only 0 quiet replicates, fewer than 3)"]
    row = C.HeadlineRow("serve", "", "tps", "u", "higher", 5, 1.0, None, None, None, change=kept)
    assert row.n_text() == "5 ‡" and "kept (only 0 quiet" in row.compared_note()
    left = {"metric": "serve/tps", "suite": "serve", "n_baseline": 3, "n_candidate": 5,
            "contention": "baseline: 2 contended, excluded"}
    row = C.HeadlineRow("serve", "", "tps", "u", "higher", 5, 1.0, None, None, None, change=left)
    assert row.n_text() == "5 ‡" and row.compared_note() == (
        "‡ serve/tps: the change against the baseline is over 3 baseline and 5 candidate replicates: "
        "baseline: 2 contended, excluded")
    quiet = {**left, "n_baseline": 5, "contention": ""}
    assert C.HeadlineRow("serve", "", "tps", "u", "higher", 5, 1.0, None, None, None, change=quiet).n_text() == "5"


def test_a_canceled_runs_verdict_counts_its_launches_and_does_not_ask_for_a_baseline(tmp_path):
    # review 2026-12-07: a run canceled before any layer ended read "0 launches: 0 ok, 0 failed"
    # (status.layers is written when a layer ends) beside a headline with n = 3, and "No baseline
    # was resolved ... promote one" though the alias was set: the run ended before it compared
    import json

    rd = tmp_path / "runs" / "c1"
    (rd / "structured").mkdir(parents=True)
    (rd / "structured" / "c1_launches.json").write_text(json.dumps(
        [{"suite": "gemm", "replicate": k, "status": s, "layer": "micro"}
         for k, s in enumerate(["ok", "ok", "ok", "failed"], start=1)]))
    v = C.verdict(RunInfo("c1", rd, {"phase": "Canceled", "layers": {}}, {}, {}), None)
    assert v.replicates == "4 launches: 3 ok, 1 failed"
    assert v.against == "Not compared: the run ended Canceled before its comparison."


def test_rows_of_a_suite_that_share_their_footnote_get_one():
    # 2026-12-07 (the ‡ change above, seen in `make run`): ten serving_sweep rows whose baseline
    # lost one contended replicate printed the same footnote ten times
    why = {"suite": "serve", "n_baseline": 4, "n_candidate": 5, "contention": "baseline: 1 contended, excluded"}
    rows = [C.HeadlineRow("serve", f"c={c}", m, "u", "higher", 5, 1.0, None, None, None,
                          change={**why, "metric": f"serve/{m}[c={c}]"}) for c in (1, 4) for m in ("tps", "ttft_ms")]
    own = C.HeadlineRow("other", "", "x", "u", "higher", 5, 1.0, None, None, None,
                        change={"metric": "other/x", "suite": "other", "n_baseline": 5, "n_candidate": 4,
                                "candidate_median": 2.0, "failed_candidate": 1})
    notes = C.compared_notes([C.SuiteHeadline("serve", rows), C.SuiteHeadline("other", [own])])
    assert notes == [
        "‡ other/x: the change against the baseline is over the 4 replicates the comparison kept, not all 5 "
        "(their median 2): candidate: 1 failed replicate",
        "‡ serve (4 rows): the change against the baseline is over 4 baseline and 5 candidate replicates: "
        "baseline: 1 contended, excluded"], notes
