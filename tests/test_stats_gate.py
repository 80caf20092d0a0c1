"""The statistics' second pass: each numbered defect of issue 14 has a test here that failed
before the fix, plus the gate's simulations at n = 5 with 18 gating tests and the batch
engine held equal to the per-metric reference."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from benchrun.errors import BenchrunError
from benchrun.stats import batch
from benchrun.stats import compare as C
from benchrun.stats import effects as E
from benchrun.stats import ranktest as R
from benchrun.stats.synthetic import lognormal_replicates, make_run


def _table(values, metric="m", direction="higher", suite="s", case="", status=None):
    return pd.DataFrame({"suite": suite, "case": case, "metric": metric, "unit": "u", "direction": direction,
                         "replicate": range(1, len(values) + 1), "value": list(values),
                         "status": status or "ok"})


# -- 3: a metric whose baseline median is 0 -----------------------------------------------------


def test_zero_baseline_regression_is_judged_by_absolute_difference():
    base = _table([0.0] * 6, metric="errors", direction="lower")
    cand = _table([5, 5, 5, 6, 5, 5], metric="errors", direction="lower")
    res = C.compare_tables(base, cand, primary={"errors"})
    r = res.rows.iloc[0]
    assert r.scale == "absolute" and r.verdict == "regression"  # before: ratio NaN, "inconclusive"
    assert r.difference == 5.0 and (r.diff_ci_low, r.diff_ci_high) == (5.0, 6.0)
    assert r.p_value == pytest.approx(2 / 924)  # exact with ties (was the asymptotic 0.0018)
    assert any("absoluteMarginByMetric" in n for n in res.notes)
    # an absolute margin from the spec: a rise of 5 errors inside a margin of 10 is not a regression
    wide = C.compare_tables(base, cand, primary={"errors"}, abs_margin=lambda m: 10.0)
    assert wide.rows.iloc[0].verdict == "no_change" and wide.rows.iloc[0].margin == 10.0
    narrow = C.compare_tables(base, cand, primary={"errors"}, abs_margin=lambda m: 1.0)
    assert narrow.rows.iloc[0].verdict == "regression"


def test_absolute_margin_is_read_from_the_spec(tmp_path):
    from benchrun.stats.analysis import compare_runs

    spec = {"spec": {"comparison": {"absoluteMarginByMetric": {"wrong_values": 5}},
                     "metrics": {"inference": {"primary": ["wrong_values"]}}}}
    b = make_run(tmp_path, "base", {("s", "", "wrong_values"): ([0] * 5, "count", "lower")}, spec=spec)
    c = make_run(tmp_path, "cand", {("s", "", "wrong_values"): ([3, 3, 4, 3, 3], "count", "lower")}, spec=spec)
    _, res = compare_runs(b, c)
    r = res.rows.set_index("name").loc["wrong_values"]
    assert r.margin == 5.0 and r.verdict == "no_change"
    # a margin only the candidate sets is not applied: none (0) is the stricter bar (gate_policy)
    c2 = make_run(tmp_path, "cand2", {("s", "", "wrong_values"): ([3, 3, 4, 3, 3], "count", "lower")}, spec=spec)
    b2 = make_run(tmp_path, "base2", {("s", "", "wrong_values"): ([0] * 5, "count", "lower")},
                  spec={"spec": {"metrics": {"inference": {"primary": ["wrong_values"]}}}})
    _, res = compare_runs(b2, c2)
    assert res.rows.set_index("name").loc["wrong_values"].margin == 0


# -- 4: qualified primaries, one-sided gate --------------------------------------------------------


def test_primaries_qualified_by_suite_and_case():
    keys = [("serving_sweep", "c=4", "ttft_ms"), ("serving_sweep", "c=1", "ttft_ms"), ("other", "c=4", "ttft_ms")]
    assert C.gating_mask(keys, ["serving_sweep/ttft_ms[c=4]"]).tolist() == [True, False, False]
    assert C.gating_mask(keys, ["ttft_ms[c=4]"]).tolist() == [True, False, True]
    assert C.gating_mask(keys, ["serving_sweep/ttft_ms"]).tolist() == [True, True, False]
    assert C.gating_mask(keys, ["ttft_ms"]).tolist() == [True, True, True]  # bare names still accepted
    with pytest.raises(Exception, match="SUITE/NAME"):
        C.parse_primary("a/b/c")


def test_gate_is_one_sided_in_the_regression_direction():
    base = _table([100, 101, 99, 100.5, 99.5], direction="lower")
    cand = _table([110, 111, 109, 110.5, 109.5], direction="lower")  # latency up: worse
    r = C.compare_tables(base, cand, primary={"m"}).rows.iloc[0]
    assert r.gate_test == "exact_rank" and r.p_gate == pytest.approx(1 / 252)  # two-sided was 2/252
    assert r.p_value == pytest.approx(2 / 252) and r.verdict == "regression"
    better = C.compare_tables(cand, base, primary={"m"}).rows.iloc[0]
    assert better.p_gate == pytest.approx(1.0) and better.verdict == "improvement"


def _sim(rng, shift, n, n_gating, sims, confirm):
    from test_compare import _sim_verdicts  # the gate's own decision, batch effects

    return _sim_verdicts(rng, shift, 0.02, n, n_gating=n_gating, sims=sims, confirm=confirm)


def test_aa_false_alarm_n5_with_18_gating_tests():
    rng = np.random.default_rng(21)
    rows = _sim(rng, 0.0, 5, 18, 600, confirm=False)
    suspected = sum(any(v == "regression" for v in r) for r in rows) / len(rows)
    assert suspected <= 0.05
    rows = _sim(rng, 0.0, 5, 18, 600, confirm=True)
    confirmed = sum(any(v == "regression" for v in r) for r in rows) / len(rows)
    assert confirmed <= 0.05


def test_power_ten_percent_shift_cv2_n5_with_18_gating_tests():
    # before: 0 of 200 flagged (two-sided exact p ≥ 2/252 can never pass 0.05/18)
    rng = np.random.default_rng(22)
    rows = _sim(rng, -0.10, 5, 18, 400, confirm=False)
    assert sum(r[0] == "regression" for r in rows) / len(rows) >= 0.80
    rows = _sim(rng, -0.10, 5, 18, 400, confirm=True)
    assert sum(r[0] == "regression" for r in rows) / len(rows) >= 0.80
    # and no other metric of the family is flagged more than the level allows
    others = sum(any(v == "regression" for v in r[1:]) for r in rows) / len(rows)
    assert others <= 0.05


# -- 5: failed replicates --------------------------------------------------------------------------


def test_failed_replicates_are_reported_per_arm_and_gated(tmp_path):
    from benchrun.stats.analysis import compare_runs

    m = {("serve", "", "tokens_per_second"): ([100, 101, 99, 100.2, 100.5], "tok/s", "higher")}
    b = make_run(tmp_path, "base", m, spec={"spec": {"metrics": {"inference": {"primary": ["tokens_per_second"]}}}})
    # two of the candidate's launches time out: three survive, and they look fine
    c = make_run(tmp_path, "cand", {("serve", "", "tokens_per_second"): ([100.3, 99.8, 100.1, 0, 0], "tok/s", "higher")},
                 failed_replicates={"serve": [4, 5]},
                 spec={"spec": {"metrics": {"inference": {"primary": ["tokens_per_second"]}}}})
    _, res = compare_runs(b, c)
    rows = res.rows.set_index("name")
    tps = rows.loc["tokens_per_second"]
    assert (tps.n_candidate, tps.failed_candidate, tps.failed_baseline) == (3, 2, 0)
    fail = rows.loc["failed_replicates"]
    assert fail.test == "fisher_exact" and bool(fail.gating)
    assert fail.p_regression == pytest.approx(stats.fisher_exact([[2, 3], [0, 5]], alternative="greater").pvalue)
    assert (fail.failed_baseline, fail.failed_candidate, fail.n_candidate) == (0, 2, 5)
    # three of five: Fisher cannot reach significance (p 0.17), and the two survivors cannot speak for
    # the suite — the pair is refused, where it passed with exit 0 before
    c3 = make_run(tmp_path, "cand3", {("serve", "", "tokens_per_second"): ([100.3, 99.8, 0, 0, 0], "tok/s", "higher")},
                  failed_replicates={"serve": [3, 4, 5]},
                  spec={"spec": {"metrics": {"inference": {"primary": ["tokens_per_second"]}}}})
    gate, res3 = compare_runs(b, c3)
    assert res3 is None and gate.not_comparable and [r.reason for r in gate.refusals] == ["ReplicatesFailed"]
    assert "gating suite serve: 3 of 5 candidate replicates failed (0 of 5 in the baseline)" in gate.message()
    # all five fail: the failure count gates as a regression
    c2 = make_run(tmp_path, "cand2", {("serve", "", "tokens_per_second"): ([0] * 5, "tok/s", "higher")},
                  failed_replicates={"serve": [1, 2, 3, 4, 5]},
                  spec={"spec": {"metrics": {"inference": {"primary": ["tokens_per_second"]}}}})
    _, res2 = compare_runs(b, c2)
    f2 = res2.rows.set_index("name").loc["failed_replicates"]
    assert f2.verdict == "regression" and res2.suspected == [("serve", "", "failed_replicates")]



def test_the_launch_record_decides_which_replicates_failed(tmp_path):
    """A replicate killed at its timeout before it wrote a result left no document, and one that
    wrote ok and was then killed left an ok document: the comparison read only the documents, so
    both counted as measured (or vanished) and a 60 % crash rate was not a failure at all."""
    from benchrun.stats.analysis import compare_runs
    from benchrun.stats.load import replicate_table

    prim = {"spec": {"metrics": {"inference": {"primary": ["tokens_per_second"]}}}}
    m = {("serve", "", "tokens_per_second"): ([100, 101, 99, 100.2, 100.5], "tok/s", "higher")}
    b = make_run(tmp_path, "base", m, spec=prim, launches={"serve": ["ok"] * 5})
    c = make_run(tmp_path, "cand", {("serve", "", "tokens_per_second"): ([100.3, 99.8, 100, 60, 61], "tok/s", "higher")},
                 launches={"serve": ["ok", "ok", "failed", "failed", "failed"]},
                 unwritten={"serve": [3]}, spec=prim)  # r3 wrote nothing; r4, r5 wrote ok, then timed out
    t = replicate_table(c, include_failed=True)
    assert sorted(t[t.status == "failed"].replicate) == [3, 4, 5]
    assert sorted(t[t.status == "ok"].replicate) == [1, 2]  # the killed ones' values are not measurements
    assert list(replicate_table(c).replicate) == [1, 2]
    gate, res = compare_runs(b, c)  # 3 of 5 failed: refused (failure_refusals), no longer exit 0
    assert res is None and "gating suite serve: 3 of 5 candidate replicates failed" in gate.message()
    # a damaged launch record is an error naming it, never a silent fallback to the documents
    (c / "structured" / "cand_launches.json").write_text("{not json")
    with pytest.raises(BenchrunError, match="cand_launches.json: the launch record is not readable JSON"):
        replicate_table(c, include_failed=True)


# -- 8: ties ---------------------------------------------------------------------------------------


def test_ties_use_the_exact_permutation_distribution():
    s = E.hodges_lehmann([2.0] * 5, [1.0] * 5, 0.95)
    assert s.p_value == pytest.approx(2 / 252) and s.method == "exact"  # was 0.0040 (asymptotic)
    assert s.coverage_kind == "at_least"

    def brute(x, y):
        pooled = np.r_[x, y]
        r = stats.rankdata(pooled)
        n, total = len(x), len(pooled)
        obs, mean = r[:n].sum(), n * (total + 1) / 2
        sums = np.array([r[list(c)].sum() for c in itertools.combinations(range(total), n)])
        return ((sums <= obs + 1e-9).mean(), (sums >= obs - 1e-9).mean(),
                (np.abs(sums - mean) >= abs(obs - mean) - 1e-9).mean())

    rng = np.random.default_rng(3)
    for _ in range(15):
        n, m = rng.integers(2, 8, size=2)
        x, y = rng.integers(0, 4, size=n).astype(float), rng.integers(0, 4, size=m).astype(float)
        assert R.rank_pvalues(x, y) == pytest.approx(brute(x, y), abs=1e-12)


# -- 9: symmetric δ --------------------------------------------------------------------------------


def test_delta_is_symmetric_on_the_log_scale():
    base = _table([100.0, 100.1, 99.9, 100.05, 99.95, 100.02], direction="lower")
    cand = _table([103.05, 103.15, 102.95, 103.1, 103.0, 103.07], direction="lower")  # +3.05 % latency
    r = C.compare_tables(base, cand, primary={"m"}).rows.iloc[0]
    assert r.ratio == pytest.approx(1 / 1.0305, rel=1e-3) and r.ratio > 0.97  # did not cross 1 − δ before
    assert r.verdict == "regression"
    # the same size of change the other way is an improvement
    r2 = C.compare_tables(cand, base, primary={"m"}).rows.iloc[0]
    assert r2.verdict == "improvement"


# -- 10: compare's exit code -----------------------------------------------------------------------


def test_compare_exits_3_on_a_suspected_gating_regression(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from benchrun.cli import app

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    prim = {"spec": {"metrics": {"inference": {"primary": ["tokens_per_second"]}}}}
    make_run(tmp_path, "base", {("s", "", "tokens_per_second"): ([100, 101, 99, 100.2, 100.5], "t", "higher")},
             spec=prim)
    make_run(tmp_path, "same", {("s", "", "tokens_per_second"): ([100.1, 100.9, 99.2, 100.3, 100.4], "t", "higher")},
             spec=prim)
    make_run(tmp_path, "slow", {("s", "", "tokens_per_second"): ([90, 91, 89, 90.2, 90.5], "t", "higher")}, spec=prim)
    make_run(tmp_path, "drift", {("s", "", "tokens_per_second"): ([90, 91, 89, 90.2, 90.5], "t", "higher")},
             spec=prim, environment={"kernel": "7.0", "packages": {"torch": "9"}})
    runner = CliRunner()
    assert runner.invoke(app, ["compare", "base", "same"]).exit_code == 0
    slow = runner.invoke(app, ["compare", "base", "slow"])
    assert slow.exit_code == 3 and "UnconfirmedRegression" in slow.output  # was 0
    # the p column is two-sided, p adj of a gating row the Holm-adjusted one-sided gate p: said, not implied
    assert "p 2-sided" in slow.output and "one-sided p in the regression direction" in slow.output
    js = runner.invoke(app, ["compare", "base", "slow", "--json"])
    assert js.exit_code == 3 and json.loads(js.output)["metrics"][0]["verdict"] == "regression"
    assert json.loads(js.output)["exit_code"] == 3
    drift = runner.invoke(app, ["compare", "base", "drift"])  # main() turns this into exit 4
    assert getattr(drift.exception, "exit_code", None) == 4  # the gate refused the pair (was 3, now 3 = regression)


# -- the batch engine equals the per-metric reference ----------------------------------------------


def _random_tables(rng, metrics=60):
    rows_b, rows_c = [], []
    for i in range(metrics):
        nb, nc = (5, 5) if i % 3 else (int(rng.integers(2, 12)), int(rng.integers(2, 12)))
        kind = i % 5
        if kind == 0:  # counts with ties and zeros
            b, c = rng.poisson(1.0, nb).astype(float), rng.poisson(1.5, nc).astype(float)
        elif kind == 1:  # negative values
            b, c = rng.normal(0, 1, nb), rng.normal(0.5, 1, nc)
        else:
            b = lognormal_replicates(rng, 100, 0.05, nb)
            c = lognormal_replicates(rng, 100 * rng.choice([0.9, 1.0, 1.1]), 0.05, nc)
        d = "higher" if i % 2 else "lower"
        rows_b.append(_table(b, metric=f"m{i}", direction=d, suite=f"s{i % 4}"))
        rows_c.append(_table(c, metric=f"m{i}", direction=d, suite=f"s{i % 4}"))
    return pd.concat(rows_b, ignore_index=True), pd.concat(rows_c, ignore_index=True)


@pytest.mark.parametrize("seed", [0, 1])
def test_batch_engine_matches_the_per_metric_reference(seed):
    rng = np.random.default_rng(seed)
    b, c = _random_tables(rng)
    primary = {f"m{i}" for i in range(0, 60, 7)}
    fast = C.compare_tables(b, c, primary=primary).rows
    ref = C.compare_tables(b, c, primary=primary, engine="reference").rows
    assert fast["verdict"].tolist() == ref["verdict"].tolist()
    assert fast["gate_test"].tolist() == ref["gate_test"].tolist()
    for col in ("p_value", "p_regression", "p_improvement", "p_adjusted", "p_gate"):
        np.testing.assert_allclose(fast[col].to_numpy(float), ref[col].to_numpy(float), rtol=1e-12, atol=1e-15)
    for col in ("t_regression", "t_improvement"):
        np.testing.assert_allclose(fast[col].to_numpy(float), ref[col].to_numpy(float), rtol=1e-9)
    for col in ("shift", "shift_low", "shift_high", "ratio", "ci_low", "ci_high", "difference", "ci_coverage"):
        np.testing.assert_allclose(fast[col].to_numpy(float), ref[col].to_numpy(float), rtol=1e-12)
    assert (fast["scale"] == ref["scale"]).all() and (fast["ci_coverage_kind"] == ref["ci_coverage_kind"]).all()
    assert set(fast["verdict"]) >= {"regression", "inconclusive"}


def test_batch_effects_match_scalar_effect_row_by_row():
    rng = np.random.default_rng(9)
    b = np.vstack([lognormal_replicates(rng, 50, 0.1, 7) for _ in range(30)])
    c = np.vstack([lognormal_replicates(rng, 55, 0.1, 6) for _ in range(30)])
    b[3], c[3] = 0.0, [1, 2, 1, 2, 0, 1]
    higher = np.arange(30) % 2 == 0
    out = batch.effects(b, c, higher, 0.95)
    for i in range(30):
        ref = E.effect(b[i], c[i], "higher" if higher[i] else "lower", 0.95)
        for k, v in ref.items():
            if isinstance(v, str):
                assert out[k][i] == v, (i, k)
            else:
                assert out[k][i] == pytest.approx(v, rel=1e-9, nan_ok=True), (i, k)
    assert math.isnan(out["ratio"][3]) and out["difference"][3] != 0


def test_batch_effects_label_tied_rows_beyond_the_exact_sizes_approximate():
    """Beyond 50 replicates an arm the interval is the normal approximation's: tied rows were
    labelled ``at_least`` (a guarantee only the exact interval has), the reference ``approximate``."""
    rng = np.random.default_rng(3)
    b = rng.integers(90, 110, size=(4, 55)).astype(float)  # integer values: ties
    c = rng.integers(90, 110, size=(4, 60)).astype(float)
    out = batch.effects(b, c, np.ones(4, bool), 0.95)
    for i in range(4):
        ref = E.effect(b[i], c[i], "higher", 0.95)
        assert ref["ci_coverage_kind"] == "approximate"
        assert out["ci_coverage_kind"][i] == "approximate", i


# -- 6/7 and the batch summaries -------------------------------------------------------------------


def test_p99_per_replicate_is_the_observation_and_the_within_replicate_band_is_descriptive():
    from benchrun.stats import describe as D

    rng = np.random.default_rng(2)
    frames = []
    for rep in range(1, 6):
        level = rng.normal(50, 5)  # replicate-to-replicate variation the request-level band ignores
        frames.append(pd.DataFrame({"suite": "serve", "replicate": rep, "point": "c=4", "bucket": "b",
                                    "e2e_ms": rng.gamma(4, level / 4, size=400)}))
    tails = D.tail_intervals(pd.concat(frames, ignore_index=True), 0.95)
    assert set(tails["interval_kind"]) == {"descriptive"}  # before: no label, read as a confidence interval
    summ = D.tail_summary(tails, 0.95)
    row = summ[(summ.bucket == "all") & (summ.quantity == "e2e_ms")].iloc[0]
    p99s = tails[(tails.bucket == "all") & (tails.quantity == "e2e_ms")].sort_values("replicate")["value"].to_numpy()
    assert row.n_replicates == 5 and row["median"] == pytest.approx(np.median(p99s))
    assert (row.ci_low, row.ci_high) == (p99s.min(), p99s.max())  # n = 5: [min, max], coverage 1 − 2/32
    assert row.coverage == pytest.approx(1 - 2 / 32) and "cannot reach" in row.note


def test_batch_trial_statistics_match_the_per_metric_reference():
    from benchrun.stats import describe as D

    rng = np.random.default_rng(4)
    parts = []
    for i in range(40):
        n = [3, 5, 10, 12][i % 4]
        vals = lognormal_replicates(rng, 100, 0.05, n)
        if i == 7:
            vals = np.full(n, 3.0)
        if i == 9:
            vals[0] *= 3  # an outlier
        parts.append(_table(vals, metric=f"m{i}", suite=f"s{i % 3}"))
    table = pd.concat(parts, ignore_index=True)
    fast = D.trial_statistics(table, 0.95)
    ref = D.trial_statistics(table, 0.95, engine="reference")
    assert fast[["suite", "case", "metric"]].equals(ref[["suite", "case", "metric"]])
    exact = ["n", "mean", "median", "std", "cv", "min", "max", "mad", "n_outliers", "median_ci_low",
             "median_ci_high", "median_ci_coverage"]
    for col in exact:
        np.testing.assert_allclose(fast[col].to_numpy(float), ref[col].to_numpy(float), rtol=1e-12, equal_nan=True)
    assert fast["mad_degenerate"].tolist() == ref["mad_degenerate"].tolist()
    assert fast["bca_ci_method"].tolist() == ref["bca_ci_method"].tolist()
    has = fast["bca_ci_method"] == "bca_mean"
    assert has.sum() == 19 and fast.set_index("metric").loc["m7", "bca_ci_method"] == "degenerate"
    # BCa: one shared resample matrix vs scipy per metric: equal within resampling noise
    width = (ref.loc[has, "bca_ci_high"] - ref.loc[has, "bca_ci_low"]).to_numpy(float)
    for col in ("bca_ci_low", "bca_ci_high"):
        assert (np.abs(fast.loc[has, col].to_numpy(float) - ref.loc[has, col].to_numpy(float)) < 0.1 * width).all()
    flagged = D.flag_replicates(table)
    assert int(flagged["outlier"].sum()) == int(ref["n_outliers"].sum()) >= 1


# -- 4: the validation warning ---------------------------------------------------------------------


def test_validation_warns_when_replicates_and_family_can_never_gate(tmp_path, canary_doc):
    import yaml

    from benchrun.spec.validation import validate_path
    from benchrun.stats.power import gating_warnings

    assert gating_warnings(canary_doc) == []  # 5 replicates, 6 qualified primaries: 1/252 < 0.05/6
    # 18 qualified primaries at 5 replicates: never significant on the exact test; 6 is the smallest n
    cases = ("c=1", "c=4", "c=8")
    canary_doc["spec"]["metrics"]["inference"]["primary"] = [
        f"serving_sweep/{m}[{c}]" for m in ("ttft_ms", "tokens_per_second", "p99_latency_ms", "jitter_ms",
                                            "cost_per_request_usd", "cost_per_token_usd") for c in cases]
    (path, msg), = gating_warnings(canary_doc)
    assert path == ("spec", "trials", "minReplicates")
    assert "18 gating tests" in msg and "0.0040" in msg and "6 replicates per arm is the smallest n" in msg
    p = tmp_path / "wide.yaml"
    p.write_text(yaml.safe_dump(canary_doc, sort_keys=False))
    (res,) = validate_path(p)
    paths = [w["path"] for w in res.to_json()["warnings"]]
    assert res.valid and paths[0] == "spec.trials.minReplicates"
    # and the sweep's p99s, 5 x 24 requests a point, could not be judged at all (percentile_warnings)
    assert paths[1:] == ["spec.layers[1].suites[0].parameters.requests_per_point"] * 3
    canary_doc["spec"]["trials"]["minReplicates"] = 6
    assert gating_warnings(canary_doc) == []


def test_large_replicate_counts_validate_quickly_and_huge_ones_are_refused(tmp_path, canary_doc):
    """C(2n, n) overflows a float from n = 515 and takes ever longer as an integer: the floor is
    computed in log space, and a suite's replicates is bounded as minReplicates is."""
    import time

    import yaml

    from benchrun.spec.validation import validate_path
    from benchrun.stats.power import gating_warnings
    from benchrun.stats.reading import _exact_floor

    assert R.smallest_one_sided_p(5, 5) == 1 / 252 and R.smallest_one_sided_p(3, 700) == 1 / math.comb(703, 3)
    assert R.smallest_one_sided_p(600, 600) == 0.0 and _exact_floor(600, 600, True) == 0.0
    canary_doc["spec"]["trials"]["minReplicates"] = 600
    started = time.monotonic()
    assert gating_warnings(canary_doc) == []
    canary_doc["spec"]["trials"]["minReplicates"] = 5
    canary_doc["spec"]["layers"][0]["suites"][0]["replicates"] = 10_000
    assert gating_warnings(canary_doc) == []
    assert time.monotonic() - started < 5
    canary_doc["spec"]["layers"][0]["suites"][0]["replicates"] = 1_000_000_000
    p = tmp_path / "huge.yaml"
    p.write_text(yaml.safe_dump(canary_doc, sort_keys=False))
    (res,) = validate_path(p)
    assert not res.valid
    assert [(e.path, e.message) for e in res.errors] == [
        ("spec.layers[0].suites[0].replicates", "is 1000000000; input should be less than or equal to 10000")]


