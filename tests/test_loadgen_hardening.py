"""Issue 16 H: the load generator treats a server's numbers as untrusted, writes what it measured
on every exit path, and exits non-zero when the verdict is invalid."""

from __future__ import annotations

import contextlib
import http.server
import json
import sys
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from benchrun.loadgen.client import ImplausibleNumber, token_count


@pytest.mark.parametrize("value", [1e308, float("inf"), float("nan"), -3, 2.5, 10**12])
def test_implausible_token_counts_are_refused(value) -> None:
    with pytest.raises(ImplausibleNumber, match="usage.completion_tokens"):
        token_count(value, "usage.completion_tokens")
    assert token_count(128, "x") == 128 and token_count(4.0, "x") == 4
    for wrong_shape in ("7", True, None):
        with pytest.raises(TypeError):
            token_count(wrong_shape, "x")


class _Hostile(http.server.BaseHTTPRequestHandler):
    usage: object = 1e308

    def log_message(self, *a) -> None:
        pass

    def do_GET(self) -> None:
        body = json.dumps({"object": "list", "data": [{"id": "m", "owned_by": "hostile"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        events = [{"choices": [{"text": " a"}]}, {"choices": [{"text": " b"}]},
                  {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": self.usage}}]
        body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextlib.contextmanager
def _hostile_server(usage):
    handler = type("H", (_Hostile,), {"usage": usage})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def _main(args, monkeypatch, capsys):
    from benchrun import cli

    monkeypatch.setattr(sys, "argv", ["benchrun", *args])
    with pytest.raises(SystemExit) as info:
        cli.main()
    out = capsys.readouterr()
    return info.value.code, out.out, out.err


@pytest.mark.parametrize("usage", [1e308, -3])
def test_a_hostile_usage_is_an_error_with_its_category(usage, tmp_path: Path, monkeypatch, capsys) -> None:
    """completion_tokens 1e308 crashed the load generator (nothing written); -3 gave tokens_per_second -887."""
    with _hostile_server(usage) as url:
        code, out, err = _main(["loadgen", "--url", url, "--model", "m", "--mix", "16/4", "--concurrency", "1",
                                "--requests", "3", "--out", str(tmp_path), "--json"], monkeypatch, capsys)
    assert code == 3, err  # every request failed: the verdict is invalid, and the exit code says so
    assert "Traceback" not in err and "verdict invalid" in err
    [summary] = (tmp_path / "structured").glob("*_loadgen_summary.json")
    doc = json.loads(summary.read_text())
    point = [s for s in doc["points"] if s["bucket"] == "all"][0]
    assert point["n_errors"] == 3 and point["n_requests"] == 0 and point["verdict"] == "invalid"
    assert point["tokens_per_second"] in (None, 0) or point["tokens_per_second"] >= 0
    rows = pq.read_table(tmp_path / doc["files"]["requests"]).to_pylist()
    assert len(rows) == 3 and all(r["error"].startswith("implausible_usage: server usage.") for r in rows)


def test_what_was_measured_is_written_when_the_sweep_ends_early(tmp_path: Path, monkeypatch, capsys) -> None:
    from benchrun.loadgen import runner

    real = runner.summarize_point
    calls = {"n": 0}

    def interrupted(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("signal 15")
        return real(*a, **k)

    monkeypatch.setattr(runner, "summarize_point", interrupted)
    with _hostile_server(2) as url:
        code, out, err = _main(["loadgen", "--url", url, "--model", "m", "--mix", "16/4", "--concurrency", "1,2",
                                "--requests", "3", "--out", str(tmp_path)], monkeypatch, capsys)
    assert code == 130 and "sweep ended early (KeyboardInterrupt" in err and "Traceback" not in err
    [summary] = (tmp_path / "structured").glob("*_loadgen_summary.json")
    doc = json.loads(summary.read_text())
    assert doc["incomplete"].startswith("sweep ended early") and [s["point"] for s in doc["points"]
                                                                   if s["bucket"] == "all"] == ["c=1"]
    assert len(pq.read_table(tmp_path / doc["files"]["requests"])) == 3
