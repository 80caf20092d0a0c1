"""Serving metrics on constructed request rows, checked against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchrun.loadgen.metrics import (
    SLO,
    Pricing,
    VerdictPolicy,
    capacity_at_slo,
    distribution,
    is_good,
    load_stats,
    min_samples,
    summarize,
    verdict,
    window_s,
)
from benchrun.suites.result import PERCENTILE_SUFFIXES, SERVING_DISTRIBUTIONS, SERVING_SCALARS

MS = 1_000_000  # ns per ms


def _row(send_ms: float, ttft: float | None, e2e: float | None, out: int = 11, bucket: str = "8/11", error: str | None = None, gaps=None):
    send = int(send_ms * MS)
    ok = error is None
    return {
        "send_mono_ns": send,
        "scheduled_mono_ns": send,
        "schedule_lag_ms": 0.0,
        "end_mono_ns": send + int((e2e if e2e is not None else 5.0) * MS),
        "ttft_ms": ttft if ok else None,
        "e2e_ms": e2e if ok else None,
        "output_tokens": out if ok else None,
        "input_tokens": 8 if ok else None,
        "decode_ms_per_token": ((e2e - ttft) / (out - 1)) if ok and out > 1 else None,
        "token_gaps_ms": list(gaps or []),
        "token_gap_std_ms": float(np.std(gaps)) if gaps and len(gaps) >= 2 else None,
        "bucket": bucket,
        "error": error,
        "error_kind": error.split(":")[0] if error else None,
    }


def test_distribution_matches_numpy_linear_and_population_std():
    vals = [5.0, 1.0, 3.0, 2.0, 4.0, 10.0]
    d = distribution(vals, "x")
    assert d["x_p50"] == pytest.approx(np.percentile(vals, 50))
    assert d["x_p90"] == pytest.approx(7.5)  # hand: sorted pos (6-1)*0.9 = 4.5, halfway 5 -> 10
    assert d["x_p999"] == pytest.approx(np.percentile(vals, 99.9))
    assert d["x_mean"] == pytest.approx(25 / 6)
    assert d["x_std"] == pytest.approx(np.std(vals))  # ddof=0
    assert (d["x_min"], d["x_max"]) == (1.0, 10.0)
    assert set(d) == {f"x_{s}" for s in PERCENTILE_SUFFIXES}
    assert all(v is None for v in distribution([], "y").values())


def test_min_samples_order_statistic_bound():
    # n >= ln(1-c)/ln(q): p99 at 99 % needs 459 (0.99**458 = 0.01004 > 0.01, 0.99**459 < 0.01)
    assert min_samples(0.99, 0.99) == 459
    assert 0.99**458 > 0.01 > 0.99**459
    assert min_samples(0.5, 0.99) == 7
    assert min_samples(0.9, 0.99) == 44
    assert min_samples(0.95, 0.99) == 90
    assert min_samples(0.999, 0.99) == 4603
    with pytest.raises(ValueError):
        min_samples(1.0)


def test_goodput_attainment_and_cost_hand_computed():
    # window: first send at 0 ms, last end at 1000 ms -> 1.0 s
    rows = [
        _row(0, ttft=10, e2e=110),  # decode (110-10)/10 = 10 ms/token -> good
        _row(100, ttft=30, e2e=130),  # ttft 30 > 20 -> bad
        _row(200, ttft=10, e2e=310),  # decode 30 > 20 -> bad
        _row(300, ttft=20, e2e=220),  # ttft == slo, decode 20 == slo -> good (<=)
        _row(400, ttft=None, e2e=None, error="http_500: boom"),
        _row(900, ttft=5, e2e=100, out=1),  # one token: no decode, meets decode SLO -> good
    ]
    slo = SLO(ttft_ms=20, decode_ms_per_token=20)
    assert [is_good(r, slo) for r in rows] == [True, False, False, True, False, True]
    win = window_s(rows)
    assert win == pytest.approx(1.0)
    s = summarize(rows, point="c=2", load_model="closed_loop", offered_load=2, bucket="all", window=win, slo=slo, pricing=Pricing(36.0, 2))
    assert s["n_requests"] == 5 and s["n_errors"] == 1
    assert s["n_good"] == 3
    assert s["request_goodput"] == pytest.approx(3 / 1.0)
    assert s["slo_attainment"] == pytest.approx(3 / 6)  # good / (completed + errored)
    # 36 USD/node-hour = 0.01 USD/node-s; 2 nodes x 1 s = 0.02 USD
    assert s["cost_window_usd"] == pytest.approx(0.02)
    assert s["cost_per_request_usd"] == pytest.approx(0.02 / 5)
    assert s["cost_per_token_usd"] == pytest.approx(0.02 / (11 * 4 + 1))
    assert s["cost_per_good_request_usd"] == pytest.approx(0.02 / 3)
    assert s["tokens_per_second"] == pytest.approx(45 / 1.0)
    assert s["request_throughput_rps"] == pytest.approx(5.0)
    assert s["error_kinds"] == {"http_500": 1}


def test_without_slo_or_price_the_metrics_are_absent_not_zero():
    rows = [_row(0, 10, 110), _row(10, 12, 120)]
    s = summarize(rows, point="c=1", load_model="closed_loop", offered_load=1, bucket="all", window=window_s(rows), slo=None, pricing=None)
    for k in ("request_goodput", "slo_attainment", "cost_per_request_usd", "cost_per_token_usd", "n_good"):
        assert s[k] is None
    for k in SERVING_SCALARS:
        assert k in s
    for base in SERVING_DISTRIBUTIONS:
        for suf in PERCENTILE_SUFFIXES:
            assert f"{base}_{suf}" in s


def test_jitter_is_median_of_per_request_gap_std():
    rows = [
        _row(0, 10, 20, out=3, gaps=[1.0, 3.0]),  # std 1.0
        _row(5, 10, 20, out=3, gaps=[2.0, 2.0]),  # std 0.0
        _row(9, 10, 20, out=4, gaps=[1.0, 5.0, 3.0]),  # std sqrt(8/3)
    ]
    s = summarize(rows, point="c=1", load_model="closed_loop", offered_load=1, bucket="all", window=1.0, slo=None, pricing=None)
    assert s["jitter_ms"] == pytest.approx(1.0)
    assert s["token_gap_ms_mean"] == pytest.approx(np.mean([1, 3, 2, 2, 1, 5, 3]))


def test_bucket_cost_is_apportioned_by_output_tokens():
    rows = [_row(0, 1, 11, out=11, bucket="a"), _row(0, 1, 31, out=31, bucket="b")]
    total = 42
    pricing = Pricing(3600.0, 1)  # 1 USD per second
    a = summarize([rows[0]], point="p", load_model="closed_loop", offered_load=1, bucket="a", window=2.0, slo=None, pricing=pricing, point_output_tokens=total)
    b = summarize([rows[1]], point="p", load_model="closed_loop", offered_load=1, bucket="b", window=2.0, slo=None, pricing=pricing, point_output_tokens=total)
    assert a["cost_per_token_usd"] == pytest.approx(2.0 / 42) == b["cost_per_token_usd"]
    assert a["cost_per_request_usd"] + b["cost_per_request_usd"] == pytest.approx(2.0)


def test_capacity_at_slo_picks_highest_offered_load_meeting_both_p99s():
    # 400 requests a point: enough for a supported p99 (368 at 95 %); fewer never count
    pts = [
        {"bucket": "all", "offered_load": 1, "n_requests": 400, "ttft_ms_p99": 50, "decode_ms_per_token_p99": 10},
        {"bucket": "all", "offered_load": 8, "n_requests": 400, "ttft_ms_p99": 90, "decode_ms_per_token_p99": 19},
        {"bucket": "all", "offered_load": 16, "n_requests": 400, "ttft_ms_p99": 101, "decode_ms_per_token_p99": 15},
        {"bucket": "all", "offered_load": 32, "n_requests": 400, "ttft_ms_p99": 80, "decode_ms_per_token_p99": 25},
        {"bucket": "512/128", "offered_load": 64, "n_requests": 400, "ttft_ms_p99": 1, "decode_ms_per_token_p99": 1},
    ]
    assert capacity_at_slo(pts, SLO(ttft_ms=100, decode_ms_per_token=20)) == 8
    # monotone: the leading run of passing loads; 32 passes TTFT again but 16 already failed
    assert capacity_at_slo(pts, SLO(ttft_ms=100)) == 8
    assert capacity_at_slo(pts, SLO(decode_ms_per_token=16)) == 1
    assert capacity_at_slo(list(reversed(pts)), SLO(ttft_ms=100, decode_ms_per_token=20)) == 8  # order of points is irrelevant
    assert capacity_at_slo(pts, SLO(ttft_ms=10)) is None
    assert capacity_at_slo(pts, None) is None


def _load_point(load: float, n_ok: int, n_err: int, ttft: float, policy: VerdictPolicy | None = None) -> dict:
    """A closed-loop point of n_ok completed requests (TTFT ``ttft``, 5 ms/token) and n_err fast 429s."""
    rows = [_row(i * 10.0, ttft, ttft + 50.0) for i in range(n_ok)]
    rows += [_row(n_ok * 10.0 + i, None, None, error="http_429: queue full") for i in range(n_err)]
    for r in rows[n_ok:]:
        r["error_kind"] = "http_429"
    return summarize(rows, point=f"c={load:g}", load_model="closed_loop", offered_load=load, bucket="all",
                     window=None, slo=SLO(ttft_ms=200, decode_ms_per_token=10), pricing=None,
                     stats={"achieved_concurrency": float(load)}, policy=policy)


def test_capacity_at_slo_ignores_points_whose_verdict_fails_on_errors():
    # the reviewer's case: 16 misses TTFT; 32 answers its few completions fast but 60 % are 429s
    slo = SLO(ttft_ms=200, decode_ms_per_token=10)
    pts = [_load_point(8, 400, 0, 150), _load_point(16, 400, 0, 400), _load_point(32, 400, 600, 120)]
    assert pts[2]["ttft_ms_p99"] <= 200 and pts[2]["verdict"] == "invalid"
    assert capacity_at_slo(pts, slo) == 8
    # without the failing middle point, the erroring 32 still does not count
    assert capacity_at_slo([pts[0], pts[2]], slo) == 8
    # too few requests for a bounded verdict percentile above the p99 (p999: 3688) is the one invalid
    # reason that does not stop a point counting; too few for the p99 itself does (20 requests: no p99)
    p999 = VerdictPolicy(percentile="p999")
    small = _load_point(4, 400, 0, 150, p999)
    assert small["verdict"] == "invalid" and all("needed for a bounded p999" in r for r in small["verdict_reasons"])
    assert capacity_at_slo([small], slo) == 4
    assert capacity_at_slo([small, _load_point(8, 400, 100, 150, p999)], slo) == 4  # 20 % errors: not 8
    assert capacity_at_slo([_load_point(4, 20, 0, 150)], slo) is None


def test_load_stats_rates_lag_and_concurrency():
    rows = []
    for i in range(5):  # scheduled every 100 ms, sent 2 ms late, each lasts 50 ms
        rows.append({"scheduled_mono_ns": i * 100 * MS, "send_mono_ns": (i * 100 + 2) * MS, "end_mono_ns": (i * 100 + 52) * MS, "schedule_lag_ms": 2.0})
    st = load_stats(rows, "open_loop", 10)
    assert st["scheduled_rate_rps"] == pytest.approx(10.0)
    assert st["achieved_rate_rps"] == pytest.approx(10.0)
    assert st["schedule_lag_p99_ms"] == pytest.approx(2.0)
    cl = load_stats(rows, "closed_loop", 1)
    # busy 50 ms in each 100 ms between first and last send (last request clipped at its send)
    assert cl["achieved_concurrency"] == pytest.approx(0.5)


def test_verdict_reasons():
    pol = VerdictPolicy()
    v, reasons = verdict(load_model="open_loop", offered_load=10, n_completed=500, n_errors=0, error_kinds={}, stats={"achieved_rate_rps": 10.1, "scheduled_rate_rps": 10.0, "schedule_lag_p99_ms": 1.0}, client={"client_cpu_max": 0.3, "loop_lag_p99_ms": 1.0}, policy=pol)
    assert v == "valid" and reasons == []
    v, reasons = verdict(load_model="open_loop", offered_load=10, n_completed=300, n_errors=20, error_kinds={"timeout": 20}, stats={"achieved_rate_rps": 8.0, "scheduled_rate_rps": 10.0, "schedule_lag_p99_ms": 50.0}, client={"client_cpu_max": 0.97, "loop_lag_p99_ms": 30.0}, policy=pol)
    assert v == "invalid"
    text = " | ".join(reasons)
    assert "error rate 20/320" in text and "20 timeout" in text
    assert "300 completed requests < 368 needed for a bounded p99 at 95%" in text
    assert "achieved rate 8" in text
    assert "schedule lag" in text
    assert "client saturated" in text
    assert "event-loop lag" in text
    v, reasons = verdict(load_model="closed_loop", offered_load=8, n_completed=10, n_errors=0, error_kinds={}, stats={"achieved_concurrency": 5.0}, client={}, policy=VerdictPolicy(percentile="p50"))
    assert reasons == ["achieved concurrency 5 < 90% of 8"]


def test_slo_and_pricing_parsing():
    assert SLO.from_dict(None) is None
    assert SLO.from_dict({"ttft_ms": 200, "decode_ms_per_token": None}).as_dict() == {"ttft_ms": 200.0}
    with pytest.raises(ValueError, match="unknown SLO"):
        SLO.from_dict({"latency": 3})
    with pytest.raises(ValueError, match="positive"):
        SLO.from_dict({"ttft_ms": 0})
    with pytest.raises(ValueError, match=r"SLO ttft_ms='fast' must be a positive number"):  # names the key
        SLO.from_dict({"ttft_ms": "fast"})
    with pytest.raises(ValueError, match="pricePerNodeHourUsd >= 0 and nodes >= 1"):
        Pricing.from_dict({"pricePerNodeHourUsd": "cheap"})
    p = Pricing.from_dict({"pricePerNodeHourUsd": 98.32, "nodes": 2})
    assert p.cost_usd(3600) == pytest.approx(196.64)
    assert Pricing.from_dict(None) is None
    assert math.isclose(Pricing(1.0).cost_usd(1.0), 1 / 3600)
