"""capacity_at_slo and the percentiles a point supports: every declared SLO checked at p99, failed
requests censored (slower than every completed one), and a p99 its request count cannot support
never setting the capacity."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchrun.loadgen.metrics import SLO, VerdictPolicy, capacity_at_slo, capacity_reason, point_passes_slo, summarize
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
    assert p["percentiles_note"].startswith("p999 not supported: 89 of 10000 requests failed, beyond its 0.1 % tail")
    # lower percentiles, whose tail holds every failure, are kept as they are
    done = np.asarray([r["e2e_ms"] for r in rows if r["error"] is None])
    assert p["e2e_ms_p99"] == pytest.approx(np.percentile(done, 99))
    assert p["verdict"] == "valid" and p["verdict_reasons"] == []  # judged at p99, which is supported
    assert capacity_at_slo([p], SLO(e2e_ms=5000)) == 8
    # judged at p999, the same point is invalid, and says why
    q = _point(rows, 8, SLO(e2e_ms=5000), VerdictPolicy(percentile="p999"))
    assert q["verdict"] == "invalid"
    assert q["verdict_reasons"] == ["p999 not supported: 89 of 10000 requests failed, beyond its 0.1 % tail "
                                    "(a failed request counts as slower than every completed one)"]


def test_a_p99_among_the_failures_does_not_meet_a_p99_slo():
    # 3 % timeouts under a policy allowing 5 %: the verdict's error rate passes, the p99 is unknown
    slo, policy = SLO(e2e_ms=5000), VerdictPolicy(max_error_rate=0.05)
    p = _point(_rows(970, 30), 8, slo, policy)
    assert p["e2e_ms_p99"] < 5000 and "p99" not in p["percentiles_supported"] and p["verdict"] == "invalid"
    assert not any(r.startswith("error rate") for r in p["verdict_reasons"])
    assert "p99 not supported: 30 of 1000 requests failed, beyond its 1 % tail" in p["verdict_reasons"][0]
    assert not point_passes_slo(p, slo) and capacity_at_slo([p], slo) is None
    assert "p99 not supported: 30 of 1000 requests failed" in capacity_reason([p], slo)
    # a summary row that never recorded the verdict's view (another tool's) is judged on its counts
    bare = {k: p[k] for k in ("bucket", "offered_load", "n_requests", "n_errors", "e2e_ms_p99")}
    assert capacity_at_slo([bare], slo) is None


@pytest.mark.parametrize("n_err, supported", [(10, True), (11, False)])
def test_failures_up_to_the_tail_keep_the_percentile(n_err, supported):
    """failed > (1 − q) × all: 10 of 1000 fill the p99's 1 % tail exactly and leave it known."""
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
