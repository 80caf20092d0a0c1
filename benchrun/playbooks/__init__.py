"""The four scenario playbooks (spec.observability.scenarioPlaybooks): SQL over the warehouse with a verdict.

Each playbook is ``fn(home, run_id, baseline_run_id or None) -> PlaybookResult``; its
evidence query lives in its module (``SQL``) with its thresholds as named constants.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

from benchrun.errors import BenchrunError
from benchrun.playbooks import backpressure, gpu_utilization, straggler, tail_latency
from benchrun.playbooks.backpressure import scheduler_backpressure
from benchrun.playbooks.base import VERDICTS, PlaybookResult, check_runs, in_warehouse
from benchrun.playbooks.gpu_utilization import low_gpu_utilization
from benchrun.playbooks.straggler import distributed_straggler
from benchrun.playbooks.tail_latency import tail_latency_regression

log = logging.getLogger(__name__)

Playbook = Callable[[Path, str, "str | None"], PlaybookResult]

# In the order the spec lists them (benchrun.spec.rules.PLAYBOOKS).
PLAYBOOKS: dict[str, Playbook] = {
    "tail_latency_regression": tail_latency_regression,
    "low_gpu_utilization": low_gpu_utilization,
    "distributed_straggler": distributed_straggler,
    "scheduler_backpressure": scheduler_backpressure,
}

# The evidence columns a terminal or UI table shows per playbook (the rows hold more).
DISPLAY_COLUMNS: dict[str, tuple[str, ...]] = {
    tail_latency.NAME: tail_latency.DISPLAY,
    gpu_utilization.NAME: gpu_utilization.DISPLAY,
    straggler.NAME: straggler.DISPLAY,
    backpressure.NAME: backpressure.DISPLAY,
}


def run_playbooks(
    home: Path, run_id: str, baseline_run_id: str | None = None, names: list[str] | None = None
) -> list[PlaybookResult]:
    """Run the named playbooks (all four by default) for one run, in order."""
    chosen = list(names) if names else list(PLAYBOOKS)
    unknown = [n for n in chosen if n not in PLAYBOOKS]
    if unknown:
        raise BenchrunError(f"unknown playbook(s) {', '.join(unknown)}; choose from {', '.join(PLAYBOOKS)}")
    check_runs(Path(home), run_id, baseline_run_id)
    results = []
    for name in chosen:
        res = PLAYBOOKS[name](Path(home), run_id, baseline_run_id)
        log.info("playbook %s for %s: %s (%s)", name, run_id, res.verdict, res.reason)
        results.append(res)
    return results


def playbooks_document(results: list[PlaybookResult], baseline_note: str = "") -> dict:
    """The JSON document of a set of results (``reports/<run_id>_playbooks.json``); ``baseline_note``
    says where the baseline came from, or why there is none (:func:`benchrun.playbooks.baseline.default_baseline`)."""
    first = results[0] if results else None
    return {
        "run_id": first.run_id if first else None,
        "baseline_run_id": first.baseline_run_id if first else None,
        "baseline_note": baseline_note or None,
        "verdicts": {r.name: r.verdict for r in results},
        "playbooks": [r.to_dict() for r in results],
    }


def write_playbooks_report(run_dir: Path, results: list[PlaybookResult], baseline_note: str = "") -> Path:
    """Write ``<run_dir>/reports/<run_id>_playbooks.json`` atomically; return its path."""
    from benchrun.fsio import atomic_write_json

    run_id = Path(run_dir).name
    return atomic_write_json(Path(run_dir) / "reports" / f"{run_id}_playbooks.json",
                             playbooks_document(results, baseline_note))


def record_straggler_nodes(run_dir: Path, results: list[PlaybookResult]) -> list[str]:
    """Write the straggler playbook's repeat-offender nodes to the run's status
    (``straggler_nodes``, the custom resource's ``status.stragglerNodes``); return them. A playbook
    that judged nothing (``unavailable``) records null, not an empty list: the report and the
    resource said "none" for a run whose ranks were never judged."""
    from benchrun.rundir import RunDir

    found = next((r for r in results if r.name == straggler.NAME), None)
    if found is None:
        return []
    nodes = straggler.straggler_nodes(found)
    run_dir = Path(run_dir)
    judged = found.verdict != "unavailable"
    RunDir(run_dir.parent.parent, run_dir.name).update_status(straggler_nodes=nodes if judged else None)
    return nodes


__all__ = [
    "DISPLAY_COLUMNS",
    "PLAYBOOKS",
    "VERDICTS",
    "PlaybookResult",
    "distributed_straggler",
    "in_warehouse",
    "low_gpu_utilization",
    "playbooks_document",
    "record_straggler_nodes",
    "run_playbooks",
    "scheduler_backpressure",
    "tail_latency_regression",
    "write_playbooks_report",
]
