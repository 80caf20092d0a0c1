"""Issue 30 (2): connections opened before the go time, connection set-up recorded apart and kept out of
TTFT/E2E, warm-up one request per stream by default."""

from __future__ import annotations

from benchrun.loadgen.refserver import PerfModel
from benchrun.loadgen.runner import LoadPoint, SweepConfig, run_sweep
from benchrun.loadgen.workload import parse_mix
from helpers import threaded_server

FAST = PerfModel(decode_base_ms=0.3, decode_ms_per_seq=0.0, prefill_ms_per_token=0.0)


def _cfg(url: str, **kw) -> SweepConfig:
    base = dict(url=url, model="m", mix=tuple(parse_mix("8/4")), points=(LoadPoint("closed_loop", 8),), requests_per_point=16)
    base.update(kw)
    return SweepConfig(**base)


def test_every_streams_connection_is_open_before_the_go_time():
    """The first wave opened 8 connections at the go time; their set-up fell into TTFT."""
    with threaded_server(perf=FAST) as (_srv, url):
        res = run_sweep(_cfg(url, warmup=0))
    assert [r["error"] for r in res.rows] == [None] * 16
    assert all(r["reused_connection"] and r["connect_ms"] is None for r in res.rows)
    info = res.context["points"][0]
    assert info["connections_preconnected"] == 8 and info["connections_opened_while_measuring"] == 0
    assert "before the measured phase's go time" in res.context["latency_origin"]


def test_a_connection_opened_inside_a_request_is_its_own_field_and_not_in_ttft():
    with threaded_server(perf=FAST) as (_srv, url):
        res = run_sweep(_cfg(url, warmup=0, preconnect=False))
    new = [r for r in res.rows if not r["reused_connection"]]
    assert len(new) == 8 and res.context["points"][0]["connections_opened_while_measuring"] == 8
    for r in new:
        assert r["connect_ms"] > 0
        assert abs((r["write_mono_ns"] - r["send_mono_ns"]) / 1e6 - r["connect_ms"]) < 1e-6
        assert abs(r["ttft_ms"] - (r["first_token_mono_ns"] - r["write_mono_ns"]) / 1e6) < 1e-6
    assert all(r["connect_ms"] is None for r in res.rows if r["reused_connection"])
    assert "recorded apart (connect_ms)" in res.context["latency_origin"]


def test_warm_up_defaults_to_one_request_per_stream():
    with threaded_server(perf=FAST) as (srv, url):
        res = run_sweep(_cfg(url, points=(LoadPoint("closed_loop", 3), LoadPoint("closed_loop", 5))))
        warm = [r for r in srv.records if "-wu" in r]
    assert [s["n_warmup"] for s in res.summaries if s["bucket"] == "all"] == [3, 5]
    assert len(warm) == 8
