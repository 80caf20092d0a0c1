"""Ctrl-C landing after a run's final phase (in its report, warehouse or signing steps): the run keeps
its phase, so `benchrun run` must not print "canceled:", and a run whose final signature is still owed
exits 1, not 0 (found in review: it printed "canceled:" and exited 0 for a run no one could verify)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from benchrun.commands import _settle_canceled
from benchrun.lifecycle import exit_code_for
from benchrun.provenance.status_fields import FINAL_SIGNATURE_PENDING
from benchrun.rundir import RunDir
from test_store_helpers import make_run_dir

RUN = "run-interrupted-late"


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=200, color_system=None), out


def test_an_interrupt_after_the_final_phase_keeps_it_and_says_so(tmp_path: Path) -> None:
    make_run_dir(tmp_path, RUN)
    rd = RunDir.for_run(RUN, tmp_path)
    rd.update_status(outcome="succeeded", final_signature=FINAL_SIGNATURE_PENDING)
    console, out = _console()
    _settle_canceled(console, rd)
    st = rd.read_status()
    assert st["phase"] == "Succeeded"
    assert "canceled:" not in out.getvalue()
    assert "interrupted after the run ended Succeeded" in out.getvalue()
    assert f"benchrun report {RUN}" in out.getvalue()
    assert exit_code_for(st) == 1
    rd.update_status(final_signature=None)  # signed: done
    assert exit_code_for(rd.read_status()) == 0


def test_an_interrupt_while_it_runs_still_cancels_it(tmp_path: Path) -> None:
    make_run_dir(tmp_path, RUN)
    rd = RunDir.for_run(RUN, tmp_path)
    rd.update_status(phase="Analyzing")
    console, out = _console()
    _settle_canceled(console, rd)
    assert rd.read_status()["phase"] == "Canceled" and "canceled:" in out.getvalue()
    assert exit_code_for(rd.read_status()) == 130
