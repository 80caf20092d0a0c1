"""capacity_at_slo and the percentiles a point supports: every declared SLO checked at p99, failed
requests censored (slower than every completed one), and a p99 its request count cannot support
never setting the capacity."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchrun.loadgen.metrics import SLO, VerdictPolicy, capacity_at_slo, capacity_reason, point_passes_slo, summarize
from benchrun.stats.tails import pooled_quantile
from benchrun.suites import serving_sweep
from benchrun.suites._runtime import SuiteContext
from benchrun.suites.result import read_result

MS = 1_000_000  # ns per ms


def _rows(n_ok: int, n_timeout: int, e2e: list[float] | None = None, ttft: float = 100.0) -> list[dict]:
    """n_ok completed requests (TTFT ``ttft``, e2e from ``e2e`` or 1000 + i ms) and n_timeout
    requests that hit a 60 s timeout, sent 500 ms apart in that order."""
    rows = []
    for i in range(n_ok + n_timeout):
        ok = i < n_ok
        ms = (e2e[i] if e2e else 1000.0 + i % 1000) if ok else 60_000.0
        send = i * 500 * MS
        rows.append({
            "send_mono_ns": send, "scheduled_mono_ns": send, "schedule_lag_ms": 0.0, "end_mono_ns": send + int(ms * MS),
            "error": None if ok else "timeout: no complete response within 60 s", "error_kind": None if ok else "timeout",
            "ttft_ms": ttft if ok else None, "e2e_ms": ms if ok else None, "decode_ms_per_token": 10.0 if ok else None,
            "output_tokens": 128 if ok else None, "input_tokens": 512 if ok else None, "token_gaps_ms": [], "bucket": "all"})
    return rows


def _point(rows: list[dict], load: float, slo: SLO, policy: VerdictPolicy | None = None) -> dict:
    return summarize(rows, point=f"c={load:g}", load_model="closed_loop", offered_load=load, bucket="all", window=None,
                     slo=slo, pricing=None, stats={"achieved_concurrency": float(load)}, client={}, policy=policy)


# 1. every declared objective at p99

def test_an_e2e_slo_beside_a_ttft_slo_is_checked():
    """The reviewer's case: TTFT p99 100 ms everywhere, e2e p99 1.5 s, 9 s, 30 s; capacity was 16."""
    slo = SLO(ttft_ms=500, e2e_ms=2000)
    pts = [_point(_rows(400, 0, [ms] * 400), load, slo) for load, ms in ((4, 1500.0), (8, 9000.0), (16, 30000.0))]
    assert [p["ttft_ms_p99"] for p in pts] == [100.0] * 3
    assert capacity_at_slo(pts, slo) == 4
    assert [point_passes_slo(p, slo) for p in pts] == [True, False, False]
    # the two headlines agree: the loads over capacity have no good request either
    assert [p["n_good"] for p in pts] == [400, 0, 0]
    assert "e2e_ms_p99 9000 > SLO 2000" in capacity_reason(pts[1:], slo)


def test_every_objective_of_three_is_checked():
    base = {"bucket": "all", "offered_load": 2, "n_requests": 400, "ttft_ms_p99": 10, "decode_ms_per_token_p99": 5,
            "e2e_ms_p99": 100}
    assert capacity_at_slo([base], SLO(ttft_ms=20, decode_ms_per_token=10, e2e_ms=200)) == 2
    assert capacity_at_slo([base], SLO(ttft_ms=20, decode_ms_per_token=10, e2e_ms=99)) is None
    assert capacity_at_slo([base], SLO(decode_ms_per_token=10, e2e_ms=99)) is None


# 2. failed requests are censored

def test_a_percentile_among_the_failures_is_not_supported():
    """/tmp/rev/censor10k.py: 10,000 requests, 89 timed out at 60 s; p999 was reported from the
    completed ones (1999 ms) and called supported."""
    rows = _rows(9911, 89)
    p = _point(rows, 8, SLO(e2e_ms=5000))
    assert p["percentiles_supported"] == ["p50", "p90", "p95", "p99"]
    assert p["percentiles_note"].startswith("p999 not supported: 89 of 10000 requests failed, and its rank (9990.5 of "
                                            "10000) is past the 9911 known")
    # lower percentiles, whose tail holds every failure, are known: ranked among all requests, the
    # failures slowest (the comparison's pooled p99, benchrun.stats.tails), not of completed ones alone
    done = np.asarray([r["e2e_ms"] for r in rows if r["error"] is None])
    assert p["e2e_ms_p99"] == pooled_quantile([np.r_[done, np.full(89, np.inf)]], 0.99) > np.percentile(done, 99)
    assert p["verdict"] == "valid" and p["verdict_reasons"] == []  # judged at p99, which is supported
    assert capacity_at_slo([p], SLO(e2e_ms=5000)) == 8
    # judged at p999, the same point is invalid, and says why
    q = _point(rows, 8, SLO(e2e_ms=5000), VerdictPolicy(percentile="p999"))
    assert q["verdict"] == "invalid"
    assert q["verdict_reasons"] == ["p999 not supported: 89 of 10000 requests failed, and its rank (9990.5 of 10000) is "
                                    "past the 9911 known (a failed request counts as slower than every completed one)"]