def test_validation_warns_when_a_primary_p99_has_too_few_requests_to_be_judged(canary_doc):
    """The comparison refuses a pair whose primary p99 is not gateable; validate says so before a run."""
    from benchrun.stats.power import percentile_warnings

    assert percentile_warnings(canary_doc) == []  # 5 replicates x 96 requests = 480 >= 368
    workflow = next(s for layer in canary_doc["spec"]["layers"] for s in layer["suites"]
                    if s["name"] == "serving_workflow")
    workflow["parameters"]["requests"] = 32
    (path, msg), = percentile_warnings(canary_doc)
    assert path[-2:] == ("parameters", "requests")
    assert msg.startswith("primary serving_workflow/p99_latency_ms[c=4]: 5 replicates x 32 requests = 160 pooled "
                          "requests, and a p99 needs 368") and "set requests to at least 74" in msg
    workflow["parameters"]["duration_s"] = 10  # a count not known ahead: nothing to say
    assert percentile_warnings(canary_doc) == []


def test_qualified_primaries_satisfy_the_required_metric_rules(canary_doc):
    from benchrun.spec.rules import check, metric_name

    assert metric_name("serving_workflow/ttft_ms[c=4]") == "ttft_ms" and metric_name("ttft_ms") == "ttft_ms"
    assert [f for f in check(canary_doc) if "primary" in ".".join(map(str, f[0]))] == []
    canary_doc["spec"]["metrics"]["inference"]["primary"] = ["serving_workflow/ttft_ms[c=4]"]
    (finding,) = [f for f in check(canary_doc) if f[0][-1] == "primary"]
    assert "tokens_per_second" in finding[1] and "ttft_ms" not in finding[1].split(";")[0]


