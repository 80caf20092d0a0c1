"""A run ended outside its own ``run_status`` asset (its process killed, Ctrl-C, ``benchrun cancel``,
a failure sensor, a deleted BenchmarkRun): its phase in status.json and, in the same call, the
warehouse facts that read it (``benchrun.warehouse.curate.curate_final_status``: a run curated
while Analyzing would otherwise read ``Analyzing | succeeded`` until a rebuild). With shared state
a home that holds only the run's status (or files behind it) curates from what those facts read of the
shared copy, pulled into a scratch folder, never into the home; parquet partitions curated here are
pushed back to the shared prefix.

Here rather than in :mod:`benchrun.rundir`, which the warehouse itself reads.
"""

from __future__ import annotations

import logging
import tempfile
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchrun.sharedstate import SharedState

log = logging.getLogger(__name__)


def fail_run(home: Path | str | None, run_id: str, reason: str, *, over_succeeded: bool = False) -> bool:
    """:func:`benchrun.rundir.mark_run_failed`, then the run's final-status facts and hot metrics;
    True when it changed."""
    from benchrun.rundir import mark_run_failed

    return _facts_follow(home, run_id, mark_run_failed(home, run_id, reason, over_succeeded=over_succeeded))


def cancel_run(home: Path | str | None, run_id: str, reason: str) -> bool:
    """:func:`benchrun.rundir.mark_run_canceled`, then the run's final-status facts and hot metrics; True
    when it changed."""
    from benchrun.rundir import mark_run_canceled

    return _facts_follow(home, run_id, mark_run_canceled(home, run_id, reason))


def _facts_follow(home: Path | str | None, run_id: str, changed: bool) -> bool:
    if changed:
        from benchrun.hotpublish import publish_again
        from benchrun.paths import benchrun_home
        from benchrun.rundir import RunDir

        root = benchrun_home(home)
        if _curate(root, run_id):
            _push_facts(root, run_id)
        publish_again(RunDir.for_run(run_id, root))  # the phase gauge says the end too
    return changed


def _curate(home: Path, run_id: str) -> bool:
    """The run's final-status facts, curated into ``home``'s warehouse; True when curated. From the home's
    own run directory where it holds the sealed run (no shared state, or its files are not behind), else
    (``benchrun cancel``, the controller and the failure sensors pull only status.json) from what
    :func:`_pull_sources` brings of the shared copy into a scratch folder: before, the whole run was pulled
    into the home (its requests and logs, hundreds of MB, on a sensor tick that can be killed half-way and
    leave the copy there), and a home whose files were behind curated them under the new status (found in
    review). Nothing where the shared prefix holds no manifest.json (never sealed, so never curated). A pull
    that fails leaves the phase recorded and shared all the same; the facts follow at the next rebuild."""
    from benchrun.sharedstate import files_behind, shared_state
    from benchrun.warehouse.curate import curate_final_status

    try:
        shared, manifest = shared_state(), f"runs/{run_id}/manifest.json"
        if shared is None or ((home / manifest).is_file() and not files_behind(home, run_id)):
            return curate_final_status(home, run_id)
        if manifest not in shared.list_keys(manifest):
            if (home / manifest).is_file():
                log.info("run %s: its files here are behind its status and the shared state holds it unsealed: "
                         "its warehouse facts are left to the pod that seals it", run_id)
            return False
        with tempfile.TemporaryDirectory(prefix="benchrun-final-status-") as scratch:
            run_dir = _pull_sources(shared, Path(scratch), home, run_id)
            return curate_final_status(home, run_id, run_dir=run_dir)  # (its failure is logged there)
    except Exception as exc:  # noqa: BLE001 - the phase is what matters; the warehouse can be rebuilt
        log.warning("run %s ended as recorded, but its files did not come from the shared state (%s): its "
                    "warehouse facts still read its earlier phase until `benchrun rebuild-warehouse %s`",
                    run_id, exc, run_id)
        return False


def _pull_sources(shared: SharedState, scratch: Path, home: Path, run_id: str) -> Path:
    """Into ``scratch``, laid out as a home, what curating FINAL_STATUS_TABLES reads of the shared run
    (:func:`_final_status_source`), with ``home``'s own status.json (the phase just marked) over the shared
    one; the run directory there. ``home``'s run directory is left as it was (its files-behind mark too)."""
    from benchrun.fsio import atomic_write_bytes

    top = f"runs/{run_id}/"
    shared.pull_tree(scratch, top, only=lambda rel: _final_status_source(run_id, rel[len(top):]))
    run_dir = scratch / "runs" / run_id
    atomic_write_bytes(run_dir / "status.json", (home / "runs" / run_id / "status.json").read_bytes())
    return run_dir


def _final_status_source(run_id: str, rel: str) -> bool:
    """Whether ``rel`` (in the run directory) is read to curate FINAL_STATUS_TABLES: status.json,
    manifest.json (curated only once sealed), the structured documents ``load_sources`` reads (environment,
    pinned spec, launches, suite results) and the replicates' telemetry samples (``sample_files``); not the
    requests files, logs, the dataset's copy, figures, reports or attempts."""
    from benchrun.telemetry.samples import parse_telemetry_name

    folder, _, name = rel.rpartition("/")
    if not folder:
        return name in ("status.json", "manifest.json")
    if folder == "structured":
        fixed = {f"{run_id}_{n}" for n in ("environment.json", "spec.yaml", "launches.json")}
        return name in fixed or fnmatchcase(name, f"{run_id}_*_r*.json")
    parsed = parse_telemetry_name(name) if folder == "raw" else None
    return parsed is not None and parsed[0] == run_id


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
