"""Replicate loader, summaries, MAD outliers and intervals (benchrun.stats.load / describe)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from benchrun.errors import BenchrunError
from benchrun.stats import describe as D
from benchrun.stats.baseline import promote
from benchrun.stats.load import replicate_table, resolve_run
from benchrun.stats.synthetic import make_run


def test_replicate_table_one_row_per_replicate_and_ok_only(tmp_path):
    rd = make_run(
        tmp_path, "run-a",
        {("gemm", "n=256", "tflops"): ([1.0, 1.1, 1.2, 1.3], "TFLOP/s", "higher"),
         ("fio", "randread", "iops"): ([100, 110, 120, 130], "IO/s", "higher")},
        failed_replicates={"gemm": [2]},
    )
    t = replicate_table(rd)
    assert list(t.columns) == ["suite", "case", "metric", "unit", "direction", "replicate", "value", "status"]
    gemm = t[t.suite == "gemm"].sort_values("replicate")
    assert gemm.replicate.tolist() == [1, 3, 4]  # the failed replicate does not count
    assert gemm.value.tolist() == [1.0, 1.2, 1.3]
    assert set(t.status) == {"ok"}
    assert len(t[t.suite == "fio"]) == 4


def test_replicate_table_summarises_per_rank_rows_by_replicate(tmp_path):
    rd = make_run(tmp_path, "run-r", {("ar", "1MiB", "busbw"): ([5.0, 6.0], "GB/s", "higher")})
    # a second rank's row for replicate 1: rows of one replicate are one observation
    import json
    p = rd / "structured" / "run-r_ar_r1.json"
    doc = json.loads(p.read_text())
    doc["metrics"].append({**doc["metrics"][0], "value": 7.0, "rank_id": 1})
    p.write_text(json.dumps(doc))
    t = replicate_table(rd)
    assert len(t) == 2
    assert t.sort_values("replicate").value.tolist() == [6.0, 6.0]


def test_summary_values():
    s = D.summarize([10, 11, 12, 13, 14], 0.95)
    assert s["n"] == 5 and s["mean"] == 12 and s["median"] == 12
    assert s["std"] == pytest.approx(np.std([10, 11, 12, 13, 14], ddof=1))
    assert s["cv"] == pytest.approx(s["std"] / 12)
    assert s["min"] == 10 and s["max"] == 14
    assert s["mad"] == pytest.approx(1.4826 * 1)
    assert s["n_outliers"] == 0 and not s["mad_degenerate"]


def test_mad_outlier_flagged_and_kept():
    vals = [100.0, 101.0, 99.0, 100.5, 99.5, 140.0]
    z, degenerate = D.robust_z(vals)
    assert not degenerate
    med = np.median(vals)
    mad = 1.4826 * np.median(np.abs(np.array(vals) - med))
    assert z[-1] == pytest.approx((140 - med) / mad)
    assert D.outlier_flags(vals).tolist() == [False] * 5 + [True]
    t = pd.DataFrame({"suite": "s", "case": "", "metric": "m", "unit": "u", "direction": "higher",
                      "replicate": range(1, 7), "value": vals, "status": "ok"})
    flagged = D.flag_replicates(t)
    assert len(flagged) == 6  # kept
    assert flagged.outlier.tolist() == [False] * 5 + [True]
    s = D.summarize(vals, 0.95)
    assert s["n_outliers"] == 1 and s["max"] == 140.0  # kept in the summary too


def test_mad_zero_means_no_flags_and_a_note():
    vals = [5.0, 5.0, 5.0, 5.0, 9.0]
    assert D.mad_scaled(vals) == 0
    assert not D.outlier_flags(vals).any()
    s = D.summarize(vals, 0.95)
    assert s["mad_degenerate"] and "mad_degenerate" in s["notes"] and s["n_outliers"] == 0


def test_median_interval_coverage_is_exact_binomial():
    iv = D.median_interval(list(range(1, 21)), 0.95)
    # [x(6), x(15)] for n = 20: coverage 1 - 2 P(Bin(20, 1/2) <= 5)
    assert (iv.low, iv.high) == (6.0, 15.0)
    assert iv.coverage == pytest.approx(1 - 2 * 0.020694732666015625)
    small = D.median_interval([3, 1, 2, 5, 4], 0.95)
    assert (small.low, small.high) == (1.0, 5.0)
    assert small.coverage == pytest.approx(1 - 2 / 32)  # 93.75 %: below nominal, and says so
    assert "cannot reach" in small.note


def test_median_interval_simulated_coverage_matches_stated():
    rng = np.random.default_rng(7)
    n, sims = 12, 2000
    iv0 = D.median_interval(np.arange(n), 0.95)
    hits = 0
    for _ in range(sims):
        x = rng.lognormal(0.0, 0.5, size=n)  # skewed: the interval is distribution-free
        iv = D.median_interval(x, 0.95)
        hits += iv.low <= 1.0 <= iv.high  # true median of lognormal(0, .5) is 1
    assert abs(hits / sims - iv0.coverage) < 0.02
    assert iv0.coverage >= 0.95


def test_bca_needs_ten_replicates_and_is_seeded():
    assert math.isnan(D.bca_interval(np.arange(9.0), 0.95).low)
    x = np.random.default_rng(1).normal(100, 2, size=12)
    a = D.bca_interval(x, 0.95, seed=3)
    b = D.bca_interval(x, 0.95, seed=3)
    assert a == b and a.method == "bca_mean" and math.isnan(a.coverage)
    assert a.low < x.mean() < a.high
    assert a.high - a.low < 4 * x.std(ddof=1)


def test_quantile_interval_and_p99_sample_size():
    # the upper bound x(n) needs 1 - 0.99^n >= 0.975: n >= ln(0.025)/ln(0.99) = 367.03
    assert D.min_samples_for_quantile(0.99, 0.95) == 368
    x = np.arange(1, 1001, dtype=float)
    iv, bounded = D.quantile_interval(x, 0.99, 0.95)
    assert bounded and iv.low <= np.quantile(x, 0.99) <= iv.high
    assert iv.coverage >= 0.95
    small, bounded_small = D.quantile_interval(x[:200], 0.99, 0.95)
    assert not bounded_small and small.high == math.inf and small.low <= 198
    # simulated coverage of the bounded interval matches the stated one
    rng = np.random.default_rng(9)
    n, hits, true_p99 = 1000, 0, -np.log(0.01)  # exponential(1)
    for _ in range(1000):
        iv, _ = D.quantile_interval(rng.exponential(size=n), 0.99, 0.95)
        hits += iv.low <= true_p99 <= iv.high
    stated = D.quantile_interval(np.arange(n), 0.99, 0.95)[0].coverage
    assert stated >= 0.95 and abs(hits / 1000 - stated) < 0.02


def test_tail_intervals_per_point_and_bucket():
    rng = np.random.default_rng(2)
    n = 600
    req = pd.DataFrame({
        "suite": "serve", "replicate": 1, "point": np.where(np.arange(n) < 400, "c=1", "c=8"),
        "bucket": np.where(np.arange(n) % 2 == 0, "512/128", "1024/256"),
        "e2e_ms": rng.gamma(4, 10, size=n), "ttft_ms": rng.gamma(2, 5, size=n),
        "error": [None] * (n - 5) + ["timeout"] * 5,
    })
    out = D.tail_intervals(req, 0.95)
    c1_all = out[(out.point == "c=1") & (out.bucket == "all") & (out.quantity == "e2e_ms")].iloc[0]
    assert c1_all.n_requests == 400 and c1_all.trustworthy
    ok = req[(req.point == "c=1")]
    assert c1_all.value == pytest.approx(np.quantile(ok.e2e_ms, 0.99))
    c8 = out[(out.point == "c=8") & (out.bucket == "all") & (out.quantity == "e2e_ms")].iloc[0]
    assert c8.n_requests == 195 and not c8.trustworthy  # errors excluded, too few for p99
    assert set(out.bucket) == {"all", "512/128", "1024/256"}


def test_resolve_and_promote(tmp_path):
    make_run(tmp_path, "base-1", {("s", "", "m"): ([1, 2, 3], "u", "higher")}, sealed=True)
    with pytest.raises(BenchrunError, match="benchrun promote"):
        resolve_run("published/current", home=tmp_path)
    p = promote("base-1", home=tmp_path)
    assert p == tmp_path / "published" / "current" and p.read_text().splitlines()[0] == "base-1"
    assert resolve_run("cluster/published/current", home=tmp_path) == tmp_path / "runs" / "base-1"
    assert resolve_run("base-1", home=tmp_path) == tmp_path / "runs" / "base-1"
    assert resolve_run(str(tmp_path / "runs" / "base-1"), home=tmp_path) == (tmp_path / "runs" / "base-1").resolve()
    with pytest.raises(BenchrunError, match="not found"):
        resolve_run("nope", home=tmp_path)
    with pytest.raises(BenchrunError, match="no such run directory"):
        resolve_run("../no-such-run-dir", home=tmp_path)
    with pytest.raises(BenchrunError, match="not valid"):
        resolve_run("Bad_Id", home=tmp_path)
    with pytest.raises(BenchrunError, match="not found"):
        promote("missing", home=tmp_path)
    # other aliases, with the site prefix the specs write
    with pytest.raises(BenchrunError, match="--alias canary"):
        resolve_run("local/published/canary", home=tmp_path)
    promote("base-1", home=tmp_path, alias="canary")
    assert resolve_run("local/published/canary", home=tmp_path) == tmp_path / "runs" / "base-1"
    assert resolve_run("local/runs/base-1", home=tmp_path) == tmp_path / "runs" / "base-1"
    with pytest.raises(BenchrunError, match="baseline alias"):
        promote("base-1", home=tmp_path, alias="../x")


def test_trial_statistics_round_trip_through_json(tmp_path):
    from benchrun.stats import analysis

    rng = np.random.default_rng(0)
    rd = make_run(tmp_path, "rt", {("s", "c", "m"): (list(rng.normal(10, 0.2, 9)) + [30.0], "u", "higher"),
                                   ("s", "", "k"): ([5, 5, 5, 5, 5], "u", "lower")})
    st = analysis.trial_statistics_for_run(rd)
    assert analysis.write_trial_statistics(st, rd) == rd / "structured" / "rt_trial_statistics.json"
    back = analysis.read_trial_statistics(rd)
    pd.testing.assert_frame_equal(st.summary.reset_index(drop=True), back.summary[st.summary.columns],
                                  check_dtype=False)
    assert back.replicates["outlier"].tolist() == st.replicates["outlier"].tolist()
    assert int(back.replicates["outlier"].sum()) == 1
    k = back.summary.set_index("metric").loc["k"]
    assert bool(k["mad_degenerate"]) and k["n_outliers"] == 0
    m = back.summary.set_index("metric").loc["m"]
    assert m["n"] == 10 and m["bca_ci_method"] == "bca_mean"  # 10 replicates: BCa shown
    # the loader ignores the statistics file itself (it is not a suite result)
    assert len(replicate_table(rd)) == 15
    # a damaged statistics file is derived data: recomputed, not a traceback
    (rd / "structured" / "rt_trial_statistics.json").write_text("{truncated")
    again = analysis.read_trial_statistics(rd)
    assert again.summary.set_index("metric").loc["m", "n"] == 10 and int(again.replicates["outlier"].sum()) == 1


@pytest.mark.slow
def test_bca_coverage_near_nominal_with_enough_replicates():
    rng = np.random.default_rng(5)
    sims, n = 1000, 100
    hits = 0
    for i in range(sims):
        iv = D.bca_interval(rng.normal(100, 2, n), 0.95, seed=i, n_resamples=1999)
        hits += iv.low <= 100 <= iv.high
    assert abs(hits / sims - 0.95) < 0.02
    small = D.bca_interval(rng.normal(100, 2, 10), 0.95)
    assert "approximate" in small.note  # at n = 10 it says so (simulated: about 90 %)


def test_bca_is_labelled_approximate():
    """Before: BCa stated its coverage as the confidence level (0.95); measured 0.88–0.90 at n = 10."""
    x = np.random.default_rng(1).normal(100, 2, size=12)
    iv = D.bca_interval(x, 0.95)
    assert math.isnan(iv.coverage) and iv.nominal == 0.95 and "approximate" in iv.note
    row = D.summarize(x, 0.95)
    assert math.isnan(row["bca_ci_coverage"]) and row["bca_ci_nominal"] == 0.95
    assert row["median_ci_coverage"] >= 0.95  # the order-statistic interval keeps its exact coverage
    # the coverage the note quotes (90 % for normal replicates at n = 10) holds
    rng = np.random.default_rng(11)
    lo, hi, ok = D.bca_batch(rng.normal(100, 2, size=(3000, 10)), 0.95, seed=5)
    cov = ((lo <= 100) & (100 <= hi)).mean()
    assert abs(cov - 0.90) < 0.02 and "90 % normal" in iv.note


def test_lineage_of_a_run_whose_every_replicate_failed_is_checked_not_crashed(tmp_path):
    """A gang whose rank crashed in every replicate leaves no measurement: the lineage check
    raised KeyError('suite', 'replicate') on the empty replicate table (a STEP_FAILURE)."""
    from benchrun.stats.lineage import lineage_gaps

    rd = make_run(tmp_path, "allfail-20260101000000-abcdef12",
                  {("s", "", "m"): ([1.0, 1.0, 1.0], "u", "higher")}, failed_replicates={"s": [1, 2, 3]})
    from benchrun.stats import analysis

    analysis.write_trial_statistics(analysis.trial_statistics_for_run(rd), rd)
    table = analysis.read_trial_statistics(rd).replicates  # what the lineage_complete check reads
    assert table.empty
    assert lineage_gaps(rd, table) == []
    (rd / "status.json").write_text('{"run_id": "allfail-20260101000000-abcdef12"}')
    assert lineage_gaps(rd, table) == ["status.json lacks workload_spec_digest", "status.json lacks artifact_manifest_digest"]