def test_a_suspected_failure_count_is_confirmed_on_fresh_launches():
    ok = [100.0, 101, 99, 100.2, 100.5]

    def arm(values, failed):
        t = _table(values, metric="tps", suite="serve")
        fails = pd.DataFrame({"suite": "serve", "case": "", "metric": "", "unit": "", "direction": "",
                              "replicate": failed, "value": np.nan, "status": "failed"})
        return pd.concat([t[~t.replicate.isin(failed)], fails], ignore_index=True)

    base, cand = arm(ok, []), arm(ok, [1, 2, 3, 4, 5])
    seen = []

    def confirm(keys):
        seen.append(keys)
        return arm(ok, []), arm(ok, [1, 2, 3, 4, 5])

    res = C.compare_tables(base, cand, primary={"tps"}, confirm=confirm)
    assert seen == [[("serve", "", "failed_replicates")]]
    assert res.confirmed == [("serve", "", "failed_replicates")] and res.condition()["status"] == "True"

    def fine(keys):
        return arm(ok, []), arm(ok, [])

    cleared = C.compare_tables(base, cand, primary={"tps"}, confirm=fine)
    assert cleared.confirmation == "not_confirmed" and cleared.condition()["status"] == "False"


def test_welch_fallback_keeps_its_level_under_heavy_tailed_noise():
    """The parametric fallback (5 vs 5, 18 gating tests) assumes log-normal noise; with log-t3
    noise and with 10 % of replicates five times as noisy, A/A suspicions stay under 5 %."""
    rng = np.random.default_rng(3)
    sims, fam, n = 600, 18, 5
    for noise in (lambda s: 0.02 * rng.standard_t(3, s),
                  lambda s: 0.02 * rng.normal(0, 1, s) * np.where(rng.random(s) < 0.1, 5, 1)):
        rows = sims * fam
        eff = batch.effects(100 * np.exp(noise((rows, n))), 100 * np.exp(noise((rows, n))), np.ones(rows, bool), 0.95)
        alarms = 0
        for i in range(sims):
            sl = slice(i * fam, (i + 1) * fam)
            d = C.decide({k: v[sl] for k, v in eff.items()}, np.ones(fam, bool), np.full(fam, n), np.full(fam, n),
                         np.full(fam, math.log1p(0.03)), 0.05)
            assert set(d.gate_test) == {"welch_t"}
            alarms += "regression" in d.verdict
        assert alarms / sims <= 0.05



