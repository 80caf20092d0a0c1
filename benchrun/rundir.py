"""The run directory (CONTRACT.md §4): layout, status.json, progress, and manifest.json.

``<home>/runs/<run_id>/`` is the unit of record. Everything here is written to a temporary
name and renamed, so a reader never sees half a file; ``status.json`` is the phase and
conditions a person (or the custom resource's status) reads.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import logging
import os
import re
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError
from benchrun.paths import benchrun_home, is_scratch, safe_join, validate_run_id
from benchrun.store.base import sha256_file
from benchrun.fsio import atomic_write_json
from benchrun.sharedstate import FINAL_PHASES

PHASES = ("Pending", "Admitted", "Running", "Analyzing", "Succeeded", "Failed", "Rejected", "Canceled")
TERMINAL_PHASES = FINAL_PHASES
# The outcomes a Succeeded run may carry and still count as succeeded (None: none recorded).
SUCCEEDED_OUTCOMES = (None, "succeeded", "partial")


def finished_and_succeeded(phase: Any, outcome: Any) -> bool:
    """A finished, succeeded run: phase Succeeded and outcome succeeded, partial or not recorded.

    The one rule for what may be a reference: a comparison's runs (stats.admit), a promoted
    baseline (stats.baseline) and a playbook's baseline (playbooks.base).
    """
    return phase == "Succeeded" and outcome in SUCCEEDED_OUTCOMES


SUBDIRS = ("structured", "raw", "figures", "reports", "progress")
MANIFEST_VERSION = 2
# status.json is the run's live status (the custom resource's status subresource): it keeps
# changing after the evidence is sealed, so it is not part of the immutable evidence.
MUTABLE_FILES = ("status.json",)

# What each file is for, by where it lives and what it is called (manifest artifact_roles).
_ROLE_RULES: tuple[tuple[str, str], ...] = (
    ("attempts/", "earlier_attempt"),  # a re-materialized run's earlier attempt (lifecycle.set_earlier_attempt_aside)
    ("status.json", "status"),
    ("progress/", "progress"),
    ("reports/", "report"),
    ("figures/", "figure"),
    ("_environment.json", "environment"),
    ("_spec.yaml", "pinned_spec"),
    ("_plan.json", "plan"),
    ("_launches.json", "launches"),
    (".log", "log"),
    ("raw/", "raw_output"),
    ("structured/", "suite_result"),
)


def utc_now() -> str:
    """The current UTC time as ISO 8601 with a Z."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def read_json_or_none(path: Path, *, fix: str) -> Any:
    """A run-directory JSON file, None when absent; unreadable JSON is a BenchrunError
    naming the file and ``fix``."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as exc:
        raise BenchrunError(f"{path}: not readable JSON ({exc}); {fix}") from exc


def artifact_role(relpath: str) -> str:
    """The role of a run-directory file, from its place and name."""
    for needle, role in _ROLE_RULES:
        if needle.endswith("/") and relpath.startswith(needle):
            return role
        if not needle.endswith("/") and (relpath.endswith(needle) or relpath == needle):
            return role
    return "other"


def contended_aside_name(run_id: str, suite: str, replicate: int, attempt: int, ext: str, tag: str = "contended") -> str:
    """The file name under ``raw/`` of a replicate's attempt set aside as contended (its result
    document, ``json``, and its ``log``): ``<run>_<suite>_r<k>_contended<i>.<ext>``; ``tag``
    ``earlier``: set aside as an earlier launch's (``benchrun.launch.rerun.set_aside_earlier``)."""
    return f"{run_id}_{suite}_r{int(replicate)}_{tag}{int(attempt)}.{ext}"


def contended_aside_raw_name(run_id: str, suite: str, replicate: int, attempt: int, rest: str, tag: str = "contended") -> str:
    """The name under ``raw/`` of a raw file (``<run>_<suite>_r<k>_<rest>``: samples, telemetry,
    a node's log), and under ``figures/`` of a figure its suite drew, of an attempt set aside as
    contended (or ``tag``): ``<run>_<suite>_r<k>_contended<i>_<rest>``
    — a name the readers of a replicate's raw files (``*_r<k>_telemetry.parquet``,
    ``*_r<k>_requests.parquet``, ...) do not take for the replicate's own."""
    return f"{run_id}_{suite}_r{int(replicate)}_{tag}{int(attempt)}_{rest}"