def test_a_p99_among_the_failures_does_not_meet_a_p99_slo():
    # 3 % timeouts under a policy allowing 5 %: the verdict's error rate passes, the p99 is unknown
    slo, policy = SLO(e2e_ms=5000), VerdictPolicy(max_error_rate=0.05)
    p = _point(_rows(970, 30), 8, slo, policy)
    assert p["e2e_ms_p99"] < 5000 and "p99" not in p["percentiles_supported"] and p["verdict"] == "invalid"
    assert not any(r.startswith("error rate") for r in p["verdict_reasons"])
    assert "p99 not supported: 30 of 1000 requests failed, and its rank (990.5 of 1000)" in p["verdict_reasons"][0]
    assert not point_passes_slo(p, slo) and capacity_at_slo([p], slo) is None
    assert "p99 not supported: 30 of 1000 requests failed" in capacity_reason([p], slo)
    # a summary row that never recorded the verdict's view (another tool's) is judged on its counts
    bare = {k: p[k] for k in ("bucket", "offered_load", "n_requests", "n_errors", "e2e_ms_p99")}
    assert capacity_at_slo([bare], slo) is None


@pytest.mark.parametrize("n_err, supported", [(9, True), (10, False)])
def test_failures_up_to_the_tail_keep_the_percentile(n_err, supported):
    """The comparison's rule (benchrun.stats.tails): the p99's Hazen rank among 1000 is 990.5, so 10
    failures (the 991st to 1000th) reach it and 9 do not (the rule was failed > 1 % of all, which
    kept 10 of 1000 supported while the comparison called that p99 not gateable)."""
    p = _point(_rows(1000 - n_err, n_err), 8, SLO(e2e_ms=5000), VerdictPolicy(max_error_rate=0.05))
    assert ("p99" in p["percentiles_supported"]) is supported
    assert (p["percentiles_note"] is not None and "p99 not supported" in p["percentiles_note"]) is not supported
    assert (capacity_at_slo([p], SLO(e2e_ms=5000)) == 8) is supported


# 3. a p99 the request count cannot support sets no capacity

def test_a_p99_of_too_few_requests_sets_no_capacity():
    slo = SLO(ttft_ms=500)
    small = [_point(_rows(24, 0), load, slo) for load in (1, 4)]
    assert all(p["verdict"] == "invalid" and "p99" not in p["percentiles_supported"] for p in small)
    assert capacity_at_slo(small, slo) is None
    why = capacity_reason(small, slo, more="more requests")
    assert "c=1: p99 not supported: 24 completed requests < 368 needed at 95%" in why
    assert why.endswith("a point needs 368 completed requests for a supported p99 at 95% (more requests)")
    # 368 completed requests are enough; the leading run stops at the first short load
    enough = _point(_rows(368, 0), 1, slo)
    assert capacity_at_slo([enough], slo) == 1 and capacity_reason([enough], slo) is None
    assert capacity_at_slo([enough, small[1], _point(_rows(368, 0), 8, slo)], slo) == 1
    # the verdict's own confidence sets the count (percentiles_supported): 90 % needs 299
    loose = VerdictPolicy(confidence=0.9)
    assert capacity_at_slo([_point(_rows(300, 0), 1, slo, loose)], slo) == 1
    assert "299 needed at 90%" in capacity_reason([_point(_rows(298, 0), 1, slo, loose)], slo, 0.9)


