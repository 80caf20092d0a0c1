"""Faulty servers: every fault ends its request as an error row with a reason; the sweep goes on."""

from __future__ import annotations

import socket

import pytest

from benchrun.errors import BenchrunError
from benchrun.loadgen.refserver import PerfModel
from benchrun.loadgen.runner import LoadPoint, SweepConfig, check_reachable, run_sweep
from benchrun.loadgen.workload import parse_mix
from helpers import threaded_server




def _cfg(url, **kw):
    base = dict(url=url, model="m", mix=tuple(parse_mix("8/6")), points=(LoadPoint("closed_loop", 2), LoadPoint("closed_loop", 1)), requests_per_point=8, warmup=0, request_timeout_s=0.5)
    base.update(kw)
    return SweepConfig(**base)


@pytest.mark.parametrize(
    "fault, kind",
    [
        ("refuse", "closed"),
        ("http500", "http_500"),
        ("http429", "http_429"),
        ("close_midstream", "closed"),
        ("malformed_sse", "malformed_sse"),
        ("no_done", "no_done"),
        ("stall", "timeout"),
    ],
)
def test_each_fault_is_an_error_row_and_the_sweep_continues(fault, kind):
    with threaded_server(perf=PerfModel(decode_base_ms=0.3), fault=fault, fault_every=2) as (srv, url):
        res = run_sweep(_cfg(url, request_timeout_s=0.3 if fault == "stall" else 5.0))
    assert len(res.rows) == 16  # both points ran all their requests
    errs = [r for r in res.rows if r["error"] is not None]
    assert len(errs) == 8, [r["error"] for r in res.rows]
    assert {r["error_kind"] for r in errs} == {kind}
    assert all(r["error"].startswith(kind + ": ") for r in errs)
    assert all(r["ttft_ms"] is None and r["output_tokens"] is None for r in errs)
    ok = [r for r in res.rows if r["error"] is None]
    assert all(r["output_tokens"] == 6 for r in ok)
    for s in res.summaries:
        if s["bucket"] == "all":
            assert (s["n_requests"], s["n_errors"]) == (4, 4)
            assert s["error_kinds"] == {kind: 4}
            assert s["verdict"] == "invalid"
            assert any("error rate 4/8" in r and f"4 {kind}" in r for r in s["verdict_reasons"])


def test_unreachable_url_fails_fast_with_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connection refused
        with pytest.raises(BenchrunError) as e:
            run_sweep(_cfg(f"http://127.0.0.1:{port}"))
    msg = str(e.value)
    assert "\n" not in msg and f"127.0.0.1:{port}" in msg and "connection refused" in msg
    with pytest.raises(BenchrunError, match="not http"):
        check_reachable("localhost:8000")


def test_bad_sweep_configuration_names_the_field():
    with pytest.raises(BenchrunError, match="exactly one of requests"):
        run_sweep(_cfg("http://127.0.0.1:9", duration_s=1.0))
    with pytest.raises(BenchrunError, match="at least one load point"):
        run_sweep(_cfg("http://127.0.0.1:9", points=()))