def contention_reruns(run_path: Path, run_id: str) -> dict[tuple[str, int], str]:
    """(suite, replicate) of every replicate launched again after a contended attempt — read
    from the attempts set aside in ``raw/`` (:func:`contended_aside_name`), which exist however
    the rerun ended — → how the attempt that stayed ended: ``quiet`` (ok, its telemetry saw no
    contention), ``contended`` (ok, still contended), ``unavailable``, or ``failed``. The launch
    record (``structured/<run>_launches.json``) decides over the result document, since a
    launcher fails a replicate whose suite wrote an ok document and then timed out; a rerun
    with neither is a failure (it wrote nothing). Unreadable files are skipped, not raised:
    conditions and comparison rows read this while the evidence is being recorded."""
    run_path = Path(run_path)
    prefix, tail = f"{run_id}_", re.compile(r"_r(\d+)_contended\d+\.json$")
    keys: set[tuple[str, int]] = set()
    raw = run_path / "raw"
    for path in raw.glob(f"{run_id}_*_contended*.json") if raw.is_dir() else []:
        m = tail.search(path.name)
        if m and path.name.startswith(prefix) and m.start() > len(prefix):
            keys.add((path.name[len(prefix):m.start()], int(m.group(1))))
    if not keys:
        return {}

    def read(path: Path) -> Any:
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    launched: dict[tuple[str, int], str] = {}
    rows = read(run_path / "structured" / f"{run_id}_launches.json")
    for row in rows if isinstance(rows, list) else []:
        key = (str(row.get("suite")), _as_int(row.get("replicate"))) if isinstance(row, dict) else None
        if key in keys:
            launched[key] = str(row.get("status"))
    out = {}
    for suite, k in sorted(keys):
        doc = read(run_path / "structured" / f"{run_id}_{suite}_r{k}.json")
        doc = doc if isinstance(doc, dict) else {}
        status = launched.get((suite, k)) or str(doc.get("status") or "failed")
        if status == "ok" and doc.get("status") != "ok":
            status = "failed"  # the launcher said ok but the document that stayed does not
        if status == "ok":
            tel = doc.get("telemetry")
            status = "contended" if isinstance(tel, dict) and tel.get("contended") else "quiet"
        out[(suite, k)] = status if status in ("quiet", "contended", "unavailable") else "failed"
    return out


def _as_int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


log = logging.getLogger(__name__)
_STATUS_LOCKS = threading.local()  # .held: the run directories whose status lock this thread holds


class FinalPhaseKept(BenchrunError):
    """A run that ended was not moved to another phase (:meth:`RunDir.final_exit_refusal` says why)."""


def claim_path(home: Path, run_id: str) -> Path:
    """``<home>/liveness/<run_id>.json``: the claim of the process that executes the run (written by
    benchrun.liveness, which names it ``liveness_path``; read here too, see :func:`_mark_ended`)."""
    return Path(home) / "liveness" / f"{validate_run_id(run_id)}.json"


# A run's first start, which a re-run keeps, then its latest attempt's: the start its warehouse rows are
# filed and sealed under (write_manifest; warehouse.sources.run_start reads the same keys).
START_KEYS = ("first_started_utc", "started_utc")


