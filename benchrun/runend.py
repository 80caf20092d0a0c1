"""A run ended outside its own ``run_status`` asset (its process killed, Ctrl-C, ``benchrun cancel``,
a failure sensor, a deleted BenchmarkRun): its phase in status.json and, in the same call, the
warehouse facts that read it (``benchrun.warehouse.curate.curate_final_status``: a run curated
while Analyzing would otherwise read ``Analyzing | succeeded`` until a rebuild). With shared state
the run's files are pulled first into a home that holds only its status, and parquet partitions
curated here are pushed back to the shared prefix.

Here rather than in :mod:`benchrun.rundir`, which the warehouse itself reads.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)


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

        root = benchrun_home(home)
        if _pull_files(root, run_id) and curate_final_status(root, run_id):
            _push_facts(root, run_id)
    return changed


def _pull_files(home: Path, run_id: str) -> bool:
    """With shared state, the whole run into a home that lacks its files (``benchrun cancel``, the
    controller and the failure sensors pull only status.json): its facts are curated from them. Before,
    ``curate_final_status`` found no manifest.json there and curated nothing, and the shared warehouse kept
    the ``Analyzing`` the worker wrote before it was stopped (found in review). False when the pull
    failed: the phase is recorded and shared all the same; the facts follow at the next rebuild."""
    from benchrun.sharedstate import files_behind, pull_run, shared_state

    try:
        shared, manifest = shared_state(), f"runs/{run_id}/manifest.json"
        if shared is None or ((home / manifest).is_file() and not files_behind(home, run_id)):
            return True
        if manifest not in shared.list_keys(manifest):
            return True  # never sealed, so never curated: no facts to follow (and no files pulled for nothing)
        pull_run(run_id, home)
        return True
    except Exception as exc:  # noqa: BLE001 - the phase is what matters; the warehouse can be rebuilt
        log.warning("run %s ended as recorded, but its files did not come from the shared state (%s): its "
                    "warehouse facts still read its earlier phase until `benchrun rebuild-warehouse %s`",
                    run_id, exc, run_id)
        return False


def _push_facts(home: Path, run_id: str) -> None:
    """The parquet layout with shared state: the partitions just curated to the shared prefix, where
    every pod reads them (the Iceberg tables are committed to the shared catalog as they are written)."""
    from benchrun.sharedstate import push_paths, shared_state
    from benchrun.warehouse import lake
    from benchrun.warehouse.curate import FINAL_STATUS_TABLES

    try:
        if shared_state() is None or lake.enabled():
            return
        push_paths(home, *(f"warehouse/{table}/run_id={run_id}/" for table in FINAL_STATUS_TABLES))
    except Exception as exc:  # noqa: BLE001 - as above
        log.warning("run %s ended as recorded, but its warehouse facts curated here did not reach the shared "
                    "state (%s): other pods read its earlier phase until `benchrun rebuild-warehouse %s`",
                    run_id, exc, run_id)
