"""Spread apart from shift (benchrun.stats.spread): a noisier candidate is "spread changed", not a regression."""

from __future__ import annotations

import numpy as np
import pandas as pd

from benchrun.stats import compare as C
from benchrun.stats.spread import brunner_munzel_p


def _table(values, metric="lat"):
    return pd.DataFrame({"suite": "s", "case": "", "metric": metric, "unit": "ms", "direction": "lower",
                         "replicate": range(1, len(values) + 1), "value": list(values), "status": "ok"})


def test_a_noisier_candidate_is_not_read_as_slower():
    # a candidate (8 replicates) 4x as noisy as its baseline (30), same median: the rank test
    # alone calls it slower in ~12 % of one-sided 5 % tests; with Brunner-Munzel in the rule
    # (a verdict it does not confirm is demoted), about the nominal 5 %
    from benchrun.stats import batch
    from benchrun.stats.spread import scale_p

    rng = np.random.default_rng(0)
    sims = 1500
    b = np.exp(rng.normal(0, 0.01, (sims, 30)))
    c = np.exp(rng.normal(0, 0.04, (sims, 8)))
    mw = batch.effects(b, c, np.zeros(sims, bool), 0.95)["p_regression"] < 0.05
    kept = [i for i in np.nonzero(mw)[0] if brunner_munzel_p(-np.log(b[i]), -np.log(c[i]), True) < 0.05]
    assert np.mean([scale_p(np.log(b[i]), np.log(c[i])) < 0.05 for i in range(100)]) > 0.5  # it sees the spreads
    assert mw.mean() > 0.09 and len(kept) / sims <= 0.065
    # and through the comparison: one such candidate's row (the rank test alone: an "improvement";
    # its interval now reaches 0, being as wide as Brunner-Munzel's, and the spread test says why)
    rng = np.random.default_rng(34)
    b1, c1 = 100 * np.exp(rng.normal(0, 0.01, 30)), 100 * np.exp(rng.normal(0, 0.04, 8))
    row = C.compare_tables(_table(b1), _table(c1), primary={"lat"}, delta_pct=0.0).rows.iloc[0]
    assert row.verdict == "spread changed" and row.spread == "wider" and "spread wider" in row.note
    assert row.ci_low < 1 < row.ci_high and row.ci_coverage_kind == "widened"


def test_a_real_shift_stays_a_regression_and_the_row_says_its_spread():
    rng = np.random.default_rng(1)
    b = 100 * np.exp(rng.normal(0, 0.02, 10))
    c = 110 * np.exp(rng.normal(0, 0.02, 10))
    row = C.compare_tables(_table(b), _table(c), primary={"lat"}).rows.iloc[0]
    assert row.verdict == "regression" and row.p_brunner_munzel < 0.05 and 0.2 < row.spread_ratio < 5
    assert brunner_munzel_p(np.array([1.0, 2, 3]), np.array([0.1, 0.2, 0.3]), worse=True) == 0.0


def test_brown_forsythe_matches_scipy_levene_on_the_median():
    from scipy import stats

    from benchrun.stats.spread import brown_forsythe_p

    rng = np.random.default_rng(3)
    b, c = rng.normal(0, 1, (50, 5)), rng.normal(0, 2, (50, 7))
    got = brown_forsythe_p(b, c)
    want = [stats.levene(b[i], c[i], center="median").pvalue for i in range(50)]
    assert np.max(np.abs(got - want)) < 1e-12


def _tables(rng, metrics, sd_b, sd_c, n=10):
    rows_b, rows_c = [], []
    for m in range(metrics):
        rows_b.append(_table(100 * np.exp(rng.normal(0, sd_b, n)), metric=f"m{m}"))
        rows_c.append(_table(100 * np.exp(rng.normal(0, sd_c if m == 0 else sd_b, n)), metric=f"m{m}"))
    return pd.concat(rows_b, ignore_index=True), pd.concat(rows_c, ignore_index=True)


def test_a_noisier_candidate_with_no_shift_flag_is_reported_as_spread_changed():
    # before: only rows flagged as a shift were examined, so a candidate 4x as noisy whose
    # median did not move read "inconclusive" and nothing said it was noisier
    # (Brown-Forsythe's power for 4x the spread, one test at 5 %: 14 % at n = 5, 82 % at 10, 99.9 % at 20)
    found = 0
    for seed in range(20):
        b, c = _tables(np.random.default_rng(seed), 6, 0.01, 0.04, n=20)
        r = C.compare_tables(b, c, primary={"m0"}).rows.set_index("name").loc["m0"]
        assert r.verdict in ("spread changed", "no_change")  # never a shift; "no change" of the median stays
        if r.spread == "wider":
            found += 1
            assert "spread wider" in r.note and r.p_spread_adjusted < 0.05
        if r.verdict == "spread changed":
            assert r.spread == "wider"  # an inconclusive median with a wider spread says so
    assert found >= 15


def test_spread_flags_stay_rare_when_nothing_changed():
    runs_flagged = 0
    for seed in range(100):
        b, c = _tables(np.random.default_rng(1000 + seed), 18, 0.02, 0.02, n=5)
        rows = C.compare_tables(b, c, primary={"m0"}).rows
        runs_flagged += bool((rows["spread"] != "").any())
    assert runs_flagged <= 8  # BH at 5 % over the run's metrics: any flag in about 5 % of A/A runs


