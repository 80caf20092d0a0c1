"""Issue 16 G and O: the reference server survives descriptor exhaustion (and logs it), bounds
request bodies, and one huge prompt does not stall the other streams."""

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
