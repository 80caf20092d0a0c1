"""Issue 30 (2): connections opened before the go time, a connection opened inside a request counted in
TTFT/E2E (from the send) and recorded on its own (connect_ms), warm-up one request per stream by default."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import pytest

from benchrun.loadgen.client import ConnectionPool, Endpoint
from benchrun.loadgen.refserver import PerfModel
from benchrun.loadgen.runner import LoadPoint, SweepConfig, run_sweep
from benchrun.loadgen.sse import Outcome, _consume_stream
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


def test_a_connection_opened_inside_a_request_counts_in_ttft_and_is_its_own_field_too():
    """TTFT and E2E ran from the write on the new connection, so a server accepting connections
    slowly (5 s of SYN retries behind a full backlog) read as 0.5 ms TTFT with a valid verdict."""
    with threaded_server(perf=FAST) as (_srv, url):
        res = run_sweep(_cfg(url, warmup=0, preconnect=False))
    new = [r for r in res.rows if not r["reused_connection"]]
    assert len(new) == 8 and res.context["points"][0]["connections_opened_while_measuring"] == 8
    for r in new:
        assert r["connect_ms"] > 0
        assert abs((r["write_mono_ns"] - r["send_mono_ns"]) / 1e6 - r["connect_ms"]) < 1e-6
        assert abs(r["ttft_ms"] - (r["first_token_mono_ns"] - r["send_mono_ns"]) / 1e6) < 1e-6
        assert abs(r["e2e_ms"] - (r["last_token_mono_ns"] - r["send_mono_ns"]) / 1e6) < 1e-6
    assert all(r["connect_ms"] is None for r in res.rows if r["reused_connection"])
    assert "counts in them" in res.context["latency_origin"]
    s = next(s for s in res.summaries if s["bucket"] == "all")
    assert s["n_new_connections"] == 8
    assert s["connect_ms_max"] == max(r["connect_ms"] for r in new) and s["connect_ms_p50"] > 0


def test_a_slow_connect_is_in_the_request_latency():
    """A request that waited 5 s for its connection reads 5 s (plus the answer), not the answer's 1 ms."""
    from benchrun.loadgen.records import _row, _Spec, _WorkerState

    cfg = _cfg("http://127.0.0.1:1")
    out = Outcome()
    out.send_ns, out.write_ns, out.connect_ns = 1_000, 5_000_001_000, 5_000_000_000
    out.first_ns, out.last_ns = 5_001_001_000, 5_003_001_000
    out.chunk_ns, out.chunk_tokens = [out.first_ns, out.last_ns], [1, 1]
    sp = _Spec()
    sp.request_id = sp.trace_id = "x"
    sp.bucket, sp.in_tokens, sp.out_tokens, sp.scheduled_ns = "8/4", 8, 4, 0
    row = _row(_WorkerState(cfg, 0), sp, out, out.last_ns, cfg.points[0], 0)
    assert row["connect_ms"] == 5000.0 and row["ttft_ms"] == 5001.0 and row["e2e_ms"] == 5003.0
    assert row["decode_ms_per_token"] == 2.0  # the set-up is before the first token: not in the decode pace
    # a reused connection: no set-up, the same origin
    out.connect_ns, out.write_ns, out.reused_connection = None, 1_000, True
    row = _row(_WorkerState(cfg, 0), sp, out, out.last_ns, cfg.points[0], 0)
    assert row["connect_ms"] is None and row["ttft_ms"] == 5001.0


LOOKUP_S = 0.25  # a slow resolver: every lookup of the test's host name takes this long


def _slow_resolver(monkeypatch, name: str) -> list[int]:
    """socket.getaddrinfo (what asyncio's lookups run in its thread pool) made slow for ``name``;
    the monotonic times at which ``name`` was looked up."""
    real = socket.getaddrinfo
    calls: list[int] = []

    def slow(host, *a, **k):
        if host == name:
            calls.append(time.perf_counter_ns())
            time.sleep(LOOKUP_S)
        return real(host, *a, **k)

    monkeypatch.setattr(socket, "getaddrinfo", slow)
    return calls