def test_a_suspect_with_a_wider_spread_still_goes_to_the_confirmation_round():
    from benchrun.stats.paired import screened
    from benchrun.stats.spread import flag_spread

    rng = np.random.default_rng(9)
    b = np.exp(rng.normal(0, 0.01, (2, 20)))
    c = np.exp(rng.normal(0, 0.06, (2, 20)))
    df = pd.DataFrame({"name": ["m0", "m1"], "gating": [True, False], "verdict": ["inconclusive"] * 2,
                       "p_gate": [0.01, np.nan], "shift": [-0.1, -0.1], "margin": [0.03, 0.03], "note": ["", ""],
                       "role": ["primary", "secondary"]})
    assert screened(df, 0.05).tolist() == [True, False]
    flag_spread(df, lambda sel, n_b, n_c: (b[sel], c[sel]), np.array([20, 20]), np.array([20, 20]),
                np.array([True, True]), 0.05)
    assert df.spread.tolist() == ["wider", "wider"]
    # the suspect stays inconclusive (screened into the round); the other row says spread changed
    assert df.verdict.tolist() == ["inconclusive", "spread changed"] and screened(df, 0.05).tolist() == [True, False]
    from benchrun.stats.commands import verdict_cell

    assert verdict_cell({"verdict": "inconclusive", "gating": True, "spread": "wider"}).endswith("(spread wider)")


def test_the_side_of_a_spread_change_is_the_side_the_test_found():
    # a few wide values among tight ones: the mean absolute deviation (what Brown-Forsythe
    # compares) doubles while the median absolute deviation falls; the row said "narrower"
    from benchrun.stats.spread import flag_spread

    rng = np.random.default_rng(2)
    b = np.exp(rng.normal(0, 0.02, (1, 20)))
    c = np.exp(np.r_[rng.normal(0, 0.001, 12), [0.2, -0.2, 0.21, -0.19, 0.22, -0.18, 0.2, -0.21]])[None, :]
    lb, lc = np.log(b[0]), np.log(c[0])
    mad = lambda x: np.median(np.abs(x - np.median(x)))  # noqa: E731
    assert mad(lc) < mad(lb)
    df = pd.DataFrame({"name": ["m"], "gating": [False], "verdict": ["inconclusive"], "p_gate": [np.nan],
                       "shift": [0.0], "margin": [0.03], "note": [""], "role": ["secondary"]})
    flag_spread(df, lambda sel, n_b, n_c: (b[sel], c[sel]), np.array([20]), np.array([20]), np.array([True]), 0.05)
    assert df.spread.iloc[0] == "wider" and "mean absolute deviation" in df.note.iloc[0], df.note.iloc[0]


def test_a_spread_changed_row_keeps_the_replicate_advice():
    from benchrun.stats.reading import detectable

    df = pd.DataFrame({"role": ["primary"], "p_value": [0.2], "shift": [-0.10], "shift_low": [-0.3],
                       "shift_high": [0.1], "ci_coverage": [0.95], "n_baseline": [5], "n_candidate": [5],
                       "scale": ["log"], "margin": [0.03], "verdict": ["spread changed"], "name": ["m"]})
    adv = detectable(df, 0.05, 1, np.array(["exact_rank"]))["advice"][0]
    assert adv.startswith("large change, not significant at n = 5"), adv


def test_an_improvement_under_the_welch_fallback_is_rechecked_with_the_p_holm_adjusted():
    """The re-check scales Brunner–Munzel's p by the row's own Holm factor, p_adjusted / the p Holm
    adjusted. Under the Welch fallback the improvement side's adjusted p is Welch's, but the factor
    divided by the rank test's p: a smaller factor, so a shift the row's own correction does not
    establish stood as an improvement."""
    import math

    from benchrun.stats.spread import apply_spread

    b = np.array([100.0, 100.5, 99.6, 100.2, 99.8])
    c = np.array([99.9, 112.0, 118.0, 125.0, 131.0])
    p_bm = brunner_munzel_p(np.log(b), np.log(c), False)  # one-sided "the candidate is higher" (better)
    alpha = 0.05
    holm = 13.0
    adj = 0.13  # Holm's adjusted improvement p: 13 × Welch's 0.01
    t_imp = adj / holm
    rank_imp = adj / (0.5 * alpha / p_bm)  # the rank test's p: a factor under which the shift would stand
    assert p_bm * max(1.0, adj / rank_imp) < alpha <= p_bm * holm
    df = pd.DataFrame(dict(verdict=["improvement"], direction=["higher"], gating=[True], p_gate=[0.9],
                           p_gate_improvement=[t_imp], p_improvement=[rank_imp], t_improvement=[t_imp],
                           p_adjusted=[1.0], p_adjusted_improvement=[adj], p_value=[2 * rank_imp], note=[""],
                           gate_test=["welch_t"], name=["tps"]))
    apply_spread(df, lambda i: (b, c), alpha)
    assert math.isfinite(df.at[0, "p_spread"])  # the scale test ran: the shift did not stand on its own
