"""Issue 30 (1) and issue 28 item 6: stream ends as servers send them, bounded lines, server dialects
detected once, a rejected field named with the flag that removes it, a chat template's overhead."""

from __future__ import annotations

import asyncio
import json
import resource

import pytest

from benchrun.loadgen.client import ConnectionPool, Endpoint, Outcome, build_body, build_head, stream_request
from benchrun.loadgen.refengine import Dialect
from benchrun.loadgen.refserver import PerfModel
from benchrun.loadgen.runner import LoadPoint, SweepConfig, run_sweep
from benchrun.loadgen.workload import parse_mix
from helpers import threaded_server
from test_loadgen_client import HEAD_CHUNKED, _chunked, _ev, _request, run

FAST = PerfModel(decode_base_ms=0.3, decode_ms_per_seq=0.0, prefill_ms_per_token=0.0)


def _finish(text: str | None = None, usage: dict | None = None) -> bytes:
    obj: dict = {"id": "x", "choices": [{"index": 0, "text": text or "", "finish_reason": "length"}]}
    if usage is not None:
        obj["usage"] = usage
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def test_a_finish_reason_chunk_then_the_body_end_is_complete():
    """transformers serve: no [DONE]; the last chunk has finish_reason and usage. Was no_done."""
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    outs, _, pool = run(_request([HEAD_CHUNKED, _chunked(_ev(" a"), _ev(" b"), _finish(usage=usage))], n=2))
    assert [o.error for o in outs] == [None, None]
    assert outs[0].terminator == "finish_reason" and outs[0].usage_completion == 2 and outs[0].usage_prompt == 3
    assert pool.opened == 1 and outs[1].reused_connection  # the chunked body ended: connection reused


