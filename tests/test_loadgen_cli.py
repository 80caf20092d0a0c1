"""``benchrun loadgen`` and ``benchrun refserver`` through the real command line."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pyarrow.parquet as pq
import pytest

from benchrun.loadgen.refserver import PerfModel, ServerProcess

CLI = [sys.executable, "-m", "benchrun.cli"]


@pytest.fixture(scope="module")
def server():
    with ServerProcess(PerfModel(decode_base_ms=0.3, decode_ms_per_seq=0.01, prefill_ms_per_token=0.001)) as sp:
        yield sp


def _run(args, timeout=120):
    """The real entry point in a child process."""
    return subprocess.run(CLI + args, capture_output=True, text=True, timeout=timeout)


class _Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def _main(args, monkeypatch, capsys):
    """``benchrun.cli.main`` in this process (same code path, no interpreter start-up)."""
    from helpers import cli_in_process

    return _Result(*cli_in_process(args, monkeypatch, capsys))


@pytest.mark.slow
def test_loadgen_json_summary_and_outputs(server, tmp_path, monkeypatch, capsys):
    p = _main(["loadgen", "--url", server.url, "--model", "m", "--mix", "16/4@0.5,32/8@0.5", "--concurrency", "1,2",
              "--requests", "10", "--warmup", "2", "--seed", "5", "--slo", "ttft_ms=1000,decode_ms_per_token=100",
              "--price-per-node-hour", "36", "--nodes", "2", "--out", str(tmp_path), "--json", "--allow-invalid"],
             monkeypatch, capsys)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["schema"] == "benchrun.loadgen_summary/v1" and doc["synthetic"] is True
    alls = [s for s in doc["points"] if s["bucket"] == "all"]
    assert [s["point"] for s in alls] == ["c=1", "c=2"]
    assert all(s["n_requests"] == 10 and s["slo_attainment"] == 1.0 and s["cost_per_token_usd"] > 0 for s in alls)
    # both meet the SLO, but 10 requests a point support no p99 (368 needed): no capacity is claimed
    from benchrun.loadgen.metrics import SLO, point_passes_slo

    assert not any(point_passes_slo(s, SLO(ttft_ms=1000, decode_ms_per_token=100)) for s in alls)
    assert doc["capacity_at_slo"] is None
    assert "a point needs 368 completed requests for a supported p99 at 95% (--requests, or a longer --duration)" in \
        doc["capacity_at_slo_note"]
    table = pq.read_table(tmp_path / doc["files"]["requests"])
    assert table.num_rows == 20
    assert all((tmp_path / f).is_file() for f in doc["files"]["figures"])
    [summary] = (tmp_path / "structured").glob("*_loadgen_summary.json")  # (a bare glob is always truthy)
    assert summary.name == f"{doc['run_id']}_loadgen_summary.json"
    assert json.loads(summary.read_text())["points"] == json.loads(json.dumps(doc["points"]))
    assert "c=1: 10 ok, 0 errors" in p.stderr  # progress per point


@pytest.mark.slow
def test_loadgen_table_from_the_real_entry_point(server, tmp_path):
    p = _run(["loadgen", "--url", server.url, "--model", "m", "--mix", "16/4", "--rate", "50", "--requests", "6", "--out", str(tmp_path)])
    # 6 requests cannot support p99: the verdict is invalid, so the exit code says so (issue 16 H)
    assert p.returncode == 3, p.stderr
    assert "rate=50" in p.stdout and "requests:" in p.stdout and "summary:" in p.stdout
    assert "verdict invalid at 1 of 1 point(s)" in p.stderr and "Traceback" not in p.stderr
    assert len(list((tmp_path / "structured").glob("*_loadgen_summary.json"))) == 1


@pytest.mark.parametrize(
    "args, msg",
    [
        (["--concurrency", "1", "--rate", "2", "--requests", "2"], "exactly one of --concurrency"),
        (["--concurrency", "1"], "exactly one of --duration"),
        (["--concurrency", "1.5", "--requests", "2"], "whole numbers"),
        (["--concurrency", "inf", "--requests", "2"], "positive, finite"),
        (["--rate", "1e400", "--requests", "2"], "positive, finite"),
        (["--concurrency", "1", "--requests", "2", "--mix", "1/2@0.3"], "--mix"),
        (["--concurrency", "1", "--requests", "2", "--slo", "ttft=3"], "--slo"),
        (["--concurrency", "1", "--requests", "2", "--url", "http://127.0.0.1:1"], "cannot reach http://127.0.0.1:1"),
    ],
)
def test_bad_input_is_one_line_without_traceback(server, tmp_path, args, msg, monkeypatch, capsys):
    base = {"--url": server.url, "--model": "m", "--out": str(tmp_path)}
    for i, a in enumerate(args):
        if a in base:
            base[a] = args[i + 1]
    rest = [a for i, a in enumerate(args) if a not in base and (i == 0 or args[i - 1] not in base)]
    p = _main(["loadgen", *[x for kv in base.items() for x in kv], *rest], monkeypatch, capsys)
    assert p.returncode == 1
    assert msg in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_a_bad_trace_file_is_one_line_naming_the_file_and_line(server, tmp_path, monkeypatch, capsys):
    """A Latin-1 byte ended in 'utf-8 codec can't decode byte 0xff in position 49' (no file named),
    and a 3e9-token prompt in MemoryError."""
    latin = tmp_path / "latin.csv"
    latin.write_bytes(b"timestamp_s,input_tokens,output_tokens\n0,8,4\n0.5,\xff\xfe,4\n")
    huge = tmp_path / "huge.jsonl"
    huge.write_text('{"timestamp_s": 0, "input_tokens": 8, "output_tokens": 4}\n'
                    '{"timestamp_s": 0.1, "input_tokens": 3000000000, "output_tokens": 4}\n')
    # review 2026-12-07: read fine, then ended the sweep after its warm-up (OverflowError, no file named)
    late = tmp_path / "late.jsonl"
    late.write_text('{"timestamp_s": 0, "input_tokens": 8, "output_tokens": 4}\n'
                    '{"timestamp_s": 1e300, "input_tokens": 8, "output_tokens": 4}\n')
    for path, msg in ((latin, f"{latin}:3: not UTF-8 text (byte 0xff at column 5)"),
                      (huge, f"{huge}:2: input_tokens 3000000000 is above 2,000,000 tokens"),
                      (late, "the replay would last 1e+300 s (its last request at 1e+300 s of the trace, speedup 1): "
                             "more than 7 days")):
        p = _main(["loadgen", "--url", server.url, "--model", "m", "--out", str(tmp_path), "--trace", str(path)],
                  monkeypatch, capsys)
        assert p.returncode == 1 and msg in p.stderr and "fix" in p.stderr, p.stderr
        assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_refserver_command_serves_until_terminated():
    proc = subprocess.Popen(CLI + ["refserver", "--port", "0", "--decode-base-ms", "0.5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        info = json.loads(proc.stdout.readline())
        assert info["synthetic"] is True and info["perf_model"]["decode_base_ms"] == 0.5
        with urllib.request.urlopen(info["listening"] + "/health", timeout=5) as r:
            assert json.loads(r.read())["status"] == "ok"
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
        proc.stdout.close()
        proc.stderr.close()


def test_refserver_bad_flag_is_one_line(monkeypatch, capsys):
    p = _main(["refserver", "--port", "0", "--max-batch", "0"], monkeypatch, capsys)
    assert p.returncode == 1 and "refserver:" in p.stderr and "Traceback" not in p.stderr
