"""p99s judged on pooled requests (benchrun.stats.tails), on fabricated runs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchrun.loadgen.metrics import VerdictPolicy, verdict
from benchrun.stats.analysis import compare_runs
from benchrun.stats.describe import min_samples_for_quantile
from benchrun.stats.synthetic import make_run
from benchrun.stats.tails import compare_p99, pooled_quantile, requests_needed

PRIMARY = {"spec": {"metrics": {"inference": {"primary": ["serve/p99_latency_ms"]}}}}  # the only primary


def _reqs(rng, n, scale=1.0, reps=5):
    return [pd.DataFrame({"request_id": [f"q{j}" for j in range(n)], "point": "c=4", "bucket": "a",
                          "e2e_ms": scale * 100 * np.exp(rng.normal(0, 0.02)) * np.exp(rng.normal(0, 0.3, n)),
                          "error": [None] * n}) for _ in range(reps)]


def _serving(reqs, verdicts=None):
    """Each replicate's serving row with the load generator's own verdict on its requests (a
    replicate under 368 requests is invalid for its own p99); ``verdicts``: replicate -> an
    extra reason (an error rate) that makes it invalid for any p99."""
    out = []
    for k, r in enumerate(reqs):
        v, why = verdict(load_model="closed_loop", offered_load=4, n_completed=len(r), n_errors=0, error_kinds={},
                         stats={}, client={}, policy=VerdictPolicy())
        if (verdicts or {}).get(k):
            v, why = "invalid", [*why, verdicts[k]]
        out.append([{"point": "c=4", "bucket": "all", "offered_load": 4, "verdict": v, "verdict_reasons": why}])
    return out


def _run(home, run_id, reqs, verdicts=None):
    p99 = [float(np.percentile(r["e2e_ms"], 99)) for r in reqs]
    return make_run(home, run_id, {("serve", "c=4", "p99_latency_ms"): (p99, "ms", "lower")},
                    spec=PRIMARY, serving={"serve": _serving(reqs, verdicts)}, requests={"serve": reqs})


def _row(res):
    return res.rows[res.rows["name"] == "p99_latency_ms"].iloc[0]


def _refused(base, cand, why, label="serve/p99_latency_ms[c=4]"):
    """A primary the comparison cannot judge refuses the pair (exit 5), naming why: it is never
    cleared of a regression it could not test."""
    gate, res = compare_runs(base, cand)
    assert res is None and gate.not_comparable, gate.message()
    assert f"primary {label} cannot be judged ({why})" in gate.message(), gate.message()


def test_a_p99_from_too_few_requests_is_not_gateable(tmp_path):
    # before: 5 replicate "p99s" of 24 requests (each its maximum) were rank-tested, and a
    # candidate whose maxima happened to be higher was a gating regression
    rng = np.random.default_rng(0)
    base = _run(tmp_path, "base", _reqs(rng, 24))
    cand_reqs = _reqs(rng, 24, scale=1.3)
    cand = _run(tmp_path, "cand", cand_reqs)
    _refused(base, cand, "not gateable: 120 requests, needs 368")


def test_the_loadgen_verdict_is_read_and_enough_requests_give_a_verdict(tmp_path):
    rng = np.random.default_rng(1)
    base = _run(tmp_path, "base", _reqs(rng, 400))
    cand = _run(tmp_path, "cand", _reqs(rng, 400, scale=1.25))
    _gate, res = compare_runs(base, cand)
    row = _row(res)
    assert row.verdict == "regression" and row.tail_method.startswith("pooled requests")
    assert 0.7 < row.ratio < 0.9 and row.ci_low < row.ratio < row.ci_high  # ratio ↑ better: p99 up ~25 %
    bad = _run(tmp_path, "cand2", _reqs(rng, 400, scale=1.25), verdicts={2: "error rate 9/409 = 2.2% > 1.0%"})
    _refused(base, bad, "not gateable: load generator verdict invalid (candidate r3: error rate 9/409 = 2.2% > 1.0%)")


def test_replicates_too_small_for_their_own_p99_are_pooled_and_the_other_reasons_still_refuse(tmp_path):
    # before: the load generator's per-replicate verdict (100 < 368 requests) refused the row, so
    # five replicates of 100 requests never had a gateable p99 in a real run
    rng = np.random.default_rng(4)
    base_reqs = _reqs(rng, 100)
    assert all(s[0]["verdict"] == "invalid" for s in _serving(base_reqs))  # each alone cannot bound its p99
    base = _run(tmp_path, "base", base_reqs)
    cand = _run(tmp_path, "cand", _reqs(rng, 100, scale=1.4))
    _gate, res = compare_runs(base, cand)
    row = _row(res)
    assert row.verdict == "regression" and row.n_requests_baseline == 500 and res.suspected
    worse = _run(tmp_path, "cand2", _reqs(rng, 100, scale=1.4), verdicts={1: "client saturated: w0 used 99% of a core"})
    _refused(base, worse, "not gateable: load generator verdict invalid (candidate r2: "
                          "client saturated: w0 used 99% of a core)")  # the request count is not repeated


def test_no_change_on_a_p99_is_decided_on_the_requests(tmp_path):
    # before: a p99 row judged on requests still took "no change" from the replicate p99s'
    # Hodges-Lehmann interval; identical replicate p99s said no change whatever the requests said
    rng = np.random.default_rng(5)
    reqs_b, reqs_c = _reqs(rng, 100), _reqs(rng, 100)
    flat = [100.0] * 5
    base = make_run(tmp_path, "base", {("serve", "c=4", "p99_latency_ms"): (flat, "ms", "lower")}, spec=PRIMARY,
                    serving={"serve": _serving(reqs_b)}, requests={"serve": reqs_b})
    cand = make_run(tmp_path, "cand", {("serve", "c=4", "p99_latency_ms"): (flat, "ms", "lower")}, spec=PRIMARY,
                    serving={"serve": _serving(reqs_c)}, requests={"serve": reqs_c})
    _gate, res = compare_runs(base, cand)
    row = _row(res)
    assert row.tail_method.startswith("pooled requests")
    # 500 lognormal (sigma 0.3) requests an arm: the p99's 90 % interval is far wider than +-3 %
    assert row.eq_high - row.eq_low > 2 * np.log(1.03)
    assert row.verdict == "inconclusive"
    # and the requests' interval can say "no change": same requests in both arms, many of them
    many = _reqs(np.random.default_rng(6), 4000)
    b2 = make_run(tmp_path, "b2", {("serve", "c=4", "p99_latency_ms"): ([90.0, 95, 100, 105, 110], "ms", "lower")},
                  spec=PRIMARY, serving={"serve": _serving(many)}, requests={"serve": many})
    c2 = make_run(tmp_path, "c2", {("serve", "c=4", "p99_latency_ms"): ([80.0, 95, 100, 105, 130], "ms", "lower")},
                  spec=PRIMARY, serving={"serve": _serving(many)}, requests={"serve": many})
    _gate, res = compare_runs(b2, c2)
    row = _row(res)
    # (the replicate p99s' interval, 80-130 against 90-110, is far wider than +-3 %)
    assert row.verdict == "no_change" and row.eq_low == pytest.approx(-row.eq_high) and row.eq_high < np.log(1.03)


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


def _timeouts(reqs, rng, k, slowest=False):
    """``k`` requests of each replicate hit the 30 s client timeout: errored, their e2e the timeout
    (at random, or the slowest ones)."""
    out = []
    for r in reqs:
        r = r.copy()
        idx = np.argsort(r["e2e_ms"].to_numpy())[-k:] if slowest else rng.choice(len(r), k, replace=False)
        r.loc[idx, "e2e_ms"] = 30000.0
        r["error"] = [("timeout after 30 s" if j in set(idx) else None) for j in range(len(r))]
        out.append(r)
    return out


def test_errored_requests_count_as_slower_than_every_completed_one(tmp_path):
    # review 2026-12-06: the pooled p99 was of completed requests only; 0.9 % timeouts (a point the
    # load generator still calls valid at <= 1 % errors) raised the true p99 200 -> 245 ms, and the
    # comparison said -1.1 % inconclusive (exit 0), or a significant improvement when the timeouts
    # were the slowest requests
    rng = np.random.default_rng(3)
    base = _run(tmp_path, "base", _reqs(rng, 1000))
    cand = _run(tmp_path, "cand", _timeouts(_reqs(rng, 1000), rng, 9))
    row = _row(compare_runs(base, cand)[1])
    assert row.verdict == "regression" and row.n_requests_candidate == 5000, row.verdict
    assert row.p99_pooled_candidate > 1.15 * row.p99_pooled_baseline
    # the slowest 9 of 1,000 timing out leave the p99 (the 10th slowest) where it was: no improvement
    cand = _run(tmp_path, "slowest", _timeouts(_reqs(rng, 1000), rng, 9, slowest=True))
    row = _row(compare_runs(base, cand)[1])
    assert row.verdict == "inconclusive" and row.p_adjusted_improvement > 0.05, (row.verdict, row.change_pct)
    # 2 % of the requests errored: the p99 is among them, its value unknown — not gateable, refused
    cand = _run(tmp_path, "cand2", _timeouts(_reqs(rng, 1000), rng, 20))
    _refused(base, cand, "not gateable: the 0.99-quantile falls among the errored or timed-out requests "
                         "(baseline 0 of 5000, candidate 100 of 5000)")
    assert pooled_quantile([np.array([1.0, 2.0, np.inf])], 0.99) == np.inf
    assert pooled_quantile([np.arange(1.0, 201.0), np.r_[np.arange(1.0, 200.0), np.inf]], 0.5) == \
        pooled_quantile([np.arange(1.0, 201.0), np.arange(1.0, 201.0)], 0.5)


@pytest.mark.slow
def test_interval_coverage_at_100_requests_per_replicate():
    rng = np.random.default_rng(3)
    cover = 0
    for s in range(120):
        tc = compare_p99([a["e2e_ms"].to_numpy() for a in _reqs(rng, 100)],
                         [a["e2e_ms"].to_numpy() for a in _reqs(rng, 100)], n_boot=200, seed=s)
        cover += tc.low <= 0 <= tc.high
    assert 0.91 <= cover / 120 <= 1.0


def test_the_older_wording_of_the_request_count_reason_is_pooled_too():
    from benchrun.loadgen.metrics import pooled_reasons

    old = "100 completed requests < 459 needed to support p99 at 99% confidence (order-statistic bound)"
    new = "100 completed requests < 368 needed for a bounded p99 at 95% (order-statistic interval; the comparison's rule)"
    assert pooled_reasons([old, new, "error rate 9/109 = 8.3% > 1.0%"]) == ["error rate 9/109 = 8.3% > 1.0%"]


def _with_samples(rd, n):
    """Record ``n`` samples on every p99 metric of a fabricated run, as the suites now do, and
    re-seal it (the run would have signed its result documents with them)."""
    import json

    from benchrun.stats.synthetic import seal_run, write_manifest

    for p in (rd / "structured").glob(f"{rd.name}_*_r*.json"):
        doc = json.loads(p.read_text())
        if not isinstance(doc, dict) or "metrics" not in doc:
            continue
        for m in doc["metrics"]:
            if "p99" in m["name"]:
                m["samples"] = n
        p.write_text(json.dumps(doc))
    (rd / "reports" / f"{rd.name}_provenance.dsse.json").unlink()
    write_manifest(rd)
    seal_run(rd, rd.parent.parent)


def test_a_replicate_p99_of_too_few_samples_is_not_gateable(tmp_path):
    # before: a gemm p99 of 50 calls (its maximum) was rank-tested replicate by replicate, and a
    # candidate whose slowest call happened to be slower was a gating regression
    spec = {"spec": {"metrics": {"inference": {"enabled": True, "primary": ["gemm/p99_call_ms", "gemm/tflops"]}}}}

    def metrics(p99):
        return {("gemm", "n=256", "p99_call_ms"): (p99, "ms", "lower"),
                ("gemm", "n=256", "tflops"): ([10, 10.1, 9.9, 10.05, 9.95], "TFLOP/s", "higher")}

    base = make_run(tmp_path, "base", metrics([1.0, 1.01, 0.99, 1.02, 1.0]), spec=spec)
    cand = make_run(tmp_path, "cand", metrics([1.3, 1.31, 1.29, 1.32, 1.3]), spec=spec)

    def p99_row():
        _gate, res = compare_runs(base, cand)
        return res, res.rows.set_index("name").loc["p99_call_ms"]

    res, row = p99_row()
    assert row.verdict == "regression" and res.suspected  # no sample count recorded (an older run): as before
    _with_samples(base, 50)
    _with_samples(cand, 50)
    _refused(base, cand, "not gateable: as few as 50 samples in a replicate, needs 368", "gemm/p99_call_ms[n=256]")
    secondary = {"spec": {"metrics": {"inference": {"enabled": True, "primary": ["gemm/tflops"]}}}}
    b2 = make_run(tmp_path, "base2", metrics([1.0, 1.01, 0.99, 1.02, 1.0]), spec=secondary)
    c2 = make_run(tmp_path, "cand2", metrics([1.3, 1.31, 1.29, 1.32, 1.3]), spec=secondary)
    _with_samples(b2, 50)
    _with_samples(c2, 50)
    _gate, res = compare_runs(b2, c2)  # as a secondary metric the row says so and the pair is compared
    row = res.rows.set_index("name").loc["p99_call_ms"]
    assert row.verdict == "not gateable: as few as 50 samples in a replicate, needs 368" and not res.suspected
    assert row.tail_method == "replicate percentiles, as few as 50 samples in a replicate"
    _with_samples(base, 400)
    _with_samples(cand, 400)
    res, row = p99_row()
    assert row.verdict == "regression" and res.suspected  # 400 calls a replicate bound their p99


def test_the_suites_record_how_many_samples_each_p99_is_of():
    from benchrun.ingest.fio import fio_metrics

    doc = {"jobs": [{"jobname": "r", "read": {"io_bytes": 4096, "bw_bytes": 4096, "iops": 1.0, "total_ios": 1000,
                                               "clat_ns": {"percentile": {"99.000000": 2e6}}}}]}
    (row,) = [m for m in fio_metrics(doc) if m["name"] == "p99_clat_ms"]
    assert row["samples"] == 1000 and row["value"] == 2.0


def test_the_bootstrap_resamples_the_estimator_the_comparison_reports():
    # it resampled the step quantile while the comparison reports Hazen's interpolated one: a
    # coarser estimator's spread, and an interval covering 97.2 % at 100 requests for a stated 95 %
    from benchrun.stats.tails import _boot_log_quantiles

    rng = np.random.default_rng(4)
    for trial in range(6):
        sizes = rng.integers(30, 400, size=int(rng.integers(2, 7)))
        reps = [np.exp(rng.normal(rng.normal(0, 0.05), 0.3, int(n))) for n in sizes]
        if trial % 2:
            reps = [np.round(r, 2) for r in reps]  # tied values
        q = (0.99, 0.9, 0.5)[trial % 3]
        got = _boot_log_quantiles(reps, q, 40, np.random.default_rng(trial))
        draws = np.random.default_rng(trial).integers(0, len(reps), size=(40, len(reps)))
        want = np.log([pooled_quantile([reps[j] for j in d], q) for d in draws])
        assert np.max(np.abs(got - want)) < 1e-8, (trial, q)
        assert pooled_quantile(reps[::-1], q) == pooled_quantile(reps, q)  # ties: whatever the replicates' order
    # a low quantile whose lower neighbour lies in a replicate far below (a first version cut values off
    # below every replicate's own neighbourhood of q and missed it), and replicates of one or two values
    a, b = np.linspace(10, 20, 10), np.r_[np.linspace(1, 2, 8), np.linspace(50, 60, 992)]
    for reps, q in (([b, a], 0.01), ([np.array([3.0]), np.array([1.0, 2.0]), a], 0.5), ([a, a + 0.5], 1.0)):
        got = _boot_log_quantiles(reps, q, 60, np.random.default_rng(1))
        draws = np.random.default_rng(1).integers(0, len(reps), size=(60, len(reps)))
        want = np.log([pooled_quantile([reps[j] for j in d], q) for d in draws])
        assert np.max(np.abs(got - want)) < 1e-8, q


def test_a_pooled_p99_row_keeps_the_replicate_medians_and_says_its_shift_is_the_pooled_ratio(tmp_path):
    # review 2026-12-06: the pooled-request p99s were written over baseline_median/candidate_median,
    # so serving_workflow/p99_latency_ms[c=4] showed 28.06 -> 25.62 ("medians' change" -8.7 %) while
    # the replicate medians were 25.32 -> 25.17, and every surface called the shift Hodges-Lehmann
    from benchrun.stats.reading import POOLED_MARK, pooled_note, pooled_shift

    rng = np.random.default_rng(7)
    reqs_b, reqs_c = _reqs(rng, 400), _reqs(rng, 400, scale=1.25)
    base, cand = _run(tmp_path, "base", reqs_b), _run(tmp_path, "cand", reqs_c)
    _gate, res = compare_runs(base, cand)
    row = _row(res)
    rep_b = np.median([np.percentile(r["e2e_ms"], 99) for r in reqs_b])
    rep_c = np.median([np.percentile(r["e2e_ms"], 99) for r in reqs_c])
    assert row.baseline_median == pytest.approx(rep_b) and row.candidate_median == pytest.approx(rep_c)
    pooled = [pooled_quantile([r["e2e_ms"].to_numpy() for r in reqs], 0.99) for reqs in (reqs_b, reqs_c)]
    assert (row.p99_pooled_baseline, row.p99_pooled_candidate) == pytest.approx(pooled)
    assert row.p99_pooled_baseline != pytest.approx(row.baseline_median)
    # the change is the pooled p99s' ratio (not the replicate medians'), and is labelled so
    assert row.change_pct == pytest.approx((pooled[1] / pooled[0] - 1) * 100)
    rec = next(r for r in res.records() if r["name"] == "p99_latency_ms")
    assert pooled_shift(rec)
    note = pooled_note(rec)
    assert note.startswith(f"{POOLED_MARK} serve/p99_latency_ms[c=4]: change = the ratio of the two arms' "
                           f"pooled-request p99s, {pooled[0]:.4g} → {pooled[1]:.4g} ms (pooled over each arm's "
                           "replicates: 2,000 baseline, 2,000 candidate requests)"), note
    assert "the baseline and candidate shown are the replicate medians" in note
    # a row compared replicate by replicate is not marked; nor is one the requests could not gate
    assert not pooled_shift({**rec, "tail_method": ""})
    assert not pooled_shift({**rec, "change_pct": None, "ratio": None})
    # a comparison recorded before the pooled p99s had their own columns wrote them over the medians:
    # read back, they are the pooled p99s and the medians are not known
    from benchrun.stats.reading import read_comparison

    old = {**{k: v for k, v in rec.items() if not k.startswith("p99_pooled_")},
           "baseline_median": pooled[0], "candidate_median": pooled[1]}
    back = read_comparison({"metrics": [old]})["metrics"][0]
    assert (back["p99_pooled_baseline"], back["p99_pooled_candidate"]) == pytest.approx(pooled)
    assert back["baseline_median"] is None and back["candidate_median"] is None
    assert pooled_note(back).endswith("(not known: this comparison was recorded before they were kept beside "
                                      "the pooled p99s)")
    assert read_comparison({"metrics": [rec]})["metrics"][0] == rec
    # a row that record could not gate kept its replicate medians (the old code wrote the pooled p99s
    # over them only when it gated): they stay (was: moved to the pooled columns, the medians lost)
    ungated = {**old, "baseline_median": 25.32, "candidate_median": 25.17, "ratio": None, "change_pct": None,
               "verdict": "not gateable: 200 requests, needs 368"}
    kept = read_comparison({"metrics": [ungated]})["metrics"][0]
    assert (kept["baseline_median"], kept["candidate_median"]) == (25.32, 25.17)
    assert "p99_pooled_baseline" not in kept and not pooled_note(kept)


def test_the_cli_and_the_report_label_a_pooled_p99_rows_change(tmp_path, monkeypatch, capsys):
    """compare's table, its --json and the report's comparison table show the replicate medians as
    baseline/candidate, and say the row's change is the pooled-request p99s' ratio (§, with them)."""
    import json
    import re

    from helpers import cli_in_process

    from benchrun.report.html import build_report
    from benchrun.stats.analysis import write_comparison

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "400")
    rng = np.random.default_rng(8)
    reqs_b, reqs_c = _reqs(rng, 400), _reqs(rng, 400, scale=1.25)
    base, cand = _run(tmp_path, "base", reqs_b), _run(tmp_path, "cand", reqs_c)
    med = [np.median([np.percentile(r["e2e_ms"], 99) for r in reqs]) for reqs in (reqs_b, reqs_c)]
    pooled = [pooled_quantile([r["e2e_ms"].to_numpy() for r in reqs], 0.99) for reqs in (reqs_b, reqs_c)]
    _code, out, _err = cli_in_process(["compare", "base", "cand"], monkeypatch, capsys)
    row = next(line for line in out.splitlines() if "serve/p99_latency_ms[c=4]" in line and "│" in line)
    cells = [c.strip() for c in row.split("│")]
    assert cells[3:5] == [f"{med[0]:.4g}", f"{med[1]:.4g}"], cells
    assert re.fullmatch(r"[+-]\d+\.\d % §", cells[6]), cells
    assert f"§ serve/p99_latency_ms[c=4]: change = the ratio of the two arms' pooled-request p99s, " \
           f"{pooled[0]:.4g} → {pooled[1]:.4g} ms" in out
    _code, out, _err = cli_in_process(["compare", "base", "cand", "--json"], monkeypatch, capsys)
    rec = next(r for r in json.loads(out)["metrics"] if r["metric"] == "serve/p99_latency_ms[c=4]")
    assert (rec["baseline_median"], rec["candidate_median"]) == pytest.approx(med)
    assert (rec["p99_pooled_baseline"], rec["p99_pooled_candidate"]) == pytest.approx(pooled)
    gate, res = compare_runs(base, cand)
    write_comparison(gate, res, "base", cand)
    page = build_report(cand).read_text(encoding="utf-8")
    # the details table: replicate medians, their own change, and what the shift is of
    cells = re.search(r"<tr><td>serve/p99_latency_ms\[c=4\]</td>(.*?)</tr>", page).group(1)
    cells = re.findall(r"<td>(.*?)</td>", cells)
    assert f"{med[0]:.4g}" in cells and f"{med[1]:.4g}" in cells and f"{pooled[0]:.4g}" not in cells
    assert f"{(med[1] / med[0] - 1) * 100:.4g}" in cells and "pooled-request p99s §" in cells
    assert f"{pooled[0]:.4g} → {pooled[1]:.4g} ms" in page
    assert "except on a request percentile judged on pooled requests" in page  # SHIFT_NOTE


def test_a_suite_that_judged_its_own_measurement_invalid_is_not_gated(tmp_path):
    # membw on arrays under STREAM's 4x-LLC rule measured cache bandwidth: before, its verdict was
    # only logged, and a candidate's "memory bandwidth" fall was gated like any other
    why = "each array is 30.5 MiB, under 4x the 300.0 MiB L3 cache (1200.0 MiB)"
    invalid = {"membw": {"verdict": "invalid", "verdict_reasons": [why]}}

    def metrics(level):
        return {("membw", "threads=2", "triad_gb_per_s"): ([level * x for x in (1, 1.01, 0.99, 1.02, 0.98)], "GB/s",
                                                           "higher"),
                ("gemm", "n=256", "tflops"): ([10, 10.1, 9.9, 10.05, 9.95], "TFLOP/s", "higher")}

    def runs(tag, primary, cand_contexts):
        spec = {"spec": {"metrics": {"inference": {"enabled": True, "primary": primary}}}}
        return (make_run(tmp_path, f"base-{tag}", metrics(10.0), spec=spec),
                make_run(tmp_path, f"cand-{tag}", metrics(8.0), spec=spec, contexts=cand_contexts))

    base, cand = runs("valid", ["membw/triad_gb_per_s"], {"membw": {"verdict": "valid", "verdict_reasons": []}})
    _gate, res = compare_runs(base, cand)
    assert res.rows.set_index("name").loc["triad_gb_per_s"].verdict == "regression" and res.suspected
    base, cand = runs("primary", ["membw/triad_gb_per_s"], invalid)
    _refused(base, cand, f"not gateable: the suite judged its own measurement invalid (candidate replicates "
                         f"1, 2, 3, 4, 5): {why}", "membw/triad_gb_per_s[threads=2]")
    base, cand = runs("secondary", ["gemm/tflops"], invalid)
    _gate, res = compare_runs(base, cand)
    row = res.rows.set_index("name").loc["triad_gb_per_s"]
    assert row.verdict.startswith("not gateable: the suite judged its own measurement invalid") and not res.suspected
    assert row.change_pct == pytest.approx(-20, abs=2)  # shown as measured, never judged
    assert res.rows.set_index("name").loc["tflops"].verdict != "regression"
    # the suite's failure count is judged all the same (launches crash whatever the figure measured),
    # and a context row of the suite keeps no verdict
    spec = {"spec": {"metrics": {"inference": {"enabled": True,
                                               "primary": ["gemm/tflops", "membw/failed_replicates"]}}}}
    with_ctx = {**metrics(10.0), ("membw", "telemetry", "cpu_utilization_pct_mean"): ([50.0] * 5, "%", "higher")}
    base = make_run(tmp_path, "base-failed", with_ctx, spec=spec)
    cand = make_run(tmp_path, "cand-failed", {**with_ctx, ("membw", "threads=2", "triad_gb_per_s"):
                                              metrics(8.0)[("membw", "threads=2", "triad_gb_per_s")]},
                    spec=spec, contexts=invalid, failed_replicates={"membw": [1]})
    gate, res = compare_runs(base, cand)
    assert res is not None, gate.message()  # was: refused, "primary membw/failed_replicates cannot be judged"
    rows = res.rows.set_index("metric")
    assert not str(rows.loc["membw/failed_replicates", "verdict"]).startswith("not gateable")
    assert rows.loc["membw/cpu_utilization_pct_mean[telemetry]", "verdict"] == ""
    assert str(rows.loc["membw/triad_gb_per_s[threads=2]", "verdict"]).startswith("not gateable")


def test_show_and_the_report_say_a_suite_judged_its_own_measurement_invalid(tmp_path):
    # before, a canary on a host with a large cache showed membw's in-cache GB/s with no word of it
    import io

    from rich.console import Console

    from benchrun.commands import print_headline
    from benchrun.report.html import write_report
    from benchrun.stats.analysis import trial_statistics_for_run, write_trial_statistics

    why = "each array is 30.5 MiB, under 4x the 300.0 MiB L3 cache (1200.0 MiB)"
    spec = {"spec": {"metrics": {"inference": {"enabled": True, "primary": ["membw/triad_gb_per_s"]}}}}
    run = make_run(tmp_path, "run-a", {("membw", "threads=2", "triad_gb_per_s"): ([10.0, 10.1, 9.9], "GB/s", "higher")},
                   spec=spec, contexts={"membw": {"verdict": "invalid", "verdict_reasons": [why]}})
    write_trial_statistics(trial_statistics_for_run(run), run)
    out = io.StringIO()
    assert print_headline(Console(file=out, width=400), run, "run-a")
    said = f"membw: the suite judged its own measurement invalid in replicates 1, 2, 3 (a comparison does not gate on its rows): {why}"
    assert said in out.getvalue()
    assert said in write_report(run).read_text(encoding="utf-8")
    ok = make_run(tmp_path, "run-b", {("membw", "threads=2", "triad_gb_per_s"): ([10.0, 10.1, 9.9], "GB/s", "higher")},
                  spec=spec, contexts={"membw": {"verdict": "valid", "verdict_reasons": []}})
    write_trial_statistics(trial_statistics_for_run(ok), ok)
    out = io.StringIO()
    assert print_headline(Console(file=out, width=400), ok, "run-b") and "judged its own" not in out.getvalue()


def test_a_pooled_p99_leaves_out_the_replicates_the_comparison_left_out(tmp_path):
    """Review: with candidate replicate 5 contended (3x slower) and excluded (n 5/4 ‡), the pooled p99 still
    read all 2,000 candidate requests: +139 % on a row whose n said replicate 5 was left out (its four kept
    replicates: about +1 %). A failed replicate that left its requests file was pooled the same way."""
    import json

    from benchrun.stats.synthetic import seal_run, write_manifest

    rng = np.random.default_rng(21)
    base = _run(tmp_path, "b", _reqs(rng, 400))
    reqs = _reqs(rng, 400)
    reqs[4] = reqs[4].assign(e2e_ms=reqs[4]["e2e_ms"] * 3)
    cand = _run(tmp_path, "c", reqs)
    p = cand / "structured" / "c_serve_r5.json"
    doc = json.loads(p.read_text())
    doc["telemetry"] = {"contended": True, "contention_reason": "background CPU 60 %"}
    p.write_text(json.dumps(doc))
    (cand / "reports" / "c_provenance.dsse.json").unlink()
    write_manifest(cand)
    seal_run(cand, tmp_path)
    _gate, res = compare_runs(base, cand)
    row = _row(res)
    assert row.n_candidate == 4 and row.n_requests_candidate == 1600  # was 2,000
    assert abs(row.change_pct) < 15, row.change_pct  # was +139 %
