"""The history change points are detected over (:mod:`benchrun.stats.changepoint` re-exports these):
per run × metric the median over its replicates, gathered from the run directories of this home or,
with shared state, from the runs every pod pushed there (:func:`gather_history`).

On Kubernetes ``history_job`` runs in a fresh run-worker pod whose home is empty: it read no run,
reported ``runs: 0`` and no change point every night. With ``BENCHRUN_SHARED_STATE`` set the history
is read from the shared prefix instead, through a scratch folder that holds only what
:func:`run_medians` reads of each run (its status, environment capture, pinned spec copy, launch
record and suite result documents; never ``raw/``), so the series and medians are exactly those
:func:`history_table` gives over the same run directories.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from benchrun.errors import BenchrunError
from benchrun.fsio import atomic_write_bytes
from benchrun.paths import parse_result_name
from benchrun.stats.gate import categorize, identity
from benchrun.stats.load import RunInfo, delta_pct, load_run, replicate_table, suite_results

if TYPE_CHECKING:
    import pandas as pd

    from benchrun.sharedstate import SharedState

log = logging.getLogger(__name__)


def hardware_key(environment: dict[str, Any]) -> str:
    """``hardware_key`` from the environment capture, else a digest of its hardware fields."""
    if environment.get("hardware_key"):
        return str(environment["hardware_key"])
    ident = identity(RunInfo("x", Path("."), {}, environment, {}))
    hw = {k: v for k, v in ident.items() if categorize(k) == "hardware"}
    return hashlib.sha256(json.dumps(hw, sort_keys=True, default=str).encode()).hexdigest()[:16]


def history_table(home: Path, *, cadences: Sequence[str] | None = ("nightly",),
                  workload: str | None = None) -> "pd.DataFrame":
    """Per run × metric: the median over replicates, with the series keys, its unit and run time.

    Only Succeeded runs with a workload digest (``workload``: that one); ``cadences`` limits the history
    (None = all).
    A run whose files cannot be read is skipped with a warning.
    """
    import pandas as pd

    frames = []
    runs_dir = Path(home) / "runs"
    for rd in sorted(p for p in runs_dir.glob("*") if (p / "status.json").is_file()):
        try:
            run = load_run(rd)
            if not _kept(run.status, cadences, workload):
                continue
            g = run_medians(run)
        except BenchrunError as exc:  # one damaged run must not hide the whole history
            log.warning("history: skipping run %s: %s", rd.name, exc)
            continue
        if not g.empty:
            frames.append(g)
    if not frames:
        return pd.DataFrame(columns=HISTORY_COLUMNS)
    return pd.concat(frames, ignore_index=True).sort_values(["created_utc", "run_id"], kind="stable")


HISTORY_COLUMNS = ["run_id", "created_utc", "workload_spec_digest", "hardware_key", "suite", "case", "metric",
                   "direction", "unit", "median", "n", "artifact_manifest_digest", "floor_pct"]


def run_medians(run: RunInfo) -> "pd.DataFrame":
    """One run's rows of :func:`history_table` (whatever its phase): per suite × case × metric the
    median over its ok replicates, leaving out the replicates whose suite judged its own measurement
    invalid (:func:`benchrun.stats.validity.drop_invalid`: membw's cache figure is not memory bandwidth,
    and a series that mixed them would start or hide change points; logged), and the rows of the serving
    points the load generator judged invalid beyond their request count (errors, a saturated client:
    :func:`benchrun.stats.validity.invalid_point_rows`), that replicate's other points kept."""
    import pandas as pd

    from benchrun.stats.validity import drop_invalid, invalid_point_rows, invalid_replicates

    docs = suite_results(run.path)  # read once for all
    t = replicate_table(run.path, docs=docs)
    invalid, points = invalid_replicates(run.path, docs), invalid_point_rows(docs)
    if invalid or points:
        log.info("history: run %s: left out the replicates and points its suites judged invalid: %s", run.run_id,
                 "; ".join([*(f"{s} {sorted(e['replicates'], key=str)}" for s, e in sorted(invalid.items())),
                            *(f"{s} r{k} [{c}]" for s, k, c in sorted(points))]))
        t = drop_invalid(t, invalid, points)
    if t.empty:
        return pd.DataFrame(columns=HISTORY_COLUMNS)
    st = run.status
    g = t.groupby(["suite", "case", "metric", "direction"], as_index=False).agg(
        unit=("unit", "first"), median=("value", "median"), n=("value", "size"))
    g["floor_pct"] = [delta_pct(run.spec, m) for m in g["metric"]]  # the spec's δ: the change-point floor
    g["run_id"] = run.run_id
    g["created_utc"] = st.get("created_utc") or ""
    g["workload_spec_digest"] = st.get("workload_spec_digest")
    g["hardware_key"] = hardware_key(run.environment)
    g["artifact_manifest_digest"] = st.get("artifact_manifest_digest")
    return g[HISTORY_COLUMNS]


