"""The streaming HTTP/1.1 client and SSE parser against a real loopback server sending crafted bytes."""

from __future__ import annotations

import asyncio
import json

import pytest

from benchrun.loadgen.client import ConnectionPool, Endpoint, EndpointError, Outcome, build_body, build_head, stream_request


def _ev(text: str | None = None, usage: dict | None = None, chat: bool = False) -> bytes:
    obj: dict = {"id": "x", "choices": []}
    if text is not None:
        obj["choices"] = [{"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}]
    if usage is not None:
        obj["usage"] = usage
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


HEAD_CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


async def _serve_once(pieces: list[bytes], delay_s: float = 0.0):
    """A loopback server answering each request with ``pieces`` (written with gaps)."""
    seen: list[bytes] = []

    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                n = int([ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")][0])
                body = await reader.readexactly(n)
                seen.append(head + body)
                for p in pieces:
                    writer.write(p)
                    await writer.drain()
                    if delay_s:
                        await asyncio.sleep(delay_s)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], seen


async def _request(pieces, api="completions", delay_s=0.0, n=1, timeout_s=5.0, kernel=True):
    server, port, seen = await _serve_once(pieces, delay_s)
    ep = Endpoint.from_url(f"http://127.0.0.1:{port}", api)
    pool = ConnectionPool(ep, kernel_timestamps=kernel)
    outs = []
    try:
        for i in range(n):
            body = build_body(ep, "m", "a b c", 4)
            head = build_head(ep, "POST", ep.path, len(body), {"X-Request-Id": f"r{i}", "traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"})
            out = Outcome()
            await stream_request(pool, head, body, out, timeout_s=timeout_s)
            outs.append(out)
    finally:
        await pool.close()
        server.close()
    return outs, seen, pool


def run(coro):
    return asyncio.run(coro)


def test_endpoint_from_url():
    e = Endpoint.from_url("http://h:8000", "chat")
    assert (e.host, e.port, e.path, e.api) == ("h", 8000, "/v1/chat/completions", "chat")
    e = Endpoint.from_url("https://h/prefix/v1/completions")
    assert (e.port, e.path, e.api, e.models_path) == (443, "/prefix/v1/completions", "completions", "/prefix/v1/models")
    with pytest.raises(EndpointError):
        Endpoint.from_url("h:8000")
    # credentials in the URL are refused (they would land in every result's context), unechoed
    with pytest.raises(EndpointError, match="BENCHRUN_API_KEY") as e:
        Endpoint.from_url("http://user:s3cret@h:8000")
    assert "s3cret" not in str(e.value)
    with pytest.raises(EndpointError, match="query or fragment") as e:
        Endpoint.from_url("http://h:8000/v1?api_key=s3cret")
    assert "s3cret" not in str(e.value)
    e = Endpoint.from_url("http://[::1]:8000")
    assert e.host == "::1" and e.display() == "http://[::1]:8000/v1/completions"
    assert b"\r\nHost: [::1]:8000\r\n" in build_head(e, "GET", "/v1/models", 0, {})


@pytest.mark.parametrize("kernel", [True, False], ids=["kernel-stamps", "event-loop-stamps"])
def test_chunked_stream_with_usage_reuses_connection_and_sends_headers(kernel):
    body = _chunked(_ev("a"), _ev("b"), _ev("c") + _ev(None, {"prompt_tokens": 3, "completion_tokens": 3}), b"data: [DONE]\n\n")
    outs, seen, pool = run(_request([HEAD_CHUNKED + body], n=2, kernel=kernel))
    for o in outs:
        assert o.error is None
        assert len(o.chunk_ns) == 3 and o.chunk_tokens == [1, 1, 1]
        assert (o.usage_prompt, o.usage_completion) == (3, 3)
        assert o.send_ns < o.first_ns <= o.last_ns <= o.done_ns
    assert pool.opened == 1 and outs[1].reused_connection
    req = json.loads(seen[0].split(b"\r\n\r\n", 1)[1])
    assert req["stream"] is True and req["ignore_eos"] is True and req["stream_options"] == {"include_usage": True}
    assert b"X-Request-Id: r0\r\n" in seen[0] and b"traceparent: 00-" + b"a" * 32 in seen[0]


@pytest.mark.parametrize("kernel", [True, False], ids=["kernel-stamps", "event-loop-stamps"])
def test_events_split_across_reads_crlf_and_multiline_data_and_comments(kernel):
    ev = _ev("hello").replace(b"\n", b"\r\n")
    raw = HEAD_CHUNKED + _chunked(b": keep-alive\r\n\r\n", ev, b'data: {"choices":[{"text":\r\ndata: "x"}]}\r\n\r\n', b"data: [DONE]\r\n\r\n")
    pieces = [raw[i : i + 7] for i in range(0, len(raw), 7)]  # 7-byte writes split everything
    outs, _, _ = run(_request(pieces, delay_s=0.001, kernel=kernel))
    o = outs[0]
    assert o.error is None, o.error
    assert len(o.chunk_ns) == 2
    assert o.chunk_ns[0] < o.chunk_ns[1]  # each event stamped by the delivery of its last byte
    assert o.usage_completion is None  # no usage: counts come from chunks


def test_content_length_body_and_chat_deltas():
    body = _ev("x", chat=True) + _ev("y", chat=True) + b"data: [DONE]\n\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(body)
    outs, _, _ = run(_request([head + body], api="chat"))
    assert outs[0].error is None and len(outs[0].chunk_ns) == 2


def test_continuous_usage_gives_tokens_per_chunk():
    body = _chunked(_ev("ab", {"completion_tokens": 2}), _ev("cde", {"completion_tokens": 5}), b"data: [DONE]\n\n")
    outs, _, _ = run(_request([HEAD_CHUNKED + body]))
    assert outs[0].chunk_tokens == [2, 3]
    assert outs[0].usage_completion == 5


@pytest.mark.parametrize(
    "pieces, kind",
    [
        ([b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 25\r\n\r\n" + json.dumps({"error": {"message": "x"}}, separators=(",", ":")).encode()], "http_503"),
        ([HEAD_CHUNKED + _chunked(_ev("a"), b"data: {oops\n\n")], "malformed_sse"),
        # valid JSON of the wrong shape: an error row, not an exception that ends the sweep
        ([HEAD_CHUNKED + _chunked(_ev("a"), b'data: {"choices": [1]}\n\n', b"data: [DONE]\n\n")], "malformed_sse"),
        ([HEAD_CHUNKED + _chunked(_ev("a", {"completion_tokens": "many"}), b"data: [DONE]\n\n")], "malformed_sse"),
        ([HEAD_CHUNKED + _chunked(_ev("a"), b'data: {"error": {"message": "overloaded"}}\n\n')], "server_error"),
        ([HEAD_CHUNKED + _chunked(_ev("a"), _ev("b"))], "no_done"),
        ([HEAD_CHUNKED + b"%x\r\n%s\r\n" % (len(_ev("a")), _ev("a"))], "timeout"),  # body never ends
        ([HEAD_CHUNKED + _chunked(b"data: [DONE]\n\n")], "empty"),
        ([b"garbage\r\n\r\n"], "bad_response"),
    ],
)
def test_faulty_responses_become_errors(pieces, kind):
    outs, _, _ = run(_request(pieces, timeout_s=0.5))
    assert outs[0].error_kind == kind, outs[0].error
    assert outs[0].error.startswith(kind + ": ")


def test_connection_closed_mid_stream():
    async def go():
        async def handle(reader, writer):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(HEAD_CHUNKED + b"%x\r\n%s\r\n" % (len(_ev("a")), _ev("a")))
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        ep = Endpoint.from_url(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        pool = ConnectionPool(ep)
        out = Outcome()
        body = build_body(ep, "m", "p", 3)
        await stream_request(pool, build_head(ep, "POST", ep.path, len(body), {}), body, out, timeout_s=5)
        server.close()
        return out

    out = run(go())
    assert out.error_kind == "closed" and "after 1 chunks" in out.error


def test_delivery_stamps_are_split_at_delivery_boundaries():
    from benchrun.loadgen.client import TimedReader

    async def go():
        r = TimedReader()
        r.feed_data(b"HEAD")
        r.feed_data(b"abc")
        r.feed_data(b"defg")
        (_, t1), (_, t2), (_, t3) = r.marks
        assert t1 <= t2 <= t3
        assert await r.readexactly(4) == b"HEAD"
        r.skip(4)
        data = await r.read(5)  # a read may end inside a delivery
        assert r.segments(data) == [(b"abc", t2), (b"de", t3)]
        assert r.segments(await r.read(10)) == [(b"fg", t3)]
        assert not r.marks

    asyncio.run(go())


class _TenMsReader:
    """A fabricated body read event by event, each event stamped 10 ms after the one before."""

    def __init__(self, pieces):
        self.pieces, self.t = list(pieces), 0

    async def read(self, n):
        return self.pieces.pop(0) if self.pieces else b""

    def segments(self, data):
        self.t += 10_000_000
        return [(data, self.t)]


def _row_of(events: list[bytes]) -> dict:
    from benchrun.loadgen.records import _row, _Spec, _WorkerState
    from benchrun.loadgen.runner import LoadPoint, SweepConfig
    from benchrun.loadgen.sse import _consume_stream
    from benchrun.loadgen.workload import parse_mix

    out = Outcome()
    assert asyncio.run(_consume_stream(_TenMsReader([*events, b"data: [DONE]\n\n"]), {}, out, False)) is False  # no body end
    cfg = SweepConfig(url="http://127.0.0.1:1", model="m", mix=tuple(parse_mix("8/30")), points=(LoadPoint("closed_loop", 1),), requests_per_point=1)
    sp = _Spec()
    sp.request_id = sp.trace_id = "x"
    sp.bucket, sp.in_tokens, sp.out_tokens, sp.scheduled_ns = "8/30", 3, 30, 0
    return _row(_WorkerState(cfg, 0), sp, out, 0, cfg.points[0], 0)


def test_a_usage_total_at_the_end_is_spread_over_every_chunk_wherever_the_server_puts_it():
    """The prefill's token alone, then three tokens per chunk, usage only on the last: every earlier
    chunk counted one token and the last 19, so 18 of 27 gaps were a whole chunk's 10 ms; the pace is 3.33."""
    first = _ev(" a")
    evs = [first] + [_ev(" a b c") for _ in range(8)] + [_ev(" a b c", usage={"prompt_tokens": 3, "completion_tokens": 28})]
    row = _row_of(evs)
    assert len(row["token_gaps_ms"]) == 27 and row["token_gaps_ms"] == pytest.approx([10 / 3] * 27)
    assert row["chunk_token_method"] == "usage_total_spread" and row["output_tokens"] == row["chunk_output_tokens"] == 28
    # usage on every chunk: exact counts, as before
    per = _row_of([_ev(" a", usage={"completion_tokens": 1})]
                  + [_ev(" a b c", usage={"completion_tokens": 1 + 3 * (i + 1)}) for i in range(9)])
    assert per["chunk_token_method"] == "usage_per_chunk" and per["token_gaps_ms"] == pytest.approx([10 / 3] * 27)
    # usage in its own trailing chunk (vLLM, OpenAI include_usage): the same spread, the same gaps
    # (before, one token per chunk: gaps of a whole chunk's 10 ms for the stream above's 3.33)
    sep = _row_of([first] + [_ev(" a b c") for _ in range(9)] + [_ev(usage={"completion_tokens": 28})])
    assert sep["chunk_token_method"] == "usage_total_spread" and sep["chunk_output_tokens"] == sep["output_tokens"] == 28
    assert sep["token_gaps_ms"] == pytest.approx(row["token_gaps_ms"]) and sep["output_token_discrepancy"] == 0
    # a stream interval of 4 (vLLM's and SGLang's --stream-interval): 1, 4, …, 4, then the remainder 2;
    # before, the larger shares went first (4, 4, 4, 4, 4, 3, 3, 3, 3, 3 for 35): the first chunk's share
    # of 4 made no gaps and the last chunks' gaps a third too long
    k4 = _row_of([first] + [_ev(" a b c d") for _ in range(8)] + [_ev(" a b")] + [_ev(usage={"completion_tokens": 35})])
    assert k4["chunk_output_tokens"] == 35 and k4["token_gaps_ms"] == pytest.approx([2.5] * 32 + [5.0] * 2)
    # counts that no fixed interval gives: the prefill's one token, the rest evenly, the larger shares first
    odd = _row_of([first] + [_ev(" a b c") for _ in range(9)] + [_ev(usage={"completion_tokens": 29})])
    assert odd["chunk_output_tokens"] == 29 and odd["token_gaps_ms"] == pytest.approx([2.5] * 4 + [10 / 3] * 24)


def test_a_regular_stream_interval_reads_as_regular_gaps_whatever_usage_reports():
    """Found in review: a 1, 4, 4, … stream (37 tokens, a chunk every 10 ms) with vLLM's final usage
    chunk was read as 4, 4, …, 3, 3, 3: 33 gaps (not 36) of mean 2.73 ms (not 2.5), the last ones
    3.33 ms, and a standard deviation of 0.37 ms on a stream that has none; usage on every chunk read
    it exactly."""
    import numpy as np

    end = _row_of([_ev(" a")] + [_ev(" a b c d") for _ in range(9)] + [_ev(usage={"completion_tokens": 37})])
    per = _row_of([_ev(" a", usage={"completion_tokens": 1})]
                  + [_ev(" a b c d", usage={"completion_tokens": 1 + 4 * (i + 1)}) for i in range(9)])
    assert end["token_gaps_ms"] == pytest.approx(per["token_gaps_ms"])
    assert end["token_gaps_ms"] == pytest.approx([2.5] * 36)
    assert float(np.std(end["token_gaps_ms"])) == pytest.approx(0.0, abs=1e-9)


    # a trailing total equal to the chunk count: one per chunk, exact
    one = _row_of([_ev(" a") for _ in range(5)] + [_ev(usage={"completion_tokens": 5})])
    assert one["chunk_token_method"] == "one_per_chunk" and one["token_gaps_ms"] == pytest.approx([10.0] * 4)
    # a trailing total below the chunk count cannot be spread either
    few = _row_of([_ev(" a") for _ in range(5)] + [_ev(usage={"completion_tokens": 3})])
    assert few["chunk_token_method"] == "one_per_chunk" and few["chunk_output_tokens"] == 5 and few["output_token_discrepancy"] == -2
    # a total below the chunk count cannot be spread: one per chunk, the discrepancy recorded
    low = _row_of([_ev(" a") for _ in range(4)] + [_ev(" b", usage={"completion_tokens": 3})])
    assert low["chunk_token_method"] == "one_per_chunk" and low["chunk_output_tokens"] == 5 and low["output_token_discrepancy"] == -2


@pytest.mark.parametrize("reason", ["abort", {"type": "abort", "message": "preempted"}, "error"],
                         ids=["vllm-abort", "sglang-native-abort", "error"])
def test_a_stream_the_server_aborted_is_an_error_not_a_completion(reason):
    """Found in review: a stream ending with finish_reason "abort" after 11 of 20 tokens, then
    [DONE], counted as a good request (n_errors 0, SLO attainment 1.0); only the token mismatch
    said otherwise, and the verdict never read it."""
    cut = json.dumps({"id": "x", "choices": [{"index": 0, "text": " k", "finish_reason": reason}]}).encode()
    body = _chunked(*[_ev(" t") for _ in range(10)], b"data: " + cut + b"\n\n", b"data: [DONE]\n\n")
    outs, _, _ = run(_request([HEAD_CHUNKED + body]))
    assert outs[0].error_kind == "aborted"
    assert "finish_reason" in outs[0].error and "after 11 chunks" in outs[0].error
    # the reasons a completion ends normally stay completions
    for normal in ("length", "stop", "tool_calls"):
        done = json.dumps({"id": "x", "choices": [{"index": 0, "text": " k", "finish_reason": normal}]}).encode()
        ok, _, _ = run(_request([HEAD_CHUNKED + _chunked(_ev(" t"), b"data: " + done + b"\n\n", b"data: [DONE]\n\n")]))
        assert ok[0].error is None, (normal, ok[0].error)


def test_output_tokens_counted_from_chunks_say_so_in_the_summary():
    """Found in review: without usage a 4-tokens-a-chunk stream read 10 output tokens (really 40) and a
    4x decode_ms_per_token, and nothing said the counts were chunks."""
    from benchrun.loadgen.metrics import summarize

    bare = _row_of([_ev(" a b c d") for _ in range(10)])
    assert bare["token_count_source"] == "chunks" and bare["output_tokens"] == 10
    told = _row_of([_ev(" a b c d") for _ in range(10)] + [_ev(usage={"completion_tokens": 40})])
    kw = dict(point="c=1", load_model="closed_loop", offered_load=1, bucket="all", window=1.0, slo=None, pricing=None)
    s = summarize([bare, told], **kw)
    assert s["n_output_tokens_from_chunks"] == 1
    assert s["output_tokens_note"].startswith("1 of 2 completed requests had no usage")
    clean = summarize([told], **kw)
    assert clean["n_output_tokens_from_chunks"] == 0 and clean["output_tokens_note"] is None


@pytest.mark.parametrize("kernel", [True, False], ids=["kernel-stamps", "event-loop-stamps"])
def test_a_kept_alive_connection_the_server_closed_is_not_reused(kernel):
    """Found in review: a server that closes after each response without `Connection: close` failed 4 of
    10 requests ("connection closed before the response headers" on a reused connection): the pool
    handed the connection out again before the loop had seen the server's FIN. The pool now asks the
    kernel (MSG_PEEK) before reusing one."""

    async def go():
        served = []

        async def handle(reader, writer):  # one request per connection, then close (no Connection: close)
            try:
                head = await reader.readuntil(b"\r\n\r\n")
                n = int([ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")][0])
                await reader.readexactly(n)
                served.append(1)
                writer.write(HEAD_CHUNKED + _chunked(_ev("a"), b"data: [DONE]\n\n"))
                await writer.drain()
            finally:
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        ep = Endpoint.from_url(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        pool = ConnectionPool(ep, kernel_timestamps=kernel)
        outs = []
        try:
            for i in range(10):
                body = build_body(ep, "m", "a b c", 4)
                out = Outcome()
                await stream_request(pool, build_head(ep, "POST", ep.path, len(body), {}), body, out, timeout_s=5.0)
                outs.append(out)
        finally:
            await pool.close()
            server.close()
        return outs, served

    outs, served = run(go())
    assert [o.error for o in outs] == [None] * 10 and len(served) == 10
    assert all(o.connect_ns is not None for o in outs if not o.reused_connection)  # set-up counted
