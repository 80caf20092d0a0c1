"""Options the load generator cannot honour are refused with one line naming them, never
accepted and ignored (while the summary claims they were used)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from benchrun.errors import BenchrunError
from benchrun.loadgen.config import SweepConfig
from benchrun.loadgen.content import ContentConfig, SessionShape
from benchrun.loadgen.workload import parse_mix

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "specs/datasets/benchrun-conversations.jsonl"
URL = "http://127.0.0.1:9"  # never reached: every refusal comes before the first request


def _cli(args, monkeypatch, capsys):
    from benchrun import cli

    monkeypatch.setattr(sys, "argv", ["benchrun", *args])
    code = 0
    try:
        cli.main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err


def _trace(tmp_path: Path) -> Path:
    p = tmp_path / "t.csv"
    p.write_text("timestamp_s,input_tokens,output_tokens\n" + "".join(f"{i * 0.01},100,4\n" for i in range(10)))
    return p


def _refused(args, monkeypatch, capsys, *names):
    code, _, err = _cli(["loadgen", "--model", "m", *args], monkeypatch, capsys)
    assert code == 1, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for n in names:
        assert n in err, (n, err)
    return err


# -- 1. a trace replay sends the trace's own prompts --------------------------------------------


@pytest.mark.parametrize("extra, names", [
    (["--dataset", str(SHIPPED)], ["--dataset"]),
    (["--tokenizer", "tok.json"], ["--tokenizer"]),
    (["--session-turns", "2"], ["--session-turns"]),
    (["--shared-prefix", "2,2,8"], ["--shared-prefix"]),
    (["--dataset", str(SHIPPED), "--session-turns", "2"], ["--dataset", "--session-turns"]),
])
def test_trace_with_content_options_is_refused(tmp_path, monkeypatch, capsys, extra, names):
    _refused(["--url", URL, "--out", str(tmp_path / "o"), "--trace", str(_trace(tmp_path)), *extra],
             monkeypatch, capsys, "--trace", *names)
    assert not (tmp_path / "o").exists()  # nothing measured, nothing written


def test_a_trace_sweep_config_with_content_is_refused():
    from benchrun.loadgen import trace

    entries = (trace.TraceEntry(0.0, 8, 2), trace.TraceEntry(0.1, 8, 2))
    cfg = SweepConfig(url=URL, model="m", mix=tuple(parse_mix("8/2")), points=(trace.trace_point(entries),), trace=entries,
                      content=ContentConfig(sessions=SessionShape(2)))
    with pytest.raises(BenchrunError, match="trace replay sends the trace's own prompts"):
        cfg.check()


def _suite(tmp_path: Path, params: dict, **workload):
    from benchrun.suites import serving_sweep
    from benchrun.suites._runtime import SuiteContext

    env = {"BENCHRUN_RUN_ID": "r1", "BENCHRUN_RUN_DIR": str(tmp_path), "BENCHRUN_SUITE": "serving_sweep",
           "BENCHRUN_REPLICATE": "1", "BENCHRUN_CASE_ID": "case-1", "BENCHRUN_PARAMS": json.dumps(params),
           "BENCHRUN_WORKLOAD": json.dumps({"model": "m", "concurrencyModel": "open_loop", **workload})}
    serving_sweep.run(SuiteContext(env))


def test_serving_sweep_trace_with_a_dataset_or_sessions_is_refused(tmp_path):
    tr = str(_trace(tmp_path))
    with pytest.raises(BenchrunError, match="parameter trace .*workload.dataset"):
        _suite(tmp_path / "a", {"trace": tr}, dataset={"path": str(SHIPPED)})
    with pytest.raises(BenchrunError, match="parameter trace .*parameter session_turns"):
        _suite(tmp_path / "b", {"trace": tr, "session_turns": 2})
    with pytest.raises(BenchrunError, match="parameter trace .*parameter tokenizer, parameter shared_prefix"):
        _suite(tmp_path / "c", {"trace": tr, "tokenizer": "t.json", "shared_prefix": "2,2,8"})
