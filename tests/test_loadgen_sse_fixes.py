"""Stream parsing found wrong in review, each checked through a sweep against a loopback server that
streams crafted events: a null ``error`` field, reasoning in a session's history, and a content
chunk whose continuous usage did not grow."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
import time
from typing import Any, Iterator

from benchrun.loadgen.content import ContentConfig, SessionShape
from benchrun.loadgen.runner import LoadPoint, SweepConfig, run_sweep
from benchrun.loadgen.workload import parse_mix


class _Scripted(http.server.BaseHTTPRequestHandler):
    """Answers every completion with ``events`` (one write each, ``gap_s`` apart, then the
    connection's end) and keeps each request's body by its X-Request-Id."""

    events: list[Any] = []
    gap_s = 0.005
    received: dict[str, dict] = {}

    def log_message(self, *a: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = json.dumps({"object": "list", "data": [{"id": "m", "owned_by": "scripted"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        self.received[self.headers.get("X-Request-Id", "")] = body
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for e in [*self.events, "[DONE]"]:
            self.wfile.write(b"data: " + (e if isinstance(e, str) else json.dumps(e)).encode() + b"\n\n")
            self.wfile.flush()
            time.sleep(self.gap_s)


@contextlib.contextmanager
def _server(events: list[Any]) -> Iterator[tuple[str, dict[str, dict]]]:
    received: dict[str, dict] = {}
    handler = type("H", (_Scripted,), {"events": events, "received": received})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", received
    finally:
        srv.shutdown()
        srv.server_close()


def _sweep(url: str, n: int, **kw: Any) -> list[dict]:
    cfg = SweepConfig(url=url, model="m", mix=tuple(parse_mix("4/3")), points=(LoadPoint("closed_loop", 1),),
                      requests_per_point=n, warmup=0, server_kind="openai", **kw)
    return run_sweep(cfg).rows


def _chat(delta: dict | None = None, finish: str | None = None, **top: Any) -> dict:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}], **top}


def test_a_null_error_field_is_no_error_and_a_real_one_still_fails():
    """Found in review: any chunk holding an "error" key failed its request, "error": null too."""
    events = [{"choices": [{"index": 0, "text": w, "finish_reason": None}], "error": None} for w in (" a", " b")]
    events.append({"choices": [{"index": 0, "text": " c", "finish_reason": "length"}], "error": None})
    with _server(events) as (url, _):
        rows = _sweep(url, 3)
    assert [r["error"] for r in rows] == [None] * 3
    assert [r["chunk_count"] for r in rows] == [3] * 3
    real = [events[0], {"error": {"message": "overloaded"}}]
    with _server(real) as (url, _):
        rows = _sweep(url, 1)
    assert rows[0]["error_kind"] == "server_error" and "overloaded" in rows[0]["error"]


def test_a_sessions_history_carries_the_reply_not_its_reasoning():
    """Found in review: reasoning (delta.reasoning_content / reasoning) was sent back as the
    assistant's message of the next turn; it still counts for the first token and the chunks."""
    events = [_chat({"role": "assistant", "reasoning_content": "let me think"}), _chat({"reasoning": " some more"}),
              _chat({"content": " the answer"}), _chat(finish="stop"),
              {"object": "chat.completion.chunk", "choices": [], "usage": {"completion_tokens": 3}}]
    with _server(events) as (url, received):
        rows = _sweep(url, 2, api="chat", content=ContentConfig(sessions=SessionShape(turns=2)))
    assert [r["error"] for r in rows] == [None, None] and [r["turn"] for r in rows] == [1, 2]
    first, second = rows
    # the first token is the reasoning's, the first of three content-bearing chunks
    assert first["chunk_count"] == 3 and first["output_tokens"] == 3
    assert first["ttft_ms"] < first["e2e_ms"] - 5  # two more chunks, 5 ms apart, after it
    msgs = received[second["request_id"]]["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert msgs[1]["content"] == " the answer"
    assert msgs[0]["content"] == received[first["request_id"]]["messages"][0]["content"]


def test_a_chunk_whose_continuous_usage_did_not_grow_counts_no_token():
    """Found in review: with usage on every chunk (vLLM's continuous_usage_stats), a content chunk
    whose completion_tokens did not grow still counted one token: 3 counted where usage said 2."""
    events = [{"choices": [{"index": 0, "text": t, "finish_reason": f}], "usage": {"completion_tokens": c}}
              for t, c, f in ((" a", 1, None), ("\u00e9", 1, None), (" b", 2, "length"))]
    with _server(events) as (url, _):
        rows = _sweep(url, 2)
    for r in rows:
        assert r["error"] is None and r["chunk_token_method"] == "usage_per_chunk"
        assert r["chunk_count"] == 3
        assert r["chunk_output_tokens"] == r["usage_output_tokens"] == r["output_tokens"] == 2
        assert r["output_token_discrepancy"] == 0
        # one gap: from the first token's chunk to the second's, the empty-handed chunk between them none
        assert r["token_gaps_ms"] == [(r["last_token_mono_ns"] - r["first_token_mono_ns"]) / 1e6]
        assert r["token_gaps_ms"][0] > 5


def test_a_hostile_servers_events_fail_their_request_not_the_sweep_nor_the_terminal():
    """Found in review (2026-12-08): one event of JSON nested past Python's stack raised RecursionError
    out of the sweep (every point lost); a server's error message reached the terminal with its escape
    sequences (window title, colours, a hidden hyperlink)."""
    with _server(["[" * 200_000]) as (url, _):
        rows = _sweep(url, 2)
    assert [r["error_kind"] for r in rows] == ["malformed_sse"] * 2
    title = "\x1b]0;PWNED\x07\x1b[31mred\x1b[0m \x9b2J"
    with _server([_chat({"content": "a"}), {"error": {"message": title}}]) as (url, _):
        rows = _sweep(url, 1)
    assert rows[0]["error"] == "server_error: \\x1b]0;PWNED\\x07\\x1b[31mred\\x1b[0m \\x9b2J", rows[0]["error"]


def test_a_chunked_models_listing_cut_short_is_an_error_not_a_spin():
    """`1\\r\\nA\\r\\n3x` (no end of the second size line) looped forever in get_json, outside its timeout,
    its memory growing."""
    import pytest

    from benchrun.loadgen.client import dechunk

    assert dechunk(b"1\r\nA\r\n3;ext\r\nbcd\r\n0\r\n\r\n", "GET /v1/models") == b"Abcd"
    for bad, said in ((b"1\r\nA\r\n3x", "no end of a chunk-size line"), (b"zz\r\n", "bad chunk size"),
                      (b"9\r\nAB\r\n", "a chunk of 9 bytes"), (b"-1\r\n\r\n", "a chunk of -1 bytes")):
        with pytest.raises(OSError, match=said):
            dechunk(bad, "GET /v1/models")