def test_constant_arms_can_gate_in_a_large_family(tmp_path):
    """Both arms without spread (counters, quantised timers): the exact rank test cannot reach
    α/18 at 5 vs 5 and Welch's t was undefined, so a certain 10 % drop stayed inconclusive."""
    from benchrun.stats.analysis import compare_runs

    names = [f"m{i}_per_s" for i in range(18)]
    prim = {"spec": {"metrics": {"inference": {"primary": names}}}}
    base = {("s", "", n): ([100.0] * 5, "1/s", "higher") for n in names}
    cand = {**base, ("s", "", names[0]): ([90.0] * 5, "1/s", "higher")}
    _, res = compare_runs(make_run(tmp_path, "base", base, spec=prim), make_run(tmp_path, "cand", cand, spec=prim))
    rows = res.rows.set_index("name")
    assert rows.loc[names[0], "verdict"] == "regression"  # was inconclusive
    assert not (rows.loc[names[1:], "verdict"] == "regression").any()


# -- the capture gains fields: a baseline captured before them still compares ----------------------


def test_a_field_the_capture_gained_is_not_a_difference_from_an_older_baseline(tmp_path):
    # before: a baseline promoted before the capture recorded affinity_cpus, cgroup_cpu_quota, the GPU
    # source and MIG mode was refused against every later candidate ("hardware differs: <absent> -> 2")
    from benchrun.stats.gate import OLDER_CAPTURE, check_gate
    from benchrun.stats.load import load_run

    metrics = {("s", "", "x"): ([1.0, 2.0, 3.0, 4.0, 5.0], "u", "higher")}
    old = {"cpu": {"model": "EPYC", "usable_cpus": 8}, "gpus": [{"index": 0, "name": "H100"}],
           "gpu_runtime": {"driver_version": "550.1"}}
    new = {"cpu": {"model": "EPYC", "usable_cpus": 8, "affinity_cpus": 8, "cgroup_cpu_quota": None},
           "gpus": [{"index": 0, "name": "H100", "mig_mode": "Disabled"}],
           "gpu_runtime": {"driver_version": "550.1", "gpu_source": "nvidia-smi"}}
    base = load_run(make_run(tmp_path, "base", metrics, environment=old))
    cand = load_run(make_run(tmp_path, "cand", metrics, environment=new))
    gate = check_gate(base, cand, variable="runtime_version")
    assert gate.passed, gate.message()
    assert {d.field for d in gate.diffs if d.how == OLDER_CAPTURE} == {
        "environment.cpu.affinity_cpus", "environment.cpu.cgroup_cpu_quota", "environment.gpus.0.mig_mode"}
    assert "changed: nothing" in gate.message() and OLDER_CAPTURE in gate.message()
    # present in both, such a field is compared as any other: a pod capped at 4 CPUs is not one at 8
    capped = {**new, "cpu": {**new["cpu"], "cgroup_cpu_quota": 4}}
    other = load_run(make_run(tmp_path, "capped", metrics, environment=capped))
    refused = check_gate(cand, other, variable="runtime_version")
    assert not refused.passed and "environment.cpu.cgroup_cpu_quota: None -> 4" in refused.message()
    # a field no list names, absent from one capture, is still a difference (fail closed)
    odd = {**new, "cpu": {**new["cpu"], "sockets": 2}}
    assert not check_gate(cand, load_run(make_run(tmp_path, "odd", metrics, environment=odd)),
                          variable="runtime_version").passed