def test_the_host_is_resolved_once_before_the_go_time_not_inside_a_request(monkeypatch):
    """Every connection looked the host name up again (loop.getaddrinfo, in asyncio's default thread
    pool): a connection opened inside a request had the lookup inside its TTFT and E2E, here 250 ms
    of a slow resolver in connect_ms. Resolved once before the first point, recorded in the context."""
    calls = _slow_resolver(monkeypatch, "localhost")
    with threaded_server(perf=FAST) as (_srv, url):
        res = run_sweep(_cfg(url.replace("127.0.0.1", "localhost"), warmup=0, preconnect=False))
    assert [r["error"] for r in res.rows] == [None] * 16
    new = [r for r in res.rows if not r["reused_connection"]]
    assert len(new) == 8
    a, b = min(r["send_mono_ns"] for r in res.rows), max(r["end_mono_ns"] for r in res.rows)
    assert [t for t in calls if a <= t <= b] == []  # no lookup while measuring
    assert max(r["connect_ms"] for r in new) < LOOKUP_S * 1e3 * 0.8
    found = res.context["endpoint_resolution"]
    assert found["host"] == "localhost" and found["addresses"] == ["127.0.0.1"]
    assert found["lookup_ms"] >= LOOKUP_S * 1e3
    assert res.context["points"][0]["connections_by_address"] == {"127.0.0.1": 8}


@pytest.mark.parametrize("kernel", [True, False])
def test_a_pool_looks_its_host_up_once_for_all_its_connections(monkeypatch, kernel):
    """Both ways of connecting (kernel-stamped sockets; asyncio streams, as https uses) looked the
    name up once per connection; six connections, three of them opened at once, cost one lookup."""
    calls = _slow_resolver(monkeypatch, "localhost")

    async def go(port: int) -> ConnectionPool:
        pool = ConnectionPool(Endpoint.from_url(f"http://localhost:{port}"), kernel_timestamps=kernel)
        try:
            assert await pool.fill(3, parallel=3) == 3
            held = [await pool.acquire() for _ in range(6)]
            assert [reused for _, reused in held] == [True] * 3 + [False] * 3
            for c, _ in held:
                pool.release(c, True)
        finally:
            await pool.close()
        return pool

    with threaded_server(perf=FAST) as (_srv, url):
        pool = asyncio.run(go(int(url.rsplit(":", 1)[1])))
    assert len(calls) == 1 and pool.opened == 6 and pool.peers == {"127.0.0.1": 6}
    assert pool.resolved.host == "localhost" and pool.resolved.lookup_ms >= LOOKUP_S * 1e3


def test_worker_processes_connect_to_the_address_the_sweep_resolved(monkeypatch):
    """Each worker process looked the name up itself; here only the parent can resolve it (a patched
    resolver), so workers that look it up cannot connect: they use the sweep's one resolution."""
    real = socket.getaddrinfo

    def only_here(host, *a, **k):
        return real("127.0.0.1" if host == "loadgen-test.invalid" else host, *a, **k)

    monkeypatch.setattr(socket, "getaddrinfo", only_here)
    with threaded_server(perf=FAST) as (srv, url):
        res = run_sweep(_cfg(url.replace("127.0.0.1", "loadgen-test.invalid"), workers=2))
    assert [r["error"] for r in res.rows] == [None] * 16
    assert res.context["endpoint_resolution"]["addresses"] == ["127.0.0.1"]
    assert res.context["points"][0]["connections_by_address"] == {"127.0.0.1": 8}


def test_warm_up_defaults_to_one_request_per_stream():
    with threaded_server(perf=FAST) as (srv, url):
        res = run_sweep(_cfg(url, points=(LoadPoint("closed_loop", 3), LoadPoint("closed_loop", 5))))
        warm = [r for r in srv.records if "-wu" in r]
    assert [s["n_warmup"] for s in res.summaries if s["bucket"] == "all"] == [3, 5]
    assert len(warm) == 8