def test_serving_sweep_at_its_default_request_count_says_what_capacity_needs(tmp_path):
    """The default 24 requests a point cannot support a p99: the sweep reports no capacity and
    its context says how many requests a point needs (the other metrics are unaffected)."""
    mix = [{"inputTokens": 64, "outputTokens": 16, "weight": 1.0}]
    workload = {"model": "m", "sequenceLengthMix": mix, "precision": "bf16", "batchingPolicy": "continuous",
                "concurrencyModel": "closed_loop", "slo": {"ttft_ms": 5000, "decode_ms_per_token": 500}}
    env = {"BENCHRUN_RUN_ID": "r1", "BENCHRUN_RUN_DIR": str(tmp_path), "BENCHRUN_SUITE": "serving_sweep",
           "BENCHRUN_REPLICATE": "1", "BENCHRUN_CASE_ID": "case-1",
           "BENCHRUN_PARAMS": json.dumps({"concurrency": [1, 2], "warmup": 1}), "BENCHRUN_WORKLOAD": json.dumps(workload)}
    ctx = SuiteContext(env)
    serving_sweep.run(ctx)
    doc = read_result(ctx.finish("ok"))
    assert not any(m["name"] == "capacity_at_slo" for m in doc["metrics"])
    assert any(m["name"] == "request_goodput" for m in doc["metrics"])
    note = doc["context"]["capacity_at_slo"]
    assert note.startswith("absent: no point of the sweep met the SLO at p99; the lowest load does not count (c=1: ")
    assert note.endswith("a point needs 368 completed requests for a supported p99 at 95% "
                         "(parameter requests_per_point, or a longer duration_s)")


# 4. one censoring rule and one quantile with the comparison (benchrun.stats.tails), found in review

def test_the_censoring_rule_is_the_comparisons():
    """A percentile is censored exactly where tails.pooled_quantile (the comparison's pooled p99 of
    the point) is +inf: q > (completed − ½) / all. It was failed > (1 − q) × all, which kept the p99
    of 1000 requests with 10 failures (rank 990.5, the 991st a failure) supported, and counted its
    point towards capacity_at_slo, while the comparison called it not gateable."""
    from fractions import Fraction

    from benchrun.loadgen.metrics import PERCENTILES, censored_percentiles

    assert "p99" in censored_percentiles(990, 10) and "p99" not in censored_percentiles(991, 9)
    rounding = []
    for total in range(1, 420):
        for n_err in range(1, min(total, 25) + 1):
            n_ok = total - n_err
            sample = [np.r_[np.arange(1.0, n_ok + 1), np.full(n_err, np.inf)]]
            ours = censored_percentiles(n_ok, n_err)
            for name, pct in PERCENTILES.items():
                q = Fraction(str(pct)) / 100
                theirs = np.isinf(pooled_quantile(sample, float(q)))
                if (name in ours) != theirs:
                    rounding.append((total, n_err, name, q * total == n_ok - Fraction(1, 2)))
    # none: not even where q is exactly the last completed value's position (tails' float sums put
    # it a hair below q, and called that known value censored, until it compared with a tolerance)
    assert rounding == []


def _failing_rows() -> tuple[list[dict], dict[str, list[float]], dict[str, int]]:
    """2000 requests: 1985 completed (every 50th a one-token answer, no decode), 6 timed out before
    their first token, 5 failed mid-stream after it, 4 whose connection failed; each failure after
    connecting opened a connection of its own. Returns the rows, the known values and the censored
    count per distribution (what the module docstring says each one censors)."""
    rng = np.random.default_rng(5)
    rows, known = [], {"ttft_ms": [], "decode_ms_per_token": [], "e2e_ms": [], "connect_ms": []}
    kinds = ["ok"] * 1985 + ["timeout"] * 6 + ["closed"] * 5 + ["connect"] * 4
    for i, kind in enumerate(rng.permutation(kinds)):
        send, ttft, e2e = i * 10 * MS, float(rng.gamma(4, 25)), float(rng.gamma(6, 300))
        ok, started = kind == "ok", kind == "closed"
        decode = float(rng.gamma(5, 2)) if ok and i % 50 else None
        connect = None if kind == "connect" or (ok and i % 7) else float(rng.gamma(2, 1))
        rows.append({
            "send_mono_ns": send, "scheduled_mono_ns": send, "schedule_lag_ms": 0.0, "end_mono_ns": send + int(e2e * MS),
            "error": None if ok else f"{kind}: failed", "error_kind": None if ok else kind,
            "ttft_ms": ttft if ok else None, "e2e_ms": e2e + ttft if ok else None, "decode_ms_per_token": decode,
            "first_token_mono_ns": send + int(ttft * MS) if ok or started else None, "connect_ms": connect,
            "output_tokens": (1 if decode is None else 64) if ok else None, "input_tokens": 16 if ok else None,
            "token_gaps_ms": [], "bucket": "all"})
        if ok or started:
            known["ttft_ms"].append((int(ttft * MS)) / 1e6 if started else ttft)
        if ok:
            known["e2e_ms"].append(e2e + ttft)
        if decode is not None:
            known["decode_ms_per_token"].append(decode)
        if connect is not None:
            known["connect_ms"].append(connect)
    return rows, known, {"ttft_ms": 10, "decode_ms_per_token": 5, "e2e_ms": 15, "connect_ms": 4}


