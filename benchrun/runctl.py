"""Ending and removing runs by hand: ``benchrun cancel RUN_ID`` and ``benchrun delete RUN_ID``.

Cancel asks the process that executes the run to stop as Ctrl-C would (it then records phase
Canceled and keeps what finished); a run that nobody executes yet (submitted, or queued in
Dagster) is marked Canceled directly. Delete removes a finished run from the home (its
directory, warehouse partitions, hot metrics and Dagster partition) and never touches the
artifact store: the evidence is write-once and stays.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError
from benchrun.paths import benchrun_home, validate_run_id

log = logging.getLogger(__name__)

GRACE_S = 30.0  # how long a run gets to settle after SIGINT before SIGTERM


@dataclass
class CancelOutcome:
    run_id: str
    phase: str
    how: str


def _run_dir(home: Path, run_id: str) -> Any:
    from benchrun.rundir import RunDir

    rd = RunDir(home, validate_run_id(run_id))
    if not rd.exists():
        raise BenchrunError(f"no such run {run_id!r} under {home / 'runs'}; `benchrun runs` lists the runs")
    return rd


def _wait_terminal(rd: Any, timeout_s: float) -> str | None:
    from benchrun.rundir import TERMINAL_PHASES

    deadline = time.monotonic() + timeout_s
    while True:
        phase = rd.read_status().get("phase")
        if phase in TERMINAL_PHASES:
            return phase
        if time.monotonic() > deadline:
            return None
        time.sleep(0.2)


def _signal(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def cancel_run(run_id: str, *, home: Path | str | None = None, instance: Any = None,
               grace_s: float = GRACE_S) -> CancelOutcome:
    """Cancel ``run_id``: idempotent for a Canceled run, refused for another final phase."""
    from benchrun.liveness import alive, kill_orphaned_suites, liveness_path
    from benchrun.rundir import TERMINAL_PHASES, read_json_or_none
    from benchrun.runend import cancel_run
    from benchrun.sharedstate import pull_run

    root = benchrun_home(home)
    # another pod (the run's worker) may have moved it on since this home last read it: the shared
    # status first (no-op without BENCHRUN_SHARED_STATE; a pull that fails raises, nothing canceled)
    pull_run(validate_run_id(run_id), root, status_only=True)
    rd = _run_dir(root, run_id)
    phase = rd.read_status().get("phase")
    if phase == "Canceled":
        return CancelOutcome(run_id, phase, "already canceled")
    if phase in TERMINAL_PHASES:
        raise BenchrunError(f"run {run_id} already ended in phase {phase}; nothing to cancel "
                            f"(`benchrun delete {run_id}` removes it)")
    claim = read_json_or_none(liveness_path(root, run_id), fix="remove it")
    how = "not started: marked Canceled"
    dead_here = (isinstance(claim, dict) and claim.get("pid") and claim.get("host") == socket.gethostname()
                 and not alive(claim))
    if dead_here:
        how = _cancel_dead_claim(root, rd, run_id, claim, instance)
    elif isinstance(claim, dict) and claim.get("pid") and alive(claim):
        pid = int(claim["pid"])
        if claim.get("host") == socket.gethostname():
            # As Ctrl-C: the executing process records Canceled and keeps what finished.
            _report_canceling(instance, claim.get("dagster_run_id"), run_id)
            _signal(pid, signal.SIGINT)
            settled = _wait_terminal(rd, grace_s)
            how = f"interrupted its process (pid {pid})"
            if settled is None and _signal(pid, signal.SIGTERM):
                settled = _wait_terminal(rd, 10.0)
                how += ", then terminated it"
            if settled is None:
                killed = kill_orphaned_suites(rd.path)
                how += f"; it did not settle, marked Canceled here ({killed} suite process(es) killed)"
        else:
            how = f"its process runs on {claim.get('host')}: asked Dagster to terminate it"
            _terminate_dagster_run(instance, claim.get("dagster_run_id") or rd.read_status().get("dagster_run_id"),
                                   run_id)
    else:
        stopped = _cancel_dagster_runs(instance, run_id)
        if stopped and not rd.read_status().get("started_utc"):
            how = (f"not admitted yet: Dagster run(s) {', '.join(stopped)} were starting, asked Dagster to "
                   "terminate them; marked Canceled")
        elif stopped:
            how = (f"no live process of this host claims it: asked Dagster to terminate its Dagster run(s) "
                   f"{', '.join(stopped)}; marked Canceled")
    cancel_run(root, run_id, f"canceled by `benchrun cancel` ({how})")
    if dead_here:  # after the mark: until then the reaper would still find the dead process's claim
        liveness_path(root, run_id).unlink(missing_ok=True)
    phase = rd.read_status().get("phase")
    if phase != "Canceled":  # it ended (another pod, or its own process) before the mark: that phase stands
        how = f"it ended in phase {phase} before it could be marked: nothing canceled"
    return CancelOutcome(run_id, phase, how)


def _cancel_dead_claim(root: Path, rd: Any, run_id: str, claim: dict[str, Any], instance: Any) -> str:
    """A run claimed by a process of this host that is gone (kill -9) while its suites may still run:
    as the reaper does, its orphaned suite processes are killed and its Dagster run ended (CANCELED
    here, as asked: reported CANCELING first, then ended as the reaper ends a dead executor's run);
    the claim goes after the mark. Found in review: such a claim fell to the branch for runs no process
    had taken, which answered "not admitted yet", left the orphaned suite running and the claim in place."""
    from benchrun.liveness import _fail_dagster_run, gone_reason, kill_orphaned_suites

    killed = kill_orphaned_suites(rd.path)
    how = f"{gone_reason(run_id, claim)}; {killed} orphaned suite process(es) killed"
    stopped = _cancel_dagster_runs(instance, run_id)
    dagster_run_id = claim.get("dagster_run_id") or rd.read_status().get("dagster_run_id")
    if instance is not None and dagster_run_id:
        _report_canceling(instance, dagster_run_id, run_id)
        try:
            _fail_dagster_run(instance, dagster_run_id, f"benchrun cancel {run_id}: {how}")
        except Exception as exc:  # noqa: BLE001 - the run is still marked; the reaper ends the Dagster run
            log.warning("Dagster run %s not ended: %s", dagster_run_id, exc)
    if stopped:
        how += f"; asked Dagster to terminate its Dagster run(s) {', '.join(stopped)}"
    return how + "; marked Canceled"


def _report_canceling(instance: Any, dagster_run_id: str | None, run_id: str) -> None:
    """Mark the claim's Dagster run CANCELING before its process is interrupted. Found in review: the
    SIGINT alone reached a daemon-launched run worker as an unexplained interrupt, so Dagster ended the
    run FAILURE ("interrupted unexpectedly") and ``run_failure_sensor`` could mark the run Failed before
    this cancel's own mark (which then said "nothing canceled"); interrupted while CANCELING, Dagster
    ends it CANCELED and ``run_canceled_sensor`` agrees with the cancel."""
    if instance is None or not dagster_run_id:
        return
    import dagster as dg

    try:
        run = instance.get_run_by_id(dagster_run_id)
        if run is not None and not run.is_finished and run.status != dg.DagsterRunStatus.CANCELING:
            instance.report_run_canceling(run, message=f"benchrun cancel {run_id}: interrupting its process")
    except Exception as exc:  # noqa: BLE001 - the interrupt still goes; the run then ends as before
        log.warning("Dagster run %s not marked canceling: %s", dagster_run_id, exc)


def _terminate_dagster_run(instance: Any, dagster_run_id: str | None, run_id: str) -> None:
    """Ask the run launcher to terminate the Dagster run; then, if its executor is gone, end it
    CANCELED here (``liveness.settle_dead_canceling``). Found in review: for a run ``benchrun run``
    executed in its own process (no gRPC server to ask) the launcher reports CANCELING and returns
    False, and with that process dead (kill -9) nothing ever ended the run: CANCELING for ever, its
    ``duckdb_writer`` pool slot held (later runs' warehouse steps waited for good) and, with a
    daemon, counted toward the run queue's limit. Settled whatever terminate answered: a dead
    executor ends nothing itself."""
    if instance is None or not dagster_run_id:
        return
    from benchrun.liveness import settle_dead_canceling

    try:
        if not instance.run_launcher.terminate(dagster_run_id):
            log.warning("Dagster could not terminate run %s", dagster_run_id)
    except Exception as exc:  # noqa: BLE001 - the status is still settled; say why the worker was not stopped
        log.warning("Dagster run %s not terminated: %s", dagster_run_id, exc)
    try:
        settle_dead_canceling(instance, dagster_run_id, f"benchrun cancel {run_id}: its process is gone, "
                                                        "nothing else would end the run")
    except Exception as exc:  # noqa: BLE001 - the next CLI start's reaper mends it (_reap_tagged_dagster_runs)
        log.warning("Dagster run %s left canceling: %s", dagster_run_id, exc)


def _cancel_dagster_runs(instance: Any, run_id: str) -> list[str]:
    """Cancel the partition's Dagster runs that no process claims yet: a queued or not-started
    one where it waits; a starting or started one (its worker is coming up, the run not admitted)
    is terminated through the run launcher. Returns the ids of those asked to terminate (a worker
    that comes up all the same is refused by ``lifecycle.admit``: the run is Canceled)."""
    if instance is None:
        return []
    import dagster as dg

    from benchrun.liveness import PARTITION_TAG

    runs = instance.get_runs(filters=dg.RunsFilter(
        tags={PARTITION_TAG: run_id},
        statuses=[dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
                  dg.DagsterRunStatus.STARTED]))
    stopped = []
    for run in runs:
        if run.status in (dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED):
            instance.report_run_canceled(run, message=f"benchrun cancel {run_id}")
        else:
            _terminate_dagster_run(instance, run.run_id, run_id)
            stopped.append(run.run_id)
    return stopped


DELETING = ".deleting-"  # a run directory being removed (benchrun delete): not a run, and not listed


@dataclass
class DeleteOutcome:
    run_id: str
    removed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)


def published_aliases(root: Path, run_id: str) -> list[str]:
    """The ``published/<alias>`` files that point at ``run_id``."""
    from benchrun.paths import published_runs

    return published_runs(root).get(run_id, [])


FIGURES_WAIT_S = 60.0  # how long delete waits for the run's report figure worker before refusing


def _refuse_while_finishing(root: Path, run_id: str, instance: Any, figures_wait_s: float) -> None:
    """Refuse to delete a run something still writes: a live process claiming it, a Dagster run of it
    in progress (``run_status`` finishes the run after its phase is final: report, warehouse rows,
    signature, push), its report figure worker (waited for up to ``figures_wait_s`` first). Deleted
    under them, their writes made the run directory again, and `runs` listed a run only its
    status.json was left of."""
    from benchrun.liveness import describe, live_claim
    from benchrun.report.worker import wait_for_run

    claim = live_claim(root, run_id)
    if claim is not None:
        raise BenchrunError(f"run {run_id} is still claimed by its process ({describe(claim)}): wait for it to "
                            f"end, or cancel it (`benchrun cancel {run_id}`), then delete it")
    busy = _live_dagster_runs(instance, run_id, skip_dead_executors=True)
    if busy:
        raise BenchrunError(f"run {run_id}: Dagster run(s) {', '.join(busy)} of it are still in progress (finishing "
                            "the run: its report, warehouse rows and signature); wait for them to end, then delete it")
    wait_for_run(root, run_id, timeout_s=figures_wait_s)


def _live_dagster_runs(instance: Any, run_id: str, *, skip_dead_executors: bool = False) -> list[str]:
    """The partition's Dagster runs queued or in progress; ``skip_dead_executors``: not those a CLI
    process executed that is gone (in progress only until the reaper fails them)."""
    if instance is None:
        return []
    import dagster as dg

    from benchrun.liveness import PARTITION_TAG, alive, executor_of

    def dead(tags: Any) -> bool:
        record = executor_of(tags)
        return skip_dead_executors and record is not None and not alive(record)

    return [r.run_id for r in instance.get_runs(filters=dg.RunsFilter(tags={PARTITION_TAG: run_id}, statuses=[
        dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
        dg.DagsterRunStatus.STARTED]), limit=5) if not dead(r.tags)]


def delete_run(run_id: str, *, home: Path | str | None = None, instance: Any = None,
               figures_wait_s: float = FIGURES_WAIT_S) -> DeleteOutcome:
    """Remove a finished run from the home; refuse a published baseline or a run something still
    writes (a live process, its Dagster run, its figure worker after ``figures_wait_s``)."""
    from benchrun.hotmetrics import default_textfile
    from benchrun.liveness import liveness_path
    from benchrun.rundir import TERMINAL_PHASES
    from benchrun.warehouse.removed import record_deleted
    from benchrun.warehouse.schemas import TABLES
    from benchrun.warehouse.views import refresh_views
    from benchrun.warehouse.writer import partition_dir, remove_partition

    from benchrun.sharedstate import push_paths

    root = benchrun_home(home)
    _read_shared(root, validate_run_id(run_id))
    leftover = root / "runs" / f"{DELETING}{run_id}"
    if leftover.is_dir() and not (root / "runs" / run_id).exists():  # a delete cut short at its last step
        shutil.rmtree(leftover)
        return DeleteOutcome(run_id, removed=[f"what an earlier delete left of runs/{run_id} "
                                              f"({leftover.relative_to(root)})", *_shared_left(root, run_id)])
    from benchrun.rundir import RunDir
    from benchrun.warehouse.removed import tombstone_path

    left = RunDir(root, run_id)
    if not left.exists() and left.path.is_dir() and tombstone_path(root, run_id).exists():
        # files a step of the run wrote after an earlier delete of it (no status.json: not a run)
        _refuse_while_finishing(root, run_id, instance, figures_wait_s)
        _remove_dir(left)
        return DeleteOutcome(run_id, removed=[f"what the run wrote after an earlier delete (runs/{run_id})",
                                              *_shared_left(root, run_id)])
    if not left.path.is_dir() and tombstone_path(root, run_id).exists():
        shared = _shared_left(root, run_id)  # an earlier delete (here or in another home) cut short after the
        if shared:                           # shared status went
            return DeleteOutcome(run_id, removed=shared)
    rd = _run_dir(root, run_id)
    _refuse_baseline(root, run_id)
    sealed: bool | None = None  # whether the run stored its evidence (None: its status does not read)
    try:
        status = rd.read_status()
        phase = status.get("phase")
        sealed = bool(status.get("artifact_manifest_digest")) or (rd.path / "manifest.json").exists()
    except BenchrunError as exc:
        # a damaged status.json (its error says "delete the run"): deletable unless a live process
        # still claims the run (its heartbeat)
        from benchrun.liveness import live_claim

        if live_claim(root, run_id) is not None:
            raise BenchrunError(f"{exc}; a live process still claims the run ({liveness_path(root, run_id)}): "
                                "cancel it first") from None
        phase = "damaged"
    # no phase: a status.json nothing of benchrun made a run with (submit writes Pending); deletable
    if phase not in (*TERMINAL_PHASES, "damaged", None):
        _refuse_live(run_id, phase)
    _refuse_while_finishing(root, run_id, instance, figures_wait_s)
    out = DeleteOutcome(run_id)
    # before anything goes: rebuild-warehouse never writes the run back, even if this stops half-way
    from benchrun.warehouse.retention import age_record

    tombstone = record_deleted(root, run_id, retention=age_record(root, run_id))
    push_paths(root, tombstone.relative_to(root).as_posix())  # every pod's history and rebuild skip it from now
    tables = [t for t in TABLES if partition_dir(root, t, run_id).exists()]
    for table in tables:
        remove_partition(root, table, run_id)
    if tables:
        out.removed.append(f"warehouse partitions of {len(tables)} table(s): {', '.join(tables)}")
    from benchrun.stats.cpfact import FACT_RELPATH, drop_run

    breaks = drop_run(root, run_id)
    if breaks:
        push_paths(root, FACT_RELPATH)
        out.removed.append(f"{breaks} change point(s) of change_point_fact that start at the run")
    held = _delete_iceberg_rows(root, run_id)
    if held:
        out.removed.append(f"its rows of {len(held)} Iceberg table(s): {', '.join(held)} (one commit each; "
                           "earlier snapshots keep them until they expire)")
    if tables or held or breaks:
        refresh_views(root)
    for extra in (default_textfile(run_id, root), liveness_path(root, run_id)):
        if extra.exists():
            extra.unlink()
            out.removed.append(str(extra.relative_to(root)))
    _delete_pushed(run_id, out)
    if instance is not None:
        from benchrun.submit import PARTITIONS_NAME

        if instance.has_dynamic_partition(PARTITIONS_NAME, run_id):
            instance.delete_dynamic_partition(PARTITIONS_NAME, run_id)
            out.removed.append(f"Dagster partition {PARTITIONS_NAME}/{run_id} (its Dagster run history stays)")
    out.removed += _shared_left(root, run_id)
    # The directory last: until here a failed step leaves the run listed, so deleting again finishes it.
    # Renamed first (one atomic step), then removed: a crash inside the removal, which took status.json
    # early, left a directory no command could name ("no such run"); deleting again finishes it now.
    _remove_dir(rd)
    out.removed.insert(0, f"run directory runs/{run_id}")
    if sealed is False:
        out.kept.append("nothing in the artifact store: the run never sealed its evidence")
    else:
        out.kept.append("its evidence in the artifact store (write-once; `benchrun retention` ages it out by the "
                        "retention the run had, kept in the record below)")
    out.kept.append(f"a record of the deletion, {tombstone.relative_to(root)}: `benchrun rebuild-warehouse` "
                    "does not write the run back from that evidence")
    return out


def _refuse_live(run_id: str, phase: Any) -> None:
    raise BenchrunError(f"run {run_id} is {phase}; cancel it first (`benchrun cancel {run_id}`)")


def _refuse_baseline(root: Path, run_id: str) -> None:
    aliases = published_aliases(root, run_id)
    if aliases:
        names = ", ".join(f"published/{a}" for a in aliases)
        raise BenchrunError(f"run {run_id} is the baseline {names}; promote another run to it first "
                            f"(`benchrun promote OTHER_RUN --alias {aliases[0]}`), then delete this one")


def _read_shared(root: Path, run_id: str) -> None:
    """With shared state, before delete decides anything: the run's tombstone (another home's delete of it,
    which this one then finishes, keeping the retention it recorded) and the ``published/`` aliases; a
    shared baseline, or a run another pod still runs (read without writing here: a copy of a live run left
    behind would be reaped as Failed), is refused; then the run's shared status, so a finished run only the
    shared state holds is deleted from any home. A pull that fails raises, and nothing is deleted."""
    from benchrun.rundir import TERMINAL_PHASES
    from benchrun.sharedstate import pull_paths, pull_run, shared_state
    from benchrun.warehouse.removed import tombstone_path

    shared = shared_state()
    if shared is None:
        return
    pull_paths(root, tombstone_path(root, run_id).relative_to(root).as_posix(), "published/")
    _refuse_baseline(root, run_id)
    try:
        held = shared.read_status(run_id)
    except ValueError:  # not JSON there: pulled, and judged as a damaged status here is
        held = None
    phase = held.get("phase") if isinstance(held, dict) else None
    if phase is not None and phase not in TERMINAL_PHASES:
        _refuse_live(run_id, phase)
    pull_run(run_id, root, status_only=True)


def _shared_left(root: Path, run_id: str) -> list[str]:
    """With shared state: the run's copy in the shared prefix removed, its status.json first (a pod reading
    the shared runs then no longer takes the rest for a run), and its partitions of the parquet layout; what
    went, said ([]: no shared state, or nothing there). Before, delete left the shared copy: history_job's
    pods read the run into every later change-point pass (found in review)."""
    from benchrun.sharedstate import shared_state
    from benchrun.stats.cpindex import index_key
    from benchrun.warehouse import lake
    from benchrun.warehouse.schemas import TABLES

    shared = shared_state()
    if shared is None:
        return []
    top = f"runs/{run_id}/"
    try:  # its workload index key (cpindex) goes first: read from the status that names its workload
        key = index_key(shared.read_status(run_id))
    except ValueError:  # not JSON: never indexed
        key = None
    gone = (shared.prune(key, set()) if key else []) + shared.prune(f"{top}status.json", set())
    gone += shared.prune(top, set())
    for table in () if lake.enabled() else TABLES:
        gone += shared.prune(f"warehouse/{table}/run_id={run_id}/", set())
    return [f"its shared copy: {len(gone)} object(s) under {shared.uri}"] if gone else []


def _remove_dir(rd: Any) -> None:
    """Rename the run directory aside (one atomic step, under the run's status lock: a status write in
    progress ends first, and one after it finds no run and makes none), then remove it."""
    gone = rd.path.with_name(f"{DELETING}{rd.run_id}")
    if gone.exists():
        shutil.rmtree(gone)
    with rd.status_lock():
        os.replace(rd.path, gone)
    shutil.rmtree(gone)
    rd.status_lock_path.unlink(missing_ok=True)


def _delete_pushed(run_id: str, out: DeleteOutcome) -> None:
    """With ``BENCHRUN_PUSHGATEWAY_URL`` set, delete the run's hot-metrics groups there (left,
    they count against later runs' budget); an unreachable gateway keeps them, said so."""
    from benchrun.hotmetrics import PUSHGATEWAY_ENV, delete_groups, group_url

    url = os.environ.get(PUSHGATEWAY_ENV) or None
    if url is None:
        return
    try:
        deleted = delete_groups(url, run_id)
    except BenchrunError as exc:
        out.kept.append(f"its hot metrics on the Pushgateway, not deleted: {exc}; delete them there when it is "
                        f"back (`curl -X DELETE {group_url(url, run_id)}`)")
        return
    out.removed.extend(f"Pushgateway group {u}" for u in deleted)