class _Reader:
    """A fabricated response body: each read returns the next piece; ``None`` blocks forever
    (a server that never ends the body)."""

    def __init__(self, pieces):
        self.pieces, self.t = list(pieces), 0

    async def read(self, n):
        if not self.pieces:
            return b""
        p = self.pieces.pop(0)
        if p is None:
            await asyncio.Event().wait()
        return p

    def segments(self, data):
        self.t += 1000
        return [(data, self.t)]


def _chunk(b: bytes) -> bytes:
    return b"%x\r\n" % len(b) + b + b"\r\n"


def _body() -> bytes:
    ev = lambda o: b"data: " + json.dumps(o).encode() + b"\n\n"  # noqa: E731
    toks = [ev({"choices": [{"text": " a", "finish_reason": None}]}), ev({"choices": [{"text": " b", "finish_reason": "length"}]}),
            ev({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}), b"data: [DONE]\n\n"]
    return b"".join(_chunk(t) for t in toks)


def test_a_terminating_chunk_in_a_later_read_still_returns_the_connection_to_the_pool():
    """uvicorn writes the chunked body's 0-length chunk on its own: the reader stopped at [DONE]
    and closed a connection that was about to end cleanly."""
    chunked = {"transfer-encoding": "chunked"}
    out = Outcome()
    reader = _Reader([_body(), b"0\r\n\r\n"])
    assert asyncio.run(_consume_stream(reader, chunked, out, False)) is True
    assert out.error is None and out.terminator == "[DONE]"
    # the stamps were taken before the extra read (its segment would have been stamped 2000)
    assert out.last_ns == out.done_ns == 1000 and reader.t == 2000
    # a body whose end never comes is given up (bounded wait) and the connection not reused
    out = Outcome()
    assert asyncio.run(_consume_stream(_Reader([_body(), None]), chunked, out, False)) is False
    assert out.error is None and out.terminator == "[DONE]"
    # in one read, as before
    assert asyncio.run(_consume_stream(_Reader([_body() + b"0\r\n\r\n"]), chunked, Outcome(), False)) is True


@pytest.mark.parametrize("kernel", [True, False])
def test_several_resolved_addresses_take_new_connections_in_turn_and_a_refusing_one_goes_last(kernel):
    """Resolved once, connections all went to the first address that answered: a headless Service's
    pods (several A records) would have had the whole load on one pod. A lookup per connection spread
    them as the resolver rotated; the one resolution now spreads them itself, and an address that
    refused (``::1`` when the server listens on IPv4 only) is not tried first again."""
    from benchrun.loadgen.conn import Resolved

    async def go() -> tuple[list[int], ConnectionPool]:
        accepted = [0, 0]
        servers = []
        for i in range(2):
            def on(r, w, i=i):
                accepted[i] += 1
            servers.append(await asyncio.start_server(on, "127.0.0.1", 0))
        dead = socket.socket()
        dead.bind(("127.0.0.1", 0))  # bound, never listening: refuses
        ports = [s.sockets[0].getsockname()[1] for s in servers]
        addrs = tuple((socket.AF_INET, socket.SOCK_STREAM, 6, ("127.0.0.1", p))
                      for p in (dead.getsockname()[1], *ports))
        pool = ConnectionPool(Endpoint.from_url(f"http://pods.invalid:{ports[0]}"), kernel_timestamps=kernel,
                              resolved=Resolved("pods.invalid", ports[0], addrs, 0.0))
        try:
            assert await pool.fill(6, parallel=1) == 6
            await asyncio.sleep(0.05)
        finally:
            await pool.close()
            for s in servers:
                s.close()
            dead.close()
        return accepted, pool

    accepted, pool = asyncio.run(go())
    assert accepted == [3, 3] and pool.opened == 6
    assert len(pool._refused) == 1  # the dead address, tried first once, then last
