"""The live progress display of `benchrun run` (benchrun.progress_display), without Dagster."""

from __future__ import annotations

import io
import json
import time

import pytest

from benchrun.progress_display import ProgressDisplay, snapshot
from conftest import ROOT


def _doc(**kw):
    base = {"total": 6, "done": 0, "failed": 0, "started_epoch": 1000.0, "planned": {"micro/gemm": 3, "micro/membw": 3},
            "walls": {}, "current": None, "eta_s": None}
    return {**base, **kw}


def test_snapshot_names_suite_replicate_elapsed_and_eta():
    doc = _doc(done=2, walls={"micro/gemm": [2.0, 2.0]}, eta_s=8.0,
               current={"layer": "micro", "suite": "membw", "replicate": 1, "since_epoch": 1010.0})
    snap = snapshot(doc, now=1013.0)
    assert snap.where == "micro/membw r1/3"
    assert snap.elapsed_s == 13.0
    assert snap.eta_s == 5.0  # 8 s left when gemm r2 finished, 3 s of membw r1 since
    assert snap.line() == "progress 2/6 launches, 0 failed | micro/membw r1/3 | elapsed 13s | ETA 5s"


def test_snapshot_before_start_and_after_the_last_launch():
    assert snapshot(None).line() == "progress 0/? launches, 0 failed | starting | elapsed 0s | ETA -"
    end = snapshot(_doc(done=6, failed=1, eta_s=0.0), now=1125.0)
    assert end.where.startswith("analysing") and end.failed == 1
    assert "elapsed 2m05s" in end.line()


def test_plain_lines_follow_the_file_while_it_changes(tmp_path):
    path = tmp_path / "run_progress.json"
    out = io.StringIO()  # not a terminal: plain lines
    states = [_doc(done=k, current={"layer": "micro", "suite": "gemm", "replicate": k + 1, "since_epoch": time.time()})
              for k in range(3)]
    with ProgressDisplay(path, out, interval_s=0.01, poll_s=0.01) as display:
        assert not display.tty
        for k, doc in enumerate(states):
            path.write_text(json.dumps(doc))
            deadline = time.monotonic() + 10
            while f"progress {k}/6" not in out.getvalue():
                assert time.monotonic() < deadline, out.getvalue()
                time.sleep(0.01)
    lines = out.getvalue().splitlines()
    assert all(line.startswith("progress ") for line in lines)
    assert any("micro/gemm r2/3" in line for line in lines)
    assert lines[-1].startswith("progress 2/6")  # a last line when stopped


def test_interval_from_the_environment_must_be_positive(monkeypatch, tmp_path):
    from benchrun.errors import BenchrunError

    monkeypatch.setenv("BENCHRUN_PROGRESS_INTERVAL_S", "0")
    with pytest.raises(BenchrunError, match="BENCHRUN_PROGRESS_INTERVAL_S"):
        ProgressDisplay(tmp_path / "p.json", io.StringIO())
    monkeypatch.setenv("BENCHRUN_PROGRESS_INTERVAL_S", "2.5")
    assert ProgressDisplay(tmp_path / "p.json", io.StringIO()).interval_s == 2.5


@pytest.mark.parametrize("name, value", [("BENCHRUN_PROGRESS_INTERVAL_S", "abc"),
                                         ("BENCHRUN_REPORT_FIGURES", "sideways"),
                                         ("BENCHRUN_CONTENTION_PCT", "ten"), ("BENCHRUN_CONTENTION_PCT", "150")])
def test_run_refuses_a_bad_setting_before_it_makes_a_run_or_waits_for_the_turn(monkeypatch, tmp_path, capsys,
                                                                                name, value):
    """Review 2026-12-07: the interval was checked only once the benchmark turn was taken (22 s of waiting
    behind another run), then exit 1 and a Failed run left in `benchrun runs` for a setting never usable.
    Review 2026-12-08: a bad BENCHRUN_REPORT_FIGURES failed the run at its report step after every launch
    had measured; BENCHRUN_CONTENTION_PCT=ten was read as the default without a word."""
    from helpers import cli_in_process

    spec = ROOT / "specs" / "local" / "canary.yaml"
    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv(name, value)
    code, out, err = cli_in_process(["run", str(spec)], monkeypatch, capsys)
    assert code == 2 and f"{name}={value!r}" in out + err, (code, out, err)
    assert not (tmp_path / "home" / "runs").exists() or not any((tmp_path / "home" / "runs").iterdir())


def test_a_mistyped_warm_setting_is_refused_not_read_as_the_default(monkeypatch):
    """BENCHRUN_WARM=requir ran the command cold and exited 0, where `require` is meant to fail without a
    warm orchestrator (exit 2, as the entry point turns a WarmError)."""
    from benchrun.warm.client import mode
    from benchrun.warm.key import WarmError

    assert [mode({"BENCHRUN_WARM": v}) for v in ("", "0", "off", "1", "auto", "require", " Require ")] == \
        ["auto", "off", "off", "auto", "auto", "require", "require"]
    with pytest.raises(WarmError, match="BENCHRUN_WARM='requir': expected 0"):
        mode({"BENCHRUN_WARM": "requir"})


def test_a_confirmation_round_after_the_last_launch_is_shown_not_analysing_eta_0(tmp_path):
    """A 15-pair confirmation round ran 2 minutes after the sealed launches while the display said
    `40/40 launches | analysing | ETA 0s`; the round's launches (status.json, not sealed) show."""
    from benchrun.progress_display import read_confirming

    (tmp_path / "progress").mkdir()
    progress = tmp_path / "progress" / "run_progress.json"
    progress.write_text(json.dumps(_doc(done=6, eta_s=0.0)))
    assert read_confirming(progress) is None
    (tmp_path / "status.json").write_text(json.dumps({"phase": "Analyzing", "confirmation_progress": {
        "launches": 7, "last": "gemm r4 ok", "since_epoch": 1100.0}}))
    snap = snapshot(json.loads(progress.read_text()), now=1125.0, confirming=read_confirming(progress))
    assert snap.line() == ("progress 6/6 launches, 0 failed | confirming a suspected regression: 7 launches "
                           "(last gemm r4 ok) | elapsed 2m05s | ETA -")
    # a round of an earlier attempt (before this run started) is not this one's
    old = {"launches": 3, "last": "x", "since_epoch": 900.0}
    assert snapshot(_doc(done=6, eta_s=0.0), now=1125.0, confirming=old).where.startswith("analysing")
    out = io.StringIO()
    with ProgressDisplay(progress, out, interval_s=0.05, poll_s=0.01, force_terminal=False):
        time.sleep(0.2)
    assert "confirming a suspected regression: 7 launches" in out.getvalue()