def test_with_failures_a_percentile_ranks_all_requests_the_failures_slowest():
    """The reviewer's bias: percentiles of completed requests alone, 0.5 % failed, showed about the
    true p98.5 as the p99 (and the SLO and capacity checks read it). Now each known percentile is
    the comparison's pooled quantile of the point's requests, failures slowest, to the bit."""
    from benchrun.loadgen.metrics import QUANTILES

    rows, known, censored = _failing_rows()
    p = _point(rows, 8, SLO(e2e_ms=1e9), VerdictPolicy(max_error_rate=0.05))
    assert p["percentiles_censored"]["e2e_ms"] == ["p999"] and "p99" in p["percentiles_supported"]
    for base, values in known.items():
        sample = [np.r_[values, np.full(censored[base], np.inf)]]
        for name, q in QUANTILES.items():
            want = pooled_quantile(sample, float(q))
            # unknown: the largest known value, a lower bound (the comparison's +inf), and listed
            assert p[f"{base}_{name}"] == (max(values) if np.isinf(want) else want), (base, name)
            assert (name in p["percentiles_censored"].get(base, [])) is bool(np.isinf(want)), (base, name)
    # of completed requests alone each p99 read low
    assert all(p[f"{b}_p99"] > np.percentile([r[b] for r in rows if r[b] is not None], 99)
               for b in ("ttft_ms", "e2e_ms", "decode_ms_per_token"))
    assert p["n_new_connections"] == len(known["connect_ms"])
    # the token gaps stay of completed requests; without failures every number is as before
    ok_rows = [r for r in rows if r["error"] is None]
    plain = _point(ok_rows, 8, SLO(e2e_ms=1e9))
    for base in ("ttft_ms", "decode_ms_per_token", "e2e_ms"):
        values = [r[base] for r in ok_rows if r[base] is not None]
        assert [plain[f"{base}_{n}"] for n in ("p50", "p90", "p95", "p99", "p999")] == \
            [float(x) for x in np.percentile(values, [50, 90, 95, 99, 99.9])]
    assert plain["percentiles_censored"] is None


def test_a_p99_that_failures_push_over_the_slo_sets_no_capacity():
    """995 completed requests at 1000..1994 ms and 5 timeouts (0.5 %): of completed ones the p99 was
    1984 ms, within a 1985 ms SLO; ranked among all 1000 it is 1989.5 ms, over it."""
    slo = SLO(e2e_ms=1985)
    p = _point(_rows(995, 5, [1000.0 + i for i in range(995)]), 8, slo)
    assert p["e2e_ms_p99"] == pytest.approx(1989.5) and p["verdict"] == "valid"
    assert capacity_at_slo([p], slo) is None
    assert capacity_reason([p], slo) == f"the lowest load does not count (c=8: e2e_ms_p99 {p['e2e_ms_p99']:.4g} > SLO 1985)"


def test_a_decode_p99_among_its_own_failures_is_not_met():
    """Most answers one token long (no decode): 20 decode values and 3 requests failed mid-decode.
    The point's p99 is known (3 of 403 failed), the decode p99 is not: it sets no capacity."""
    rows = _rows(400, 3)
    for i, r in enumerate(rows):
        if r["error"] is None and i >= 20:
            r["decode_ms_per_token"], r["output_tokens"] = None, 1
        elif r["error"] is not None:
            r["first_token_mono_ns"], r["error"], r["error_kind"] = r["send_mono_ns"] + 100 * MS, "closed: mid-stream", "closed"
    slo = SLO(decode_ms_per_token=50)
    p = _point(rows, 8, slo)
    assert "p99" in p["percentiles_supported"] and p["verdict"] == "valid"
    assert p["percentiles_censored"]["decode_ms_per_token"] == ["p90", "p95", "p99", "p999"]
    assert "decode_ms_per_token: p99 not supported: 3 of 23 requests failed" in p["percentiles_note"]
    assert capacity_at_slo([p], slo) is None
    assert "decode_ms_per_token_p99 not supported" in capacity_reason([p], slo)
