"""One rule says which run is finished and succeeded (rundir.finished_and_succeeded), and the three
places that take a run as a reference follow it: the comparison's admission (stats.admit), promotion
to a published baseline (stats.baseline) and a playbook's baseline (playbooks.base). Each wrote the
rule out on its own; these tests hold them to the one predicate over every phase × outcome."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from benchrun.errors import BenchrunError
from benchrun.playbooks import base as playbook_base
from benchrun.rundir import PHASES, finished_and_succeeded
from benchrun.stats import admit
from benchrun.stats.baseline import verify_for_promotion

OUTCOMES = (None, "succeeded", "partial", "failed", "canceled", "unknown")
GRID = [(phase, outcome) for phase in (*PHASES, None) for outcome in OUTCOMES]


def test_the_rule() -> None:
    ok = {(p, o) for p, o in GRID if finished_and_succeeded(p, o)}
    assert ok == {("Succeeded", None), ("Succeeded", "succeeded"), ("Succeeded", "partial")}


@pytest.mark.parametrize(("phase", "outcome"), GRID)
def test_comparison_admission_follows_the_rule(phase: str | None, outcome: str | None) -> None:
    run = types.SimpleNamespace(run_id="r1", status={"phase": phase, "outcome": outcome})
    refusal = admit._phase_refusal("baseline", run, False)
    assert (refusal is None) == finished_and_succeeded(phase, outcome)
    if refusal is not None:
        assert refusal.reason == admit.NOT_SUCCEEDED and f"phase {phase}" in refusal.message


@pytest.mark.parametrize(("phase", "outcome"), GRID)
def test_playbook_baseline_follows_the_rule(phase: str | None, outcome: str | None,
                                            monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(playbook_base, "_run_row", lambda home, rid: {"phase": phase, "outcome": outcome})
    problem = playbook_base.baseline_problem(tmp_path, "b1")
    assert (problem is None) == finished_and_succeeded(phase, outcome)
    if problem is not None:
        assert problem.startswith("baseline run 'b1' is not Succeeded (phase ")


@pytest.mark.parametrize(("phase", "outcome"), GRID)
def test_promotion_follows_the_rule(phase: str | None, outcome: str | None, tmp_path: Path) -> None:
    """A run that is not finished and succeeded is refused by its phase, before anything else is
    read; one that is gets past that check (and is refused later here: it has no evidence)."""
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / "status.json").write_text(json.dumps({"run_id": "r1", "phase": phase, "outcome": outcome}))
    with pytest.raises(Exception) as err:
        verify_for_promotion(run_dir, tmp_path)
    refused_by_phase = isinstance(err.value, BenchrunError) and "only a Succeeded run can become the baseline" in str(
        err.value)
    assert refused_by_phase == (not finished_and_succeeded(phase, outcome)), str(err.value)
