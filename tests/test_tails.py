"""p99s judged on pooled requests (benchrun.stats.tails), on fabricated runs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchrun.stats.analysis import compare_runs
from benchrun.stats.describe import min_samples_for_quantile
from benchrun.stats.synthetic import make_run
from benchrun.stats.tails import compare_p99, pooled_quantile, requests_needed

PRIMARY = {"spec": {"metrics": {"primary": ["serve/p99_latency_ms"]}}}


def _reqs(rng, n, scale=1.0, reps=5):
    return [pd.DataFrame({"request_id": [f"q{j}" for j in range(n)], "point": "c=4", "bucket": "a",
                          "e2e_ms": scale * 100 * np.exp(rng.normal(0, 0.02)) * np.exp(rng.normal(0, 0.3, n)),
                          "error": [None] * n}) for _ in range(reps)]


def _serving(reqs, verdicts=None):
    return [[{"point": "c=4", "bucket": "all", "offered_load": 4, "verdict": (verdicts or {}).get(k, "valid"),
              "verdict_reasons": [] if (verdicts or {}).get(k, "valid") == "valid" else ["24 completed requests < 368 needed for a bounded p99 at 95%"]}]
            for k in range(len(reqs))]


def _run(home, run_id, reqs, verdicts=None):
    p99 = [float(np.percentile(r["e2e_ms"], 99)) for r in reqs]
    return make_run(home, run_id, {("serve", "c=4", "p99_latency_ms"): (p99, "ms", "lower")},
                    spec=PRIMARY, serving={"serve": _serving(reqs, verdicts)}, requests={"serve": reqs})


def _row(res):
    return res.rows[res.rows["name"] == "p99_latency_ms"].iloc[0]


def test_a_p99_from_too_few_requests_is_not_gateable(tmp_path):
    # before: 5 replicate "p99s" of 24 requests (each its maximum) were rank-tested, and a
    # candidate whose maxima happened to be higher was a gating regression
    rng = np.random.default_rng(0)
    base = _run(tmp_path, "base", _reqs(rng, 24))
    cand_reqs = _reqs(rng, 24, scale=1.3)
    cand = _run(tmp_path, "cand", cand_reqs)
    _gate, res = compare_runs(base, cand)
    row = _row(res)
    assert row.verdict == "not gateable: 120 requests, needs 368"
    assert not res.suspected and row.n_requests_candidate == 120


def test_the_loadgen_verdict_is_read_and_enough_requests_give_a_verdict(tmp_path):
    rng = np.random.default_rng(1)
    base = _run(tmp_path, "base", _reqs(rng, 400))
    cand = _run(tmp_path, "cand", _reqs(rng, 400, scale=1.25))
    _gate, res = compare_runs(base, cand)
    row = _row(res)
    assert row.verdict == "regression" and row.tail_method.startswith("pooled requests")
    assert 0.7 < row.ratio < 0.9 and row.ci_low < row.ratio < row.ci_high  # ratio ↑ better: p99 up ~25 %
    bad = _run(tmp_path, "cand2", _reqs(rng, 400, scale=1.25), verdicts={2: "invalid"})
    _gate, res = compare_runs(base, bad)
    row = _row(res)
    assert row.verdict.startswith("not gateable: load generator verdict invalid (candidate r3: ")
    assert not res.suspected


def test_unequal_request_counts_do_not_read_as_a_change():
    # duration mode: one arm ran 4x the requests; replicate p99s flagged 19 % of A/A tests
    rng = np.random.default_rng(2)
    flags = 0
    for s in range(60):
        tc = compare_p99([a["e2e_ms"].to_numpy() for a in _reqs(rng, 100)],
                         [a["e2e_ms"].to_numpy() for a in _reqs(rng, 400)], n_boot=200, seed=s)
        flags += tc.p_higher < 0.05
    assert flags <= 6


def test_one_rule_for_the_request_count_and_an_equal_weight_per_replicate():
    assert requests_needed() == 368 == min_samples_for_quantile(0.99, 0.95)
    assert requests_needed(0.5, 0.95) == min_samples_for_quantile(0.5, 0.95)
    # the load generator's verdict asks the same number the comparison does (it asked 459 before)
    from benchrun.loadgen.metrics import VerdictPolicy, supported_percentiles, verdict

    for n, valid in ((367, False), (368, True)):
        _, reasons = verdict(load_model="closed_loop", offered_load=1, n_completed=n, n_errors=0, error_kinds={},
                             stats={}, client={}, policy=VerdictPolicy())
        assert (not any(f"< {requests_needed()} needed for a bounded p99 at 95%" in r for r in reasons)) is valid, (n, reasons)
    assert "p99" in supported_percentiles(368) and "p99" not in supported_percentiles(367)
    a, b = np.arange(100.0), np.arange(1000.0, 1010.0)
    # each replicate weighs half: the median lies between them (pooling by request: ~55)
    assert 99 < pooled_quantile([a, b], 0.5) < 1000 and 99 < pooled_quantile([a[::10], b], 0.5) < 1000
    assert pooled_quantile([a], 0.99) == pytest.approx(np.percentile(a, 99), abs=1.0)


@pytest.mark.slow
def test_interval_coverage_at_100_requests_per_replicate():
    rng = np.random.default_rng(3)
    cover = 0
    for s in range(120):
        tc = compare_p99([a["e2e_ms"].to_numpy() for a in _reqs(rng, 100)],
                         [a["e2e_ms"].to_numpy() for a in _reqs(rng, 100)], n_boot=200, seed=s)
        cover += tc.low <= 0 <= tc.high
    assert 0.91 <= cover / 120 <= 1.0