def _delete_iceberg_rows(root: Path, run_id: str) -> list[str]:
    """With the Iceberg warehouse on: delete the run's rows from every table (before its status goes: it
    names the run's start, the day to look in); the tables whose snapshot that changed."""
    import warnings

    from benchrun.warehouse import lake

    if not lake.enabled() or not lake.catalog_exists(root):
        return []
    before = {t: snap for t, (_, snap) in lake.current_tables(root).items() if snap is not None}
    with warnings.catch_warnings():  # "did not match any records": a table the run has no rows in
        warnings.simplefilter("ignore", UserWarning)
        for table in before:
            lake.delete_run(root, table, run_id)
    after = lake.current_tables(root)
    return sorted(t for t, snap in before.items() if after.get(t, ("", snap))[1] != snap)


PENDING_TIMEOUT_ENV = "BENCHRUN_PENDING_TIMEOUT_S"
PENDING_TIMEOUT_S = 24 * 3600.0  # a submitted run that nobody started within a day is abandoned


def pending_timeout_s() -> float:
    raw = os.environ.get(PENDING_TIMEOUT_ENV)
    if raw is None or raw == "":
        return PENDING_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        raise BenchrunError(f"{PENDING_TIMEOUT_ENV}={raw!r}: not a number of seconds (default "
                            f"{PENDING_TIMEOUT_S:g})") from None
    if value <= 0:
        raise BenchrunError(f"{PENDING_TIMEOUT_ENV}={raw!r}: must be > 0 seconds")
    return value


