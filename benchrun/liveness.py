"""Run liveness: which process executes a run, whether it is still alive, and failing the runs
whose process died (status.json Failed with the reason, and their Dagster run failed so it no
longer holds the one-benchmark-at-a-time queue).

A run's executor writes ``<home>/liveness/<run_id>.json`` (host, pid, the pid's start time,
a heartbeat refreshed every ``HEARTBEAT_S``). On the same host a run is alive while that pid
exists with that start time (a pid reused by another program does not count); from another
host it is alive while the heartbeat is younger than ``STALE_S``. The file lives outside the
run directory so that the sealed evidence never changes under it.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import socket
import threading
from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError
from benchrun.paths import benchrun_home
from benchrun.fsio import atomic_write_json

log = logging.getLogger(__name__)

HEARTBEAT_S = 10.0
STALE_S = 120.0
JOB_NAME = "benchmark_run_job"
PARTITIONS_NAME = "benchmark_run"  # the run-level assets' dynamic partitions (one per run id)
PARTITION_TAG = "dagster/partition"
# Tags on a CLI-executed Dagster run, so a run killed before it wrote anything is still found.
TAG_HOST, TAG_PID, TAG_PID_START = "benchrun/executor_host", "benchrun/executor_pid", "benchrun/executor_start"
# Its start in clock ticks since boot and the boot's id (Linux: benchrun.procstart), immune to clock steps.
TAG_TICKS, TAG_BOOT = "benchrun/executor_ticks", "benchrun/executor_boot"

_beats: dict[str, threading.Event] = {}
_beats_lock = threading.Lock()


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def identity() -> dict[str, Any]:
    """This process as an executor: host, pid and the pid's start time (wall clock; on Linux also in
    clock ticks since boot, with the boot id: :mod:`benchrun.procstart`)."""
    from benchrun.procstart import stamp

    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, **stamp(pid)}


def executor_tags() -> dict[str, str]:
    """Dagster run tags naming this process (for runs executed in the CLI's process)."""
    me = identity()
    tags = {TAG_HOST: me["host"], TAG_PID: str(me["pid"]), TAG_PID_START: repr(me["pid_start"])}
    if me.get("start_ticks") is not None:
        tags.update({TAG_TICKS: str(me["start_ticks"]), TAG_BOOT: str(me["boot_id"])})
    return tags


def liveness_path(home: Path, run_id: str) -> Path:
    """``<home>/liveness/<run_id>.json`` (defined in benchrun.rundir, which reads claims too)."""
    from benchrun.rundir import claim_path

    return claim_path(home, run_id)


def beat(home: Path, run_id: str, **extra: Any) -> dict[str, Any]:
    """Write (or refresh) this process's claim on ``run_id``."""
    path = liveness_path(home, run_id)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError, OSError):
        record = {}
    me = identity()
    if (record.get("host"), record.get("pid")) != (me["host"], me["pid"]):
        record = {"run_id": run_id, **me, "since_utc": _now().isoformat()}
    record.update({k: v for k, v in extra.items() if v is not None})
    record["heartbeat_utc"] = _now().isoformat()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, record)
    return record


def start_heartbeat(home: Path, run_id: str, **extra: Any) -> None:
    """Claim ``run_id`` for this process and refresh the claim every HEARTBEAT_S (a daemon
    thread, so it stops with the process: a killed run stops beating)."""
    beat(home, run_id, **extra)
    with _beats_lock:
        if run_id in _beats:
            return
        stop = threading.Event()
        _beats[run_id] = stop
    # A process that exits normally (a run worker after a failed step included) drops its claim,
    # so only a process that was killed leaves one behind for the reaper.
    import atexit

    atexit.register(stop_heartbeat, home, run_id)

    def loop() -> None:
        while not stop.wait(HEARTBEAT_S):
            try:
                beat(home, run_id)
            except OSError as exc:  # a full disk must not kill the run; liveness then goes stale
                log.warning("heartbeat of %s not written: %s", run_id, exc)

    threading.Thread(target=loop, name=f"heartbeat-{run_id}", daemon=True).start()


def stop_heartbeat(home: Path, run_id: str) -> None:
    """The run reached a final phase: stop beating and drop the claim."""
    with _beats_lock:
        stop = _beats.pop(run_id, None)
    if stop is not None:
        stop.set()
    try:
        liveness_path(home, run_id).unlink()
    except FileNotFoundError:
        pass