@dataclass(frozen=True)
class RunDir:
    """One run's directory under ``<home>/runs/``; the run id is validated on creation."""

    home: Path
    run_id: str

    def __post_init__(self) -> None:
        validate_run_id(self.run_id)

    @classmethod
    def for_run(cls, run_id: str, home: Path | str | None = None) -> "RunDir":
        return cls(benchrun_home(home), run_id)

    @property
    def path(self) -> Path:
        return safe_join(self.home, "runs", self.run_id)

    def exists(self) -> bool:
        return (self.path / "status.json").is_file()

    def create(self) -> "RunDir":
        for sub in SUBDIRS:
            (self.path / sub).mkdir(parents=True, exist_ok=True)
        return self

    def file(self, sub: str, label: str, kind: str, ext: str) -> Path:
        """``<sub>/<run_id>_<label>_<kind>.<ext>`` (CONTRACT.md §4 naming), validated."""
        name = f"{self.run_id}_{label}_{kind}.{ext}" if kind else f"{self.run_id}_{label}.{ext}"
        return safe_join(self.path, sub, name)

    # -- status.json ------------------------------------------------------------
    @property
    def status_path(self) -> Path:
        return self.path / "status.json"

    def read_status(self) -> dict[str, Any]:
        try:
            doc = json.loads(self.status_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            if not self.path.is_dir():
                raise BenchrunError(f"no such run {self.run_id!r} under {self.path.parent}; `benchrun runs` lists "
                                    "the runs") from None
            raise BenchrunError(f"run {self.run_id}: no status.json under {self.path}") from None
        except json.JSONDecodeError as exc:
            raise BenchrunError(f"{self.status_path}: not valid JSON ({exc}); the run's status is damaged: restore it "
                                "from the stored evidence or delete the run") from exc
        if not isinstance(doc, dict):
            raise BenchrunError(f"{self.status_path}: not a JSON object (a {type(doc).__name__}); the run's status is "
                                "damaged: restore it from the stored evidence or delete the run")
        return doc

    def write_status(self, status: dict[str, Any]) -> None:
        """Write status.json, one ``status_seq`` later than the copy ``status`` was read from: a
        copy from another home (``sharedstate.pull_run``) never replaces a later one here.
        ``status`` itself takes the new ``status_seq``: what a caller returns (``set_phase`` hands
        it to the BenchmarkRun status, ordered by it) is exactly what was written."""
        if not self.path.is_dir():  # the atomic write would make the directory of a run that is gone
            raise BenchrunError(f"no such run {self.run_id!r} under {self.path.parent}: its status is not written "
                                "(a run that is gone is not made again); `benchrun runs` lists the runs")
        status["status_seq"] = int(status.get("status_seq") or 0) + 1
        atomic_write_json(self.status_path, status)

    @property
    def status_lock_path(self) -> Path:
        return safe_join(self.home, "locks", "status", f"{self.run_id}.lock")

    @contextlib.contextmanager
    def status_lock(self) -> Any:
        """One read-modify-write of status.json at a time, across threads and processes (an OS lock
        under ``<home>/locks/status/``, released by the kernel if its holder dies); re-entrant in
        one thread. Without it, two steps of one run (the confirmation round's progress and a
        condition set beside it) could each write back the copy they read and lose the other's
        field. A home where the lock file cannot be made is written unlocked, as before."""
        held = _STATUS_LOCKS.__dict__.setdefault("held", set())
        key = str(self.path)
        if key in held:
            yield
            return
        try:
            self.status_lock_path.parent.mkdir(parents=True, exist_ok=True)
            fh = open(self.status_lock_path, "a+b")  # noqa: SIM115 - closed below
        except OSError as exc:
            log.debug("status.json of run %s written unlocked: %s", self.run_id, exc)
            yield
            return
        with fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            held.add(key)
            try:
                yield
            finally:
                held.discard(key)
                fcntl.flock(fh, fcntl.LOCK_UN)

    def update_status(self, **fields: Any) -> dict[str, Any]:
        with self.status_lock():
            if self.exists():
                status = self.read_status()
                self._fence(status)
            else:
                self._refuse_new_status()
                status = {"run_id": self.run_id, "conditions": []}
            status.update(fields)
            self.write_status(status)
        return status

    def _refuse_new_status(self) -> None:
        """A status.json is made only in a run directory that exists and that ``benchrun delete`` did not
        remove: a run's tail that ends after the run was deleted (its report, curation, signature; the
        figure worker) wrote a fresh status.json, and `benchrun runs` listed a run that was only that."""
        if not self.path.is_dir():
            raise BenchrunError(f"no such run {self.run_id!r} under {self.path.parent}: its status is not written "
                                "(a run that is gone is not made again); `benchrun runs` lists the runs")
        # benchrun.warehouse.removed.tombstone_path (not imported: the warehouse imports this module)
        tombstone = self.home / "warehouse" / "_deleted" / f"{self.run_id}.json"
        if tombstone.exists():
            raise BenchrunError(f"run {self.run_id} was deleted (`benchrun delete`, {tombstone}): its status is not "
                                "written again; `benchrun delete` removes what was left of it")

    def merge_shared_status(self, shared: dict[str, Any]) -> dict[str, Any]:
        """Merge a later shared status into this home's (``sharedstate.push_run`` calls it when the
        shared copy is not earlier than the one it would push): what this home changed since it last
        pushed or pulled the run, on top of what another pod wrote meanwhile; written one
        ``status_seq`` later than both. Refused (``StaleStatus``) when this home never recorded the
        shared status its copy came from: its own changes cannot be told from stale fields then."""
        from benchrun.sharedstate import StaleStatus, base_status, merge_status

        with self.status_lock():
            base = base_status(self.home, self.run_id)
            if base is None:
                raise StaleStatus(f"run {self.run_id}: the shared status is later than this home's, which was "
                                  "not made from a shared copy; pull the run and make the change again")
            merged = merge_status(base, self.read_status(), shared)
            self.write_status(merged)
        return merged

    def drop_status_fields(self, *names: str) -> None:
        """Remove fields that no longer hold (e.g. a finished confirmation round's progress)."""
        with self.status_lock():
            status = self.read_status()
            self._fence(status)
            if any(n in status for n in names):
                self.write_status({k: v for k, v in status.items() if k not in names})

    def _first_start(self) -> str | None:
        status = self.read_status() if self.status_path.exists() else {}
        return next((status[k] for k in START_KEYS if status.get(k)), None)

    def set_phase(self, phase: str, *, message: str | None = None,
                  allow_final_exit: bool = False) -> dict[str, Any]:
        """Move the run to ``phase`` (one locked read-modify-write), then publish it (shared state, the
        BenchmarkRun status). A final phase is left only as :meth:`final_exit_refusal` allows, unless
        ``allow_final_exit``; a refusal raises :class:`FinalPhaseKept` and writes nothing."""
        return self._publish_phase(self._write_phase(phase, message=message, allow_final_exit=allow_final_exit),
                                   phase)

    def final_exit_refusal(self, current: Any, phase: str) -> str | None:
        """Why a run in phase ``current`` may not be set ``phase``, or None when it may. A run that
        ended (a final phase) is started again (``Running``: ``lifecycle.admit`` and ``resume_attempt``,
        which decide themselves whether the attempt may run) or moved to another final phase (a retry
        finishing it: ``lifecycle.finalize`` after a re-execution of its last steps), but never continued
        (``Pending``, ``Admitted``, ``Analyzing``). The attempt that was ended by another process while
        it still ran is kept off the status altogether (:meth:`_fence`)."""
        if current not in TERMINAL_PHASES or phase in (current, "Running") or phase in TERMINAL_PHASES:
            return None
        return (f"run {self.run_id} already ended in phase {current}; it stays {current}, not {phase} (a run that "
                "ended is started again, phase Running, never continued)")

    def _fence(self, status: dict[str, Any]) -> None:
        """Refuse every status write of the process whose attempt another process ended while it still
        ran (``ended_under``, set by :func:`_mark_ended`; cleared when an attempt starts, phase Running):
        a cancel whose process did not settle, then that process's ``record_evidence`` or ``finalize``,
        read Analyzing or Succeeded (outcome, conditions and signature with it) over Canceled."""
        held = status.get("ended_under")
        if not isinstance(held, dict) or (held.get("host"), held.get("pid")) != (socket.gethostname(), os.getpid()):
            return
        from benchrun.procstart import same_process

        if not same_process(held, os.getpid()):
            return  # a later process given the same pid (by its start ticks and boot, or its start time)
        raise FinalPhaseKept(f"run {self.run_id} was ended by another process while this one still ran it (phase "
                             f"{status.get('phase')}: {status.get('message')}); this process writes nothing more of "
                             "it, and its phase stays (a new attempt, phase Running, runs it again)")

    def _write_phase(self, phase: str, *, message: str | None, allow_final_exit: bool) -> dict[str, Any]:
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}")
        with self.status_lock():
            earlier = self.read_status() if self.status_path.exists() else {}
            why = None if allow_final_exit else self.final_exit_refusal(earlier.get("phase"), phase)
            if why:
                raise FinalPhaseKept(why)
            fields: dict[str, Any] = {"phase": phase}
            if message is not None:
                fields["message"] = message
            if phase == "Running":
                # (Re-)started: a re-materialized run is not finished until it finishes again. Its first
                # start stays: the warehouse files the run's rows under that day (warehouse.sources.run_start),
                # so a re-run after midnight replaces them instead of adding a second copy on the new day.
                now = utc_now()
                fields.update(started_utc=now, finished_utc=None)
                if earlier.get("ended_under"):
                    fields["ended_under"] = None  # a new attempt: no earlier process is kept off it now
                if not earlier.get("first_started_utc"):
                    fields["first_started_utc"] = earlier.get("started_utc") or now
            if phase in TERMINAL_PHASES:
                fields["finished_utc"] = utc_now()
            return self.update_status(**fields)

    def _publish_phase(self, status: dict[str, Any], phase: str) -> dict[str, Any]:
        """After the phase is written (outside the status lock: it may reach the network)."""
        from benchrun.sharedstate import push_run

        def merge(shared: dict[str, Any]) -> None:  # another pod wrote the shared status meanwhile
            nonlocal status
            status = self.merge_shared_status(shared)

        # other pods read the phase from the shared copy (no-op unless BENCHRUN_SHARED_STATE is set)
        push_run(self.path, self.home, status_only=phase not in TERMINAL_PHASES, merge=merge)
        if status.get("resource"):  # submitted from a BenchmarkRun: its status follows every phase
            from benchrun.controller.status import on_phase_change

            on_phase_change(status)
        return status

    def set_condition(self, type_: str, status: bool | str, reason: str, message: str = "") -> dict[str, Any]:
        """Set (or replace) one condition; lastTransitionTime moves only when status changes."""
        with self.status_lock():
            return self._set_condition(type_, status, reason, message)

    def _set_condition(self, type_: str, status: bool | str, reason: str, message: str) -> dict[str, Any]:
        st = self.read_status()
        self._fence(st)
        value = status if isinstance(status, str) else ("True" if status else "False")
        conditions = [c for c in st.get("conditions", [])]
        now = utc_now()
        for c in conditions:
            if c["type"] == type_:
                if c["status"] != value:
                    c["lastTransitionTime"] = now
                c.update(status=value, reason=reason, message=message)
                break
        else:
            conditions.append(
                {"type": type_, "status": value, "reason": reason, "message": message, "lastTransitionTime": now}
            )
        st["conditions"] = conditions
        self.write_status(st)
        return st

    def remove_conditions(self, *types: str) -> dict[str, Any]:
        """Drop conditions that no longer hold (e.g. ``Failed`` when a run is retried)."""
        with self.status_lock():
            st = self.read_status()
            self._fence(st)
            kept = [c for c in st.get("conditions", []) if c.get("type") not in types]
            if len(kept) != len(st.get("conditions", [])):
                st["conditions"] = kept
                self.write_status(st)
        return st

    # -- progress ---------------------------------------------------------------
    @property
    def progress_path(self) -> Path:
        return self.path / "progress" / "run_progress.json"

    def write_progress(self, progress: dict[str, Any]) -> None:
        atomic_write_json(self.progress_path, {**progress, "updated_utc": utc_now()})

    def read_progress(self) -> dict[str, Any]:
        try:
            return json.loads(self.progress_path.read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    # -- manifest.json ----------------------------------------------------------
    def write_manifest(self, *, status: str, issues: list[str], suite_steps: dict[str, Any],
                       nodes: list[dict[str, str]] | None = None) -> dict[str, Any]:
        """Hash every regular file (except the manifest itself; symlinks are not evidence, as
        ``store.base.iter_run_files`` says) and write manifest version 2."""
        root = self.path  # resolved once, not per file
        files = sorted(
            rel for p in root.rglob("*")
            if p.is_file() and not p.is_symlink() and p.name != "manifest.json" and not p.name.startswith(".")
            and (rel := p.relative_to(root).as_posix()) not in MUTABLE_FILES and not is_scratch(rel)
        )  # rglob does not descend into linked folders
        sha = {rel: sha256_file(root / rel) for rel in files}
        roles = {rel: artifact_role(rel) for rel in files}
        counts: dict[str, int] = {}
        for role in roles.values():
            counts[role] = counts.get(role, 0) + 1
        total = sum(int(s.get("planned", 0)) for s in suite_steps.values())
        done = sum(int(s.get("ok", 0)) for s in suite_steps.values())
        manifest = {
            "manifest_version": MANIFEST_VERSION,
            "run_id": self.run_id,
            "timestamp_utc": utc_now(),
            # the start the run's rows are partitioned and signed by, its first (warehouse.sources.run_start;
            # status.json is never stored: a rebuild from the store reads it here)
            "started_utc": self._first_start(),
            "nodes": nodes or [{"label": "local", "host": socket.gethostname()}],
            "status": status,
            "suite_status": status,
            "success": status == "succeeded",
            "completeness": round(done / total, 4) if total else 0.0,
            "issues": issues,
            "progress": self.read_progress(),
            "suite_steps": suite_steps,
            "files": files,
            "summary": {"file_count": len(files), "artifact_counts": counts, "sha256": sha},
            "artifact_roles": roles,
        }
        atomic_write_json(self.path / "manifest.json", manifest)
        return manifest

    def read_manifest(self) -> dict[str, Any]:
        try:
            return json.loads((self.path / "manifest.json").read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise BenchrunError(f"run {self.run_id}: no manifest.json yet (the run has not recorded its evidence)") from None


def list_runs(home: Path | str | None = None) -> list[RunDir]:
    """Every run directory under ``<home>/runs`` that has a status.json, oldest first."""
    root = benchrun_home(home) / "runs"
    if not root.is_dir():
        return []
    out = []
    for p in sorted(root.iterdir()):
        try:
            rd = RunDir(root.parent, p.name)
        except BenchrunError:
            continue
        if rd.exists():
            out.append(rd)
    def created(rd: RunDir) -> str:
        # A damaged status.json affects only its own run: it sorts first, the others still list.
        try:
            return str(rd.read_status().get("created_utc") or "")
        except BenchrunError:
            return ""

    return sorted(out, key=created)


def mark_run_failed(home: Path | str | None, run_id: str, reason: str, *, over_succeeded: bool = False) -> bool:
    """Phase Failed with the reason unless already terminal; True when it changed.
    ``over_succeeded``: also over a Succeeded the caller itself set before a later step of the
    same asset failed (``run_status`` finalizes, then writes the report, curates, signs and
    pushes): a run whose publication failed must not stay Succeeded with exit 0."""
    return _mark_ended(home, run_id, "Failed", "OrchestratorRunFailed", "failed", reason,
                       over_succeeded=over_succeeded)


def mark_run_canceled(home: Path | str | None, run_id: str, reason: str) -> bool:
    """Phase Canceled (outcome ``canceled``) with the reason unless already terminal; True when
    it changed. What the run measured before it was canceled stays in its directory, and its
    outcome in ``outcome_measured`` for a retry (as :func:`mark_run_failed` keeps it)."""
    return _mark_ended(home, run_id, "Canceled", "Canceled", "canceled", reason)


def _mark_ended(home: Path | str | None, run_id: str, phase: str, cond_reason: str, outcome: str, reason: str, *,
                over_succeeded: bool = False) -> bool:
    """The check that the run has not ended and the three writes (condition, outcome, phase) under one
    hold of the status lock: read outside it, a cancel whose process did not settle (or a failure
    sensor) overwrote the Succeeded that process had just set, and signed, between the check and the
    writes. Published (shared state, the BenchmarkRun) after the lock is released."""
    rd = RunDir.for_run(run_id, home)
    if not rd.exists():
        return False
    with rd.status_lock():
        if not rd.exists():  # deleted meanwhile
            return False
        st = rd.read_status()
        over = over_succeeded and st.get("phase") == "Succeeded"
        if st.get("phase") in TERMINAL_PHASES and not over:
            return False
        rd.set_condition(phase, True, cond_reason, reason)
        # The outcome column agrees with the phase; what the suites measured is kept for a retry.
        rd.update_status(outcome=outcome, outcome_measured=st.get("outcome_measured") or st.get("outcome"),
                         **_ended_under(rd))
        status = rd._write_phase(phase, message=reason, allow_final_exit=over)
    # False when the shared copy held a final phase another pod set: the merge keeps that one
    return rd._publish_phase(status, phase).get("phase") == phase


def _ended_under(rd: RunDir) -> dict[str, Any]:
    """``{"ended_under": claim}`` when a process other than this one claims the run (its executor, which
    may still run: a cancel that did not settle, a failure sensor): that process then writes nothing
    more of the run (:meth:`RunDir._fence`). {} when this process is the claimant or none claims it."""
    try:
        claim = read_json_or_none(claim_path(rd.home, rd.run_id), fix="remove it")
    except BenchrunError:
        return {}
    if not isinstance(claim, dict) or not claim.get("pid") or (
            (claim.get("host"), claim.get("pid")) == (socket.gethostname(), os.getpid())):
        return {}
    return {"ended_under": {k: claim.get(k) for k in ("host", "pid", "pid_start", "start_ticks", "boot_id")}}
