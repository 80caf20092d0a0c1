"""The synthetic reference server: API, SSE format, ground truth, and its batching model."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import pytest

from benchrun.loadgen.client import ConnectionPool, Endpoint, Outcome, build_body, build_head, stream_request
from benchrun.loadgen.refserver import PerfModel, ServerProcess
from helpers import threaded_server




def _get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status, dict(r.headers), json.loads(r.read())


def _post(url, body, headers=None):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status, dict(r.headers), r.read()


def test_routes_and_synthetic_labels():
    with threaded_server(model_name="m1") as (_, url):
        assert _get(url + "/health")[0] == 200
        st, hdr, models = _get(url + "/v1/models")
        assert models["data"][0]["id"] == "m1" and "synthetic" in models["data"][0]["owned_by"]
        assert hdr["X-Benchrun-Synthetic"] == "true"
        with pytest.raises(urllib.error.HTTPError) as e:
            _get(url + "/nope")
        assert e.value.code == 404
        with pytest.raises(urllib.error.HTTPError) as e:
            _post(url + "/v1/completions", {"max_tokens": 0})
        assert e.value.code == 400
        st, _, raw = _post(url + "/v1/completions", {"model": "m1", "prompt": "one two three", "max_tokens": 5})
        doc = json.loads(raw)
        assert doc["choices"][0]["text"] == " syn" * 5
        assert doc["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
        assert doc["system_fingerprint"] == "benchrun-refserver-synthetic"


def test_stream_format_read_by_a_standard_client():
    """urllib (not our client) reads the chunked SSE stream: tokens, usage, [DONE]."""
    with threaded_server() as (_, url):
        body = {"model": "x", "messages": [{"role": "user", "content": "a b c d"}], "max_tokens": 6, "stream": True, "stream_options": {"include_usage": True}}
        st, hdr, raw = _post(url + "/v1/chat/completions", body, {"X-Request-Id": "rid-1"})
        assert hdr["Content-Type"] == "text/event-stream" and hdr["X-Request-Id"] == "rid-1"
        events = [e[len("data: ") :] for e in raw.decode().split("\n\n") if e]
        assert events[-1] == "[DONE]"
        objs = [json.loads(e) for e in events[:-1]]
        content = [o["choices"][0]["delta"]["content"] for o in objs if o["choices"]]
        assert content == [" syn"] * 6
        assert objs[0]["choices"][0]["delta"]["role"] == "assistant"
        assert objs[-1]["usage"] == {"prompt_tokens": 4, "completion_tokens": 6, "total_tokens": 10}
        assert objs[-2]["choices"][0]["finish_reason"] == "length"


def _stream_many(url, n, max_tokens, prompt="w " * 8, api="completions"):
    async def go():
        ep = Endpoint.from_url(url, api)
        pool = ConnectionPool(ep)
        outs = [Outcome() for _ in range(n)]

        async def one(i):
            body = build_body(ep, "m", prompt, max_tokens)
            tp = "00-" + f"{i:032x}" + "-" + "1" * 16 + "-01"
            await stream_request(pool, build_head(ep, "POST", ep.path, len(body), {"X-Request-Id": f"q{i}", "traceparent": tp}), body, outs[i], timeout_s=20)

        await asyncio.gather(*(one(i) for i in range(n)))
        await pool.close()
        return outs

    return asyncio.run(go())


def test_ground_truth_records_per_request_id():
    with threaded_server() as (srv, url):
        outs = _stream_many(url, 3, 4)
        assert all(o.error is None for o in outs)
        _, _, doc = _get(url + "/debug/requests")
        recs = {r["request_id"]: r for r in doc["requests"]}
        assert "CLOCK_MONOTONIC" in doc["clock"] and doc["synthetic"] is True
        for i in range(3):
            r = recs[f"q{i}"]
            assert r["trace_id"] == f"{i:032x}"
            assert r["arrival_ns"] <= r["admitted_ns"] <= r["first_token_ns"] <= r["last_token_ns"]
            assert (r["prompt_tokens"], r["completion_tokens"], r["status"]) == (8, 4, "ok")
            # same clock: the client's (kernel) receive stamp falls inside the server's
            # write of that chunk, i.e. after admission and before the post-write stamp + slack
            assert r["admitted_ns"] <= outs[i].first_ns <= r["first_token_ns"] + 50_000_000


def _records(url):
    """The server's ground truth, read through its own event loop: the engine stamps
    ``last_token_ns`` just after it writes the last chunk, so a client can hold the whole
    stream before that stamp is set; a request served on the same loop comes after it."""
    return _get(url + "/debug/requests")[2]["requests"]


def test_max_batch_one_serialises_requests():
    with threaded_server(perf=PerfModel(decode_base_ms=0.5, max_batch=1)) as (srv, url):
        _stream_many(url, 3, 5)
        recs = sorted(_records(url), key=lambda r: r["admitted_ns"])
        for a, b in zip(recs, recs[1:]):
            assert b["admitted_ns"] >= a["last_token_ns"]


def test_token_budget_limits_prefill_per_step():
    # budget 10 tokens: two 8-word prompts cannot be prefilled in one step
    with threaded_server(perf=PerfModel(decode_base_ms=0.5, max_batched_tokens=10)) as (srv, url):
        _stream_many(url, 2, 3)
        a, b = sorted(_records(url), key=lambda r: r["admitted_ns"])
        assert b["admitted_ns"] > a["admitted_ns"]


def test_decode_steps_follow_the_model():
    perf = PerfModel(decode_base_ms=2.0, decode_ms_per_seq=0.5, prefill_ms_per_token=0.0)
    with threaded_server(perf=perf) as (srv, url):
        _stream_many(url, 1, 21)
        (r,) = _records(url)
        # 21 steps of batch 1 (the first yields the first token); the engine's deadline clock
        # starts when the request wakes it, so arrival -> last token spans at least 21 x 2.5 ms
        assert (r["last_token_ns"] - r["arrival_ns"]) / 1e6 >= 21 * perf.step_ms(1, 0)


def test_queue_full_answers_429():
    with threaded_server(perf=PerfModel(decode_base_ms=1.0, max_batch=1, max_queue=1)) as (_, url):
        outs = _stream_many(url, 5, 300)  # ~0.3 s each: all five arrive while the first decodes
        kinds = [o.error_kind for o in outs]
        assert kinds.count("http_429") >= 3 and kinds.count(None) >= 1


def test_perf_model_validation():
    assert PerfModel.from_dict({"max_batch": "8"}).max_batch == 8
    with pytest.raises(ValueError, match="unknown"):
        PerfModel.from_dict({"speed": 1})
    with pytest.raises(ValueError):
        PerfModel.from_dict({"max_batch": 0})


def test_server_process_announces_port_and_records_jsonl(tmp_path):
    rec = tmp_path / "gt.jsonl"
    with ServerProcess(PerfModel(decode_base_ms=0.5), record_path=str(rec)) as sp:
        assert sp.info["synthetic"] is True and sp.port > 0
        outs = _stream_many(sp.url, 2, 3)
        assert all(o.error is None for o in outs)
    lines = [json.loads(x) for x in rec.read_text().splitlines()]
    assert sorted(r["request_id"] for r in lines) == ["q0", "q1"]
    assert all(r["completion_tokens"] == 3 for r in lines)


def test_server_process_that_exits_at_start_says_why():
    # the child refuses the model (PerfModel() itself does not validate); its stderr is the reason
    with pytest.raises(RuntimeError, match=r"exited at start: .*max_batch, max_batched_tokens and max_queue must be >= 1"):
        ServerProcess(PerfModel(max_batch=0))


@pytest.mark.parametrize("length", [b"abc", b"99999999999"])
def test_bad_or_huge_content_length_is_a_400_not_a_dead_handler(length):
    import socket
    import urllib.parse

    with threaded_server() as (_, url):
        u = urllib.parse.urlsplit(url)
        with socket.create_connection((u.hostname, u.port), timeout=5) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + length + b"\r\n\r\n")
            reply = b""
            while chunk := s.recv(4096):
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 400 ") and b"Content-Length must be" in reply
        assert _get(url + "/health")[0] == 200  # the server still answers