def _kept(status: Any, cadences: Sequence[str] | None, workload: str | None = None) -> bool:
    """Whether a run with this status.json belongs in the history: Succeeded, with a workload digest
    (``workload``, where given), of ``cadences`` (None: any)."""
    if not isinstance(status, dict) or status.get("phase") != "Succeeded" or not status.get("workload_spec_digest"):
        return False
    if workload is not None and status.get("workload_spec_digest") != workload:
        return False
    return cadences is None or status.get("cadence") in cadences


def gather_history(home: Path, *, cadences: Sequence[str] | None = ("nightly",),
                   workload: str | None = None) -> "pd.DataFrame":
    """:func:`history_table` over every run: with shared state the runs its prefix holds (read through a
    scratch folder, :func:`pull_history`), else the runs of ``home`` (the embedded default, unchanged)."""
    from benchrun.sharedstate import shared_state

    shared = shared_state()
    if shared is None:
        return history_table(home, cadences=cadences, workload=workload)
    with tempfile.TemporaryDirectory(prefix="benchrun-history-") as scratch:
        pull_history(shared, Path(scratch), cadences=cadences, workload=workload)
        return history_table(Path(scratch), cadences=cadences, workload=workload)


def _history_file(run_id: str, name: str) -> bool:
    """Whether ``structured/<name>`` is read by :func:`run_medians`: the environment capture, the pinned
    spec's copy, the launch record and the suite result documents (load_run's manifest.json is not used)."""
    wanted = (f"{run_id}_environment.json", f"{run_id}_spec.yaml", f"{run_id}_launches.json")
    return "/" not in name and (name in wanted or parse_result_name(name, run_id) is not None)


def pull_history(shared: "SharedState", dest: Path, *, cadences: Sequence[str] | None = ("nightly",),
                 workload: str | None = None, workers: int = 16) -> list[str]:
    """Into ``dest``, a scratch folder laid out as a home, what :func:`history_table` reads of each run the
    shared prefix holds and the history keeps (:func:`_kept`, judged on its shared status.json first): the
    files of :func:`_history_file`, then its status.json. Never a working home: it holds no run whole (no
    ``raw/``, no manifest), and a later step there would take such a copy for the run. A status that does
    not read is skipped with a warning, as :func:`history_table` skips one; an S3 failure raises. The
    home-relative paths written. A run ``benchrun delete`` removed (its tombstone, shared and pulled here) is
    left out, whatever of it a pod that ended late pushed again, by the rule ``rebuild-warehouse`` applies
    (a run created after the tombstone is a new run under the same id). With ``workload``, only the runs the
    shared workload index names once it is complete (:mod:`benchrun.stats.cpindex`); a pass that read every
    run's status heals that index."""
    from benchrun.stats.cpindex import heal, indexed
    from benchrun.warehouse.removed import DELETED_DIR, DIR_NAME, deleted_runs, deletion
    from benchrun.warehouse.sources import parse_ts

    shared.pull_tree(dest, f"{DIR_NAME}/{DELETED_DIR}/")
    deleted = deleted_runs(dest)
    # one workload's: the runs its index names, once a full pass made it complete (cpindex); else every run
    candidates = indexed(shared, workload) if workload else None
    runs = shared.list_runs() if candidates is None else candidates
    statuses: dict[str, Any] = {}

    def one(run_id: str) -> None:
        try:
            status = statuses[run_id] = shared.read_status(run_id)
        except ValueError as exc:  # not JSON: one damaged run must not hide the whole history
            log.warning("history: skipping run %s: its shared status.json does not read (%s)", run_id, exc)
            return
        if not _kept(status, cadences, workload) or deletion(deleted, run_id, parse_ts(status.get("created_utc"))):
            return
        top = f"runs/{run_id}/structured/"
        shared.pull_tree(dest, top, only=lambda rel: _history_file(run_id, rel[len(top):]))
        atomic_write_bytes(dest / "runs" / run_id / "status.json", json.dumps(status).encode("utf-8"))

    if runs:
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(runs)))) as pool:
            list(pool.map(one, runs))  # (the first error, if any, raised here)
    if candidates is None:  # every run's status read: the index's missing keys, and it is complete
        heal(shared, statuses)
    return sorted(p.relative_to(dest).as_posix() for p in Path(dest).rglob("*") if p.is_file())