def expire_pending(home: Path | str | None = None, instance: Any = None, *,
                   now: float | None = None, timeout_s: float | None = None) -> list[tuple[str, str]]:
    """Mark Failed every run still Pending past the deadline with nothing to start it: no
    process claims it and (with an instance) no Dagster run is queued or running for it.
    Returns (run_id, reason) per run marked."""
    import datetime as dt

    from benchrun.liveness import liveness_path
    from benchrun.rundir import list_runs
    from benchrun.runend import fail_run

    root = benchrun_home(home)
    limit = pending_timeout_s() if timeout_s is None else timeout_s
    now = time.time() if now is None else now
    out = []
    for rd in list_runs(root):
        try:
            st = rd.read_status()
        except BenchrunError:
            continue
        if st.get("phase") != "Pending" or liveness_path(root, rd.run_id).exists():
            continue
        try:
            created = dt.datetime.fromisoformat(str(st.get("created_utc")).replace("Z", "+00:00")).timestamp()
        except ValueError:
            continue
        if now - created <= limit or _has_live_dagster_run(instance, rd.run_id):
            continue
        reason = (f"submitted {st.get('created_utc')} and never started within {limit:g} s "
                  f"({PENDING_TIMEOUT_ENV}); nothing ran, submit the spec again")
        if fail_run(root, rd.run_id, reason):
            out.append((rd.run_id, reason))
    return out


def _has_live_dagster_run(instance: Any, run_id: str) -> bool:
    return bool(_live_dagster_runs(instance, run_id))
