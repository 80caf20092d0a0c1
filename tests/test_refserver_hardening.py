"""Issue 16 G and O, issue 28 item 10: the reference server survives descriptor exhaustion (and logs it),
bounds request bodies, validates them strictly, and one huge prompt does not stall the other streams."""

from __future__ import annotations

import http.client
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers import threaded_server

REPO = Path(__file__).resolve().parents[1]


def _limit_fds() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))


def test_descriptor_exhaustion_is_survived_and_logged(tmp_path: Path) -> None:
    """`ulimit -n 64`, then 100 connections: the accept loop died, the port stayed open, nothing logged."""
    err = open(tmp_path / "stderr.log", "w+")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "benchrun.loadgen.refserver", "--port", "0"], env=env,
                            stdout=subprocess.PIPE, stderr=err, text=True, preexec_fn=_limit_fds)
    try:
        port = json.loads(proc.stdout.readline())["port"]
        held = []
        for _ in range(100):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            held.append(s)
        # The server is out of descriptors while these are open; let it try to accept them.
        deadline = time.monotonic() + 60
        while "EMFILE" not in (tmp_path / "stderr.log").read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        for s in held:
            s.close()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("GET", "/health")
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read())["status"] == "ok"
        conn.close()
        log = (tmp_path / "stderr.log").read_text()
        assert "accept failed (EMFILE" in log and "backing off" in log
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(10)
        err.close()


def test_a_body_over_the_bound_is_refused_without_reading_it() -> None:
    with threaded_server() as (_srv, url):
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n")
            reply = s.recv(4096).decode()
        assert reply.startswith("HTTP/1.1 400") and "Content-Length must be 0.." in reply


def _post(port: int, body: dict, out: dict, key: str) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    resp.read()
    out[key] = (resp.status, time.monotonic_ns(), len(out))
    conn.close()


def test_a_huge_prompt_does_not_stall_other_streams() -> None:
    """One 2 MB prompt stalled every other completion (~10 s): its prefill is now chunked."""
    from benchrun.loadgen.refserver import PerfModel

    done: dict = {}
    # A small step budget keeps the test short: the long prompt needs hundreds of steps.
    with threaded_server(perf=PerfModel(max_batched_tokens=512, prefill_ms_per_token=0.002)) as (srv, url):
        port = int(url.rsplit(":", 1)[1])
        big = threading.Thread(target=_post, args=(port, {"prompt": "w " * 200_000, "max_tokens": 1}, done, "big"))
        big.start()
        while srv.engine is None or not (srv.engine.waiting or srv.engine.running or srv.engine.steps):
            time.sleep(0.01)
        small = threading.Thread(target=_post, args=(port, {"prompt": "hello", "max_tokens": 8, "stream": True},
                                                     done, "small"))
        small.start()
        small.join(120)
        big.join(120)
    assert done["small"][0] == 200 and done["big"][0] == 200
    assert done["small"][2] < done["big"][2]  # the short stream finished while the long prompt was prefilling


# --- issue 28 item 10: strict request validation -----------------------------------------------


def _raw_post(port: int, path: str, body: bytes, timeout: float = 10) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def test_over_deep_json_is_a_400_not_a_recursion_error(caplog) -> None:
    """100,000 nested '[' raised an unhandled RecursionError (connection dropped, trace logged)."""
    with threaded_server() as (_srv, url):
        port = int(url.rsplit(":", 1)[1])
        status, doc = _raw_post(port, "/v1/completions", b"[" * 100_000)
        assert status == 400 and "nests JSON too deeply" in doc["error"]["message"]
        status, _ = _raw_post(port, "/v1/completions", json.dumps({"prompt": "a b", "max_tokens": 2}).encode())
        assert status == 200
    assert not [r for r in caplog.records if r.exc_info]



