"""A run ended outside its own ``run_status`` asset (its process killed, Ctrl-C, ``benchrun cancel``,
a failure sensor, a deleted BenchmarkRun): its phase in status.json and, in the same call, the
warehouse facts that read it (``benchrun.warehouse.curate.curate_final_status``: a run curated
while Analyzing would otherwise read ``Analyzing | succeeded`` until a rebuild).

Here rather than in :mod:`benchrun.rundir`, which the warehouse itself reads.
"""

from __future__ import annotations

from pathlib import Path


def fail_run(home: Path | str | None, run_id: str, reason: str) -> bool:
    """:func:`benchrun.rundir.mark_run_failed`, then the run's final-status facts; True when it changed."""
    from benchrun.rundir import mark_run_failed

    return _facts_follow(home, run_id, mark_run_failed(home, run_id, reason))


def cancel_run(home: Path | str | None, run_id: str, reason: str) -> bool:
    """:func:`benchrun.rundir.mark_run_canceled`, then the run's final-status facts; True when it changed."""
    from benchrun.rundir import mark_run_canceled

    return _facts_follow(home, run_id, mark_run_canceled(home, run_id, reason))


def _facts_follow(home: Path | str | None, run_id: str, changed: bool) -> bool:
    if changed:
        from benchrun.paths import benchrun_home
        from benchrun.warehouse.curate import curate_final_status

        curate_final_status(benchrun_home(home), run_id)
    return changed