def test_what_the_capture_changed_in_how_it_reads_the_machine_is_not_a_difference(tmp_path):
    # found in review of the capture's change: every CPU host's older baseline was refused on the
    # wording of gpu_unavailable_reason; an older pod baseline on usable_cpus (the mask then, the mask
    # bounded by the quota now); and a MIG-enabled candidate passed beside an older capture
    from benchrun.stats.gate import check_gate
    from benchrun.stats.load import load_run

    metrics = {("s", "", "x"): ([1.0, 2.0, 3.0, 4.0, 5.0], "u", "higher")}
    old = {"cpu": {"model": "EPYC", "usable_cpus": 192}, "gpus": [{"index": 0, "name": "H100"}],
           "gpu_unavailable_reason": None, "gpu_runtime": {}}
    new = {"cpu": {"model": "EPYC", "usable_cpus": 4, "affinity_cpus": 192, "cgroup_cpu_quota": 4},
           "gpus": [{"index": 0, "name": "H100", "mig_mode": None}], "gpu_unavailable_reason": None,
           "gpu_runtime": {"gpu_source": "nvml"}}
    runs = {name: load_run(make_run(tmp_path, name, metrics, environment=env)) for name, env in (
        ("old", old), ("new", new),
        ("mig", {**new, "gpus": [{"index": 0, "name": "H100", "mig_mode": "Enabled"}]}),
        ("cpu-old", {"cpu": {"model": "EPYC"}, "gpus": [],
                     "gpu_unavailable_reason": "nvidia-smi not found (no NVIDIA driver on this host)"}),
        ("cpu-new", {"cpu": {"model": "EPYC"}, "gpus": [],
                     "gpu_unavailable_reason": "nvidia-smi not found; NVML not available (NVML Shared Library Not Found)"}),
        ("narrower", {**new, "cpu": {**new["cpu"], "affinity_cpus": 96}}))}
    assert check_gate(runs["old"], runs["new"], variable="runtime_version").passed  # 192 is 192
    assert check_gate(runs["cpu-old"], runs["cpu-new"], variable="runtime_version").passed
    mig = check_gate(runs["old"], runs["mig"], variable="runtime_version")
    assert not mig.passed and "mig_mode" in mig.message()  # a MIG slice is other hardware
    assert not check_gate(runs["old"], runs["narrower"], variable="runtime_version").passed  # 192 -> 96
