"""The baseline a run's playbooks judge against when none is given, and why there is none."""

from __future__ import annotations

import json
from pathlib import Path

from benchrun.errors import BenchrunError
from benchrun.paths import validate_run_id
from benchrun.playbooks.base import baseline_problem

# how benchrun.stats.admit.message opens a refusal (said once, by the note's own words)
REFUSED = "comparison refused (fail closed): "


def comparison_baseline(home: Path, run_id: str) -> tuple[str | None, str] | None:
    """From the run's own comparison (``structured/<run_id>_comparison.json``): ``(baseline, note)``;
    ``(None, why)`` when the comparison was refused or its baseline cannot be used; None when the
    run has no comparison naming another run.

    Only a comparison whose gate passed compared anything: a refused pair (a failed baseline,
    failed replicates, a second difference) judged nothing, so its baseline is no reference for
    the playbooks either, as the report says "not compared".
    """
    path = Path(home) / "runs" / validate_run_id(run_id) / "structured" / f"{run_id}_comparison.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    base = doc.get("baseline") if isinstance(doc, dict) else None
    if not base or base == run_id:
        return None
    gate = doc.get("gate") if isinstance(doc.get("gate"), dict) else {}
    if gate.get("passed") is not True:
        why = str(gate.get("message") or "the comparison document records no gate that passed")
        return None, f"comparison refused: the run's comparison with {base} judged nothing ({why.removeprefix(REFUSED)})"
    problem = baseline_problem(home, str(base))
    if problem:
        return None, f"the run's comparison baseline is left out: {problem}"
    return str(base), "the run's own comparison"


def default_baseline(home: Path, run_id: str, *, spec: bool = True) -> tuple[str | None, str]:
    """``(baseline, note)`` for a run's playbooks when none is given: the run its comparison compared
    it with (when that comparison's gate passed), else (``spec``) the one its spec's
    ``comparison.baseline.artifactRef`` names now. A baseline that is not in the warehouse (deleted
    since) or not Succeeded is skipped; ``note`` says where the baseline came from, or why there is
    none ('' when nothing named one)."""
    from benchrun.stats.load import _get, load_run, resolve_run

    found = comparison_baseline(home, run_id)
    if found is not None:
        return found
    if not spec:
        return None, ""
    try:
        ref = _get(load_run(Path(home) / "runs" / run_id).spec, "spec", "comparison", "baseline", "artifactRef")
        base = resolve_run(str(ref), Path(home), paths=False).name if ref else None
    except BenchrunError:
        return None, ""
    if base is None or base == run_id:
        return None, ""
    problem = baseline_problem(home, base)
    if problem:
        return None, f"its spec's {ref} is left out: {problem}"
    return base, f"its spec's {ref}"