async def _answer_and_close(data: bytes) -> Outcome:
    """One request against a server that writes ``data`` and closes the connection."""

    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(data)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    ep = Endpoint.from_url(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    pool = ConnectionPool(ep)
    body = build_body(ep, "m", "a b c", 4)
    out = Outcome()
    try:
        await stream_request(pool, build_head(ep, "POST", ep.path, len(body), {}), body, out, timeout_s=5)
    finally:
        await pool.close()
        server.close()
    return out


def test_a_finish_reason_chunk_then_the_connection_end_is_complete():
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    out = run(_answer_and_close(head + _ev(" a") + _finish(" b")))
    assert out.error is None and out.terminator == "finish_reason+close"
    assert len(out.chunk_ns) == 2
    out = run(_answer_and_close(head + _ev(" a") + _ev(" b")))  # neither: the connection closed mid-stream
    assert out.error_kind == "closed"


def test_a_separate_usage_chunk_after_the_finish_chunk_is_read():
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    outs, _, _ = run(_request([HEAD_CHUNKED, _chunked(_ev(" a"), _finish(" b"), _ev(usage=usage))]))
    assert outs[0].error is None and outs[0].usage_completion == 2 and outs[0].terminator == "finish_reason"


def test_a_stream_with_neither_done_nor_finish_reason_is_no_done():
    outs, _, _ = run(_request([HEAD_CHUNKED, _chunked(_ev(" a"), _ev(" b"))]))
    assert outs[0].error_kind == "no_done" and "finish_reason" in outs[0].error


def test_a_stream_without_newlines_fails_as_oversized_line_with_bounded_memory():
    """Issue 28 item 7: 1 MiB chunks with no newline grew the client to 2.6 GB; now one request
    fails as oversized_line once 1 MiB is buffered (before: it read all 24 MiB, then 'closed')."""
    blob = b"data: " + b"x" * (1 << 20)
    pieces = [HEAD_CHUNKED] + [b"%x\r\n%s\r\n" % (len(blob), blob)] * 24
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outs, _, _ = run(_request(pieces, timeout_s=10))
    assert outs[0].error_kind == "oversized_line", outs[0].error
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0 < 64 * 1024  # KiB: far below 24 MiB x copies


def test_a_close_delimited_stream_without_newlines_is_bounded_too():
    """The same on a body that ends with the connection (no chunking, Connection: close)."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    out = run(_answer_and_close(head + b"data: " + b"x" * (3 << 20)))
    assert out.error_kind == "oversized_line", out.error


def test_a_probe_answered_with_an_endless_body_stops_at_its_bound():
    """get_json (the /v1/models probe) read the whole body whatever its size; now 8 MiB at most."""
    from benchrun.loadgen.client import MAX_JSON_BODY, get_json

    async def go():
        async def handle(reader, writer):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n[")
            try:
                for _ in range(64):  # 16 MiB offered
                    writer.write(b"1," * (1 << 17))
                    await writer.drain()
            except (ConnectionError, OSError):
                pass
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        ep = Endpoint.from_url(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        try:
            with pytest.raises(OSError, match=f"body longer than {MAX_JSON_BODY >> 20} MiB"):
                await get_json(ep, "/v1/models", timeout_s=10)
        finally:
            server.close()

    run(go())


def test_oversized_response_headers_fail_as_oversized_line():
    outs, _, _ = run(_request([b"HTTP/1.1 200 OK\r\nX-Big: " + b"y" * (2 << 20)], timeout_s=10))
    assert outs[0].error_kind == "oversized_line"


def test_a_422_naming_ignore_eos_says_which_flag_removes_it():
    body = json.dumps({"detail": "Unexpected fields in the request: {'ignore_eos'}"}).encode()
    resp = b"HTTP/1.1 422 Unprocessable Entity\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    outs, _, _ = run(_request([resp]))
    err = outs[0].error
    assert outs[0].error_kind == "http_422"
    assert "Unexpected fields in the request: {'ignore_eos'}" in err and "--no-ignore-eos" in err


# --- the reference server in each dialect, driven by the sweep -------------------------------------


def _cfg(url: str, **kw) -> SweepConfig:
    base = dict(url=url, model="m", mix=tuple(parse_mix("8/6")), points=(LoadPoint("closed_loop", 2),), requests_per_point=6,
                request_timeout_s=10.0)
    base.update(kw)
    return SweepConfig(**base)


@pytest.mark.parametrize(
    "dialect, end",
    [
        (Dialect("done"), "[DONE]"),
        (Dialect("finish"), "finish_reason"),
        (Dialect("finish", usage_in_last_chunk=True), "finish_reason"),
        (Dialect("close", usage_in_last_chunk=True), "finish_reason+close"),
    ],
)
@pytest.mark.parametrize("api", ["completions", "chat"])
def test_every_dialect_of_the_reference_server_measures_every_request(dialect, end, api):
    with threaded_server(perf=FAST, dialect=dialect) as (srv, url):
        res = run_sweep(_cfg(url, api=api))
    assert [r["error"] for r in res.rows] == [None] * 6
    assert {r["stream_end"] for r in res.rows} == {end}
    assert all(r["ttft_ms"] is not None and r["e2e_ms"] is not None for r in res.rows)
    assert all(r["usage_output_tokens"] == 6 and r["output_token_discrepancy"] == 0 for r in res.rows)
    assert res.context["server_dialect"]["stream_end"] == end


def test_auto_drops_ignore_eos_for_a_server_that_rejects_it_and_records_why():
    """Every request of a sweep against a strict server failed with HTTP 422 (ignore_eos)."""
    with threaded_server(perf=FAST, dialect=Dialect("finish", True, reject_unknown_fields=True)) as (srv, url):
        res = run_sweep(_cfg(url, api="chat"))
        recs = list(srv.records.values())
    assert [r["error"] for r in res.rows] == [None] * 6
    found = res.context["server_dialect"]
    assert found["ignore_eos"] is False and found["ignore_eos_decided_by"] == "probe"
    assert found["probes"][0]["http_status"] == 422 and "ignore_eos" in found["probes"][0]["error"]
    assert res.context["config"]["ignore_eos"] is False
    assert sum(1 for r in recs if r["status"] == "bad_request") == 1  # the one probe, nothing measured


def test_auto_keeps_ignore_eos_for_a_server_that_takes_it():
    with threaded_server(perf=FAST) as (srv, url):
        res = run_sweep(_cfg(url))
    assert res.context["server_dialect"]["ignore_eos"] is True
    assert len(res.context["server_dialect"]["probes"]) == 1


def test_a_named_kind_that_takes_no_ignore_eos_never_sends_it():
    with threaded_server(perf=FAST, dialect=Dialect(reject_unknown_fields=True)) as (srv, url):
        res = run_sweep(_cfg(url, server_kind="openai"))
    assert [r["error"] for r in res.rows] == [None] * 6
    assert [p["ignore_eos"] for p in res.context["server_dialect"]["probes"]] == [False]


def test_an_explicit_ignore_eos_against_a_strict_server_names_the_field_and_the_flag():
    with threaded_server(perf=FAST, dialect=Dialect(reject_unknown_fields=True)) as (srv, url):
        res = run_sweep(_cfg(url, ignore_eos=True))
    assert {r["error_kind"] for r in res.rows} == {"http_422"}
    assert all("'ignore_eos'" in r["error"] and "--no-ignore-eos" in r["error"] for r in res.rows)
    reasons = next(s for s in res.summaries if s["bucket"] == "all")["verdict_reasons"]
    assert any("6 http_422; e.g. http_422: Unexpected fields" in x and "--no-ignore-eos" in x for x in reasons), reasons


def test_a_chat_templates_fixed_overhead_is_not_a_discrepancy():
    """The server counted 5 template tokens more on every chat request: logged as a discrepancy."""
    with threaded_server(perf=FAST, dialect=Dialect(chat_template_tokens=5)) as (srv, url):
        res = run_sweep(_cfg(url, api="chat"))
    assert res.context["server_dialect"]["prompt_token_overhead"] == 5
    assert all(r["usage_input_tokens"] == 8 + 5 and r["input_token_discrepancy"] == 0 for r in res.rows)
    assert all(s["input_token_discrepancy_total"] == 0 for s in res.summaries)