def alive(record: dict[str, Any], *, now: dt.datetime | None = None, stale_s: float = STALE_S) -> bool:
    """Whether the executor a liveness record (or executor tags) names is still running."""
    host, pid = record.get("host"), record.get("pid")
    if host == socket.gethostname() and pid:
        from benchrun.procstart import same_process

        return same_process(record, int(pid))
    beat_at = record.get("heartbeat_utc")
    if not beat_at:
        return True  # another host and no heartbeat yet: cannot tell, so never reap
    age = ((now or _now()) - dt.datetime.fromisoformat(beat_at)).total_seconds()
    return age < stale_s


def live_claim(home: Path, run_id: str) -> dict[str, Any] | None:
    """The claim on ``run_id`` of a process that still runs it, else None (no claim, a stale one,
    or one that cannot be read)."""
    from benchrun.rundir import read_json_or_none

    try:
        record = read_json_or_none(liveness_path(home, run_id), fix="remove it")
    except BenchrunError:
        return None
    return record if isinstance(record, dict) and alive(record) else None


def describe(record: dict[str, Any]) -> str:
    return (f"pid {record.get('pid')} on {record.get('host')}"
            + (f", last heartbeat {record['heartbeat_utc']}" if record.get("heartbeat_utc") else ""))


def kill_orphaned_suites(run_dir: Path) -> int:
    """Kill the suite processes a dead run left behind on this machine (their environment names
    the run directory), so they cannot disturb the next benchmark; returns how many."""
    import psutil

    target = str(run_dir)
    killed = 0
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get("BENCHRUN_RUN_DIR") == target:
                proc.kill()
                killed += 1
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    if killed:
        log.warning("killed %d orphaned suite process(es) of %s", killed, target)
    return killed


def _fail_dagster_run(instance: Any, dagster_run_id: str | None, message: str) -> bool:
    import dagster as dg

    if instance is None or not dagster_run_id:
        return False
    run = instance.get_run_by_id(dagster_run_id)
    if run is not None and run.status == dg.DagsterRunStatus.CANCELING:
        # A cancel asked for it and its process died before it could end it: only that process
        # reports CANCELED, so the run stayed CANCELING for good (found in review).
        _report_canceled(instance, run, message)
        return True
    if run is None or run.status not in (dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING,
                                         dg.DagsterRunStatus.NOT_STARTED):
        return False
    _report_failed(instance, run, message)
    return True


def _report_failed(instance: Any, run: Any, message: str) -> None:
    """Fail a dead process's Dagster run and free the pool slots it held (the warehouse writer's
    ``duckdb_writer``): Dagster frees them only in its daemon, which a CLI home never starts, so
    a run killed holding the slot kept every later run waiting on the pool."""
    instance.report_run_failed(run, message)
    instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)


def _report_canceled(instance: Any, run: Any, message: str) -> None:
    """End a CANCELING Dagster run whose process is gone as CANCELED and free its pool slots, as
    :func:`_report_failed` does for a run in progress. Found in review: the run launcher reports
    CANCELING and leaves CANCELED to the run's own process, so a run whose process had died stayed
    CANCELING for ever: the reaper and :func:`free_slots_of_ended_runs` skip it (not in progress,
    not finished), its ``duckdb_writer`` slot was never freed (later runs' warehouse steps waited
    on the pool for good) and, with a daemon, it counted toward the run queue's limit."""
    instance.report_run_canceled(run, message)
    instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)


def executor_of(tags: Any) -> dict[str, Any] | None:
    """The executor a CLI-executed Dagster run's tags name (host, pid, the pid's start time), as a
    record :func:`alive` judges; None for a run without them (launched by a daemon or a launcher)."""
    if TAG_PID not in tags:
        return None
    start = tags.get(TAG_PID_START)
    return {"host": tags.get(TAG_HOST), "pid": int(tags[TAG_PID]),
            "pid_start": None if start in (None, "None") else float(start),
            "start_ticks": tags.get(TAG_TICKS), "boot_id": tags.get(TAG_BOOT)}


def gone_reason(run_id: str, record: dict[str, Any]) -> str:
    """Why a run whose executor (``record``) died is ended: the reaper's words, and ``benchrun cancel``'s."""
    return (f"the process executing run {run_id} ({describe(record)}) is gone without finishing "
            "(killed or crashed); what it recorded before is kept, nothing after")