@pytest.mark.parametrize(
    "path, body, field",
    [
        ("/v1/completions", {"prompt": "a", "max_tokens": "7"}, "max_tokens must be an integer"),
        ("/v1/completions", {"prompt": "a", "max_tokens": True}, "max_tokens must be an integer"),
        ("/v1/completions", {"prompt": "a", "max_tokens": 1e308}, "max_tokens must be an integer"),
        ("/v1/completions", {"prompt": "a", "max_tokens": 10**30}, "between 1 and 65536"),
        ("/v1/completions", {"prompt": "a", "max_tokens": 0}, "between 1 and 65536"),
        ("/v1/completions", {"prompt": None, "max_tokens": 2}, "prompt must be a string or a non-empty list of strings"),
        ("/v1/completions", {"prompt": [1, 2], "max_tokens": 2}, "prompt must be"),
        ("/v1/completions", {"max_tokens": 2}, "prompt must be"),
        ("/v1/completions", {"prompt": "a", "temperature": "0"}, "temperature must be a number"),
        ("/v1/completions", {"prompt": "a", "stream": "yes"}, "stream must be true or false"),
        ("/v1/chat/completions", {"messages": "hello", "max_tokens": 2}, "messages must be a non-empty list"),
        ("/v1/chat/completions", {"messages": [{"content": "x"}]}, "messages[0] must be an object with a string 'role'"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, "messages[0].content must be"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 2.5},
         "max_completion_tokens must be an integer"),
    ],
)
def test_types_are_validated_strictly(path, body, field) -> None:
    """"max_tokens": "7", prompt: null and a string messages were accepted."""
    with threaded_server() as (srv, url):
        status, doc = _raw_post(int(url.rsplit(":", 1)[1]), path, json.dumps(body).encode())
        assert srv.engine is not None and not srv.engine.waiting and not srv.engine.running
    assert status == 400 and field in doc["error"]["message"], doc


def test_max_tokens_over_the_limit_names_the_limit_and_a_lower_limit_is_kept() -> None:
    """Non-streaming max_tokens 1e308 was never answered and held its slot."""
    with threaded_server(max_tokens_limit=100) as (srv, url):
        port = int(url.rsplit(":", 1)[1])
        status, doc = _raw_post(port, "/v1/completions", json.dumps({"prompt": "a", "max_tokens": 101}).encode())
        assert status == 400 and "between 1 and 100" in doc["error"]["message"] and "--max-tokens-limit" in doc["error"]["message"]
        status, doc = _raw_post(port, "/v1/completions", json.dumps({"prompt": "a", "max_tokens": 100}).encode())
        assert status == 200 and doc["usage"]["completion_tokens"] == 100


def test_a_non_streaming_client_that_leaves_frees_its_slot() -> None:
    """A long non-streaming request whose client went away kept generating to the end."""
    from benchrun.loadgen.refserver import PerfModel

    with threaded_server(perf=PerfModel(max_batch=1, decode_base_ms=1.0)) as (srv, url):
        port = int(url.rsplit(":", 1)[1])
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        body = json.dumps({"prompt": "a", "max_tokens": 60000}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: leaver\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        deadline = time.monotonic() + 10
        while not (srv.engine and srv.engine.running) and time.monotonic() < deadline:
            time.sleep(0.01)
        s.close()
        # the only slot is free again: a second request is served at once, not after 60 s
        status, doc = _raw_post(port, "/v1/completions", json.dumps({"prompt": "a", "max_tokens": 2}).encode(), timeout=10)
        assert status == 200
        assert srv.records["leaver"]["status"] == "client_gone"


def test_a_strict_server_rejects_unknown_fields_with_422_naming_them() -> None:
    from benchrun.loadgen.refengine import Dialect

    with threaded_server(dialect=Dialect(reject_unknown_fields=True)) as (_srv, url):
        port = int(url.rsplit(":", 1)[1])
        status, doc = _raw_post(port, "/v1/completions", json.dumps({"prompt": "a", "ignore_eos": True}).encode())
        assert status == 422 and doc["detail"] == "Unexpected fields in the request: {'ignore_eos'}"
    with threaded_server() as (_srv, url):  # lenient by default, like vLLM
        status, _ = _raw_post(int(url.rsplit(":", 1)[1]), "/v1/completions", json.dumps({"prompt": "a", "ignore_eos": True, "max_tokens": 2}).encode())
        assert status == 200