def settle_dead_canceling(instance: Any, dagster_run_id: str, message: str) -> bool:
    """A CANCELING Dagster run whose executor (its executor tags) is gone: reported CANCELED and its
    pool slots freed (:func:`_report_canceled`); True when it was. ``benchrun cancel`` asks the run
    launcher to terminate a run whose process it cannot signal; for a run ``benchrun run`` executed
    in its own process (no gRPC server to ask) the launcher reports CANCELING and gives up, and
    nothing else would ever end it. A run without executor tags, or whose executor may still run
    (this rule cannot tell for another host: it is never settled), is left to its process."""
    import dagster as dg

    run = instance.get_run_by_id(dagster_run_id)
    if run is None or run.status != dg.DagsterRunStatus.CANCELING:
        return False
    record = executor_of(run.tags)
    if record is None or alive(record):
        return False
    _report_canceled(instance, run, message)
    return True


def free_slots_of_ended_runs(instance: Any) -> list[str]:
    """Free the pool slots and pending steps of runs that have ended (or are gone) but still hold
    them — what Dagster's daemon does, for a home without one (a run reaped by a release that did
    not free them); the run ids freed."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return []
    freed = []
    for run_id in storage.get_concurrency_run_ids():
        run = instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            storage.free_concurrency_slots_for_run(run_id)
            freed.append(run_id)
    if freed:
        log.warning("freed the pool slots of %d ended Dagster run(s): %s", len(freed), ", ".join(freed))
    return freed


def reap_dead_runs(home: Path | str | None = None, instance: Any = None) -> list[tuple[str, str]]:
    """Fail every run whose executor died: status.json Failed with the reason, and its
    Dagster run failed (so the queue moves on). Returns (run_id, reason) per run reaped.

    Runs with no claim (submitted, waiting to be materialized) are left alone.
    """
    from benchrun.rundir import RunDir, TERMINAL_PHASES, read_json_or_none
    from benchrun.runend import fail_run

    root = benchrun_home(home)
    reaped: list[tuple[str, str]] = []
    directory = root / "liveness"
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            record = read_json_or_none(path, fix="remove it")
        except Exception as exc:  # noqa: BLE001 - a damaged claim must not stop the others
            log.warning("%s: %s", path, exc)
            continue
        if not isinstance(record, dict) or alive(record):
            continue
        run_id = path.stem
        reason = gone_reason(run_id, record)
        try:
            rd = RunDir(root, run_id)
            status = rd.read_status() if rd.exists() else {}
        except Exception as exc:  # noqa: BLE001 - a damaged status.json affects only its run
            log.warning("run %s: %s", run_id, exc)
            continue
        killed = kill_orphaned_suites(rd.path) if record.get("host") == socket.gethostname() else 0
        if status.get("phase") in TERMINAL_PHASES and instance is None:
            continue
        if status.get("phase") not in TERMINAL_PHASES and rd.exists():
            if killed:
                reason += f"; {killed} orphaned suite process(es) of the run were killed"
            fail_run(root, run_id, reason)
        if instance is None:
            continue  # keep the claim: an instance-aware pass still has to fail the Dagster run
        _fail_dagster_run(instance, record.get("dagster_run_id") or status.get("dagster_run_id"), reason)
        path.unlink(missing_ok=True)
        reaped.append((run_id, reason))
        log.warning("reaped %s: %s", run_id, reason)
    if instance is not None:
        reaped.extend(_reap_tagged_dagster_runs(root, instance))
        reaped.extend(_reap_unclaimed_runs(root, instance))
        free_slots_of_ended_runs(instance)
    return reaped


# A run this young may be between its admission and its first claim: never reaped as unclaimed.
UNCLAIMED_GRACE_S = 60.0


def _unclaimed(home: Path | str | None, now: dt.datetime | None, grace_s: float) -> list[tuple[str, str]]:
    """(run id, phase) of the runs not final, without a liveness claim, older than the grace."""
    from benchrun.rundir import TERMINAL_PHASES, list_runs

    root, now = benchrun_home(home), now or _now()
    out = []
    for rd in list_runs(root):
        try:
            status = rd.read_status()
        except Exception as exc:  # noqa: BLE001 - a damaged status.json affects only its run
            log.warning("run %s: %s", rd.run_id, exc)
            continue
        phase = status.get("phase")
        if phase in TERMINAL_PHASES or liveness_path(root, rd.run_id).exists():
            continue
        try:
            created = dt.datetime.fromisoformat(str(status.get("created_utc")).replace("Z", "+00:00"))
        except ValueError:
            continue
        if (now - created).total_seconds() >= grace_s:
            out.append((rd.run_id, phase))
    return out


def unclaimed_runs(home: Path | str | None = None, *, now: dt.datetime | None = None,
                   grace_s: float = UNCLAIMED_GRACE_S) -> list[str]:
    """Runs not final, without a liveness claim, older than the grace: the ones only an
    instance-aware pass can decide on (so a listing opens the Dagster instance only for them)."""
    return [run_id for run_id, _ in _unclaimed(home, now, grace_s)]


def _reap_unclaimed_runs(home: Path, instance: Any, *, now: dt.datetime | None = None,
                         grace_s: float = UNCLAIMED_GRACE_S) -> list[tuple[str, str]]:
    """Runs that are not final, have no liveness claim and no Dagster run queued or in progress:
    their process could not write its claim (a full disk) or lost it, and nothing will ever
    finish them. A Pending run whose partition is registered is a submission waiting to be
    materialized and is left alone."""
    import dagster as dg

    from benchrun.runend import fail_run

    out = []
    for run_id, phase in _unclaimed(home, now, grace_s):
        if phase == "Pending" and instance.has_dynamic_partition(PARTITIONS_NAME, run_id):
            continue  # submitted: waiting for its materialization
        active = instance.get_runs(filters=dg.RunsFilter(tags={PARTITION_TAG: run_id}, statuses=[
            dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
            dg.DagsterRunStatus.STARTED]), limit=1)
        if active:
            continue
        reason = (f"run {run_id} was left {phase} with no liveness claim and no Dagster run in progress: "
                  "its process could not write its claim (a full disk?) or is gone; nothing after that was recorded")
        if fail_run(home, run_id, reason):
            out.append((run_id, reason))
            log.warning("reaped %s: %s", run_id, reason)
    return out


def _reap_tagged_dagster_runs(home: Path, instance: Any) -> list[tuple[str, str]]:
    """In-progress Dagster runs started by a CLI process that no longer exists; CANCELING ones too
    (found in review: a cancel of a run whose process was already dead left it CANCELING for ever,
    holding its pool slot), ended CANCELED as the cancel asked. Their run's phase is not marked
    here: ``benchrun cancel`` marked it Canceled, ``run_canceled_sensor`` marks it on the CANCELED
    reported here (after checking it is the run's current attempt), and a phase a dead process
    left open is the claim reaper's; nor are they returned, which callers print as marked Failed."""
    import dagster as dg

    from benchrun.runend import fail_run

    out = []
    runs = instance.get_runs(filters=dg.RunsFilter(job_name=JOB_NAME, statuses=[
        dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.CANCELING]))
    for run in runs:
        tags = run.tags
        record = executor_of(tags)
        if record is None or alive(record):
            continue
        run_id = tags.get(PARTITION_TAG, "")
        reason = gone_reason(run_id, record)
        if run.status == dg.DagsterRunStatus.CANCELING:
            _report_canceled(instance, run, reason + "; it was being canceled")
            log.warning("ended Dagster run %s (run %s) CANCELED: its process is gone", run.run_id, run_id)
            continue
        _report_failed(instance, run, reason)
        if run_id:
            try:
                fail_run(home, run_id, reason)
            except Exception as exc:  # noqa: BLE001
                log.warning("run %s: %s", run_id, exc)
        out.append((run_id, reason))
    return out


def in_progress_holder(instance: Any, exclude_dagster_run: str | None = None) -> str | None:
    """The benchmark run (partition and Dagster run id) the Dagster instance has in progress, if any;
    a CANCELING one too, as Dagster's queue counts it: its suites may still be tearing down."""
    import dagster as dg

    runs = instance.get_runs(filters=dg.RunsFilter(job_name=JOB_NAME, statuses=[
        dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.CANCELING]), limit=5)
    for run in runs:
        if run.run_id != exclude_dagster_run:
            return f"run {run.tags.get(PARTITION_TAG, '?')} (Dagster run {run.run_id}, {run.status.value})"
    return None
