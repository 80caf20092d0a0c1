"""The runs a person removed from the warehouse on purpose (``benchrun delete``'s tombstones, applied
retention records), which ``rebuild-warehouse`` must not write back from their directory or the store."""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path

from benchrun.fsio import atomic_path
from benchrun.paths import is_run_id, validate_run_id
from benchrun.warehouse.writer import warehouse_root

log = logging.getLogger(__name__)

DIR_NAME = "warehouse"
DELETED_DIR = "_deleted"  # beside ``_retention/``: one ``<run_id>.json`` per run `benchrun delete` removed
RETENTION_DIR = "_retention"


def tombstone_path(home: Path, run_id: str) -> Path:
    """``<home>/warehouse/_deleted/<run_id>.json`` (the run id validated: it is a file name)."""
    return warehouse_root(home) / DELETED_DIR / f"{validate_run_id(run_id)}.json"


def record_deleted(home: Path, run_id: str, *, now: dt.datetime | None = None,
                   retention: dict | None = None) -> Path:
    """Record that ``benchrun delete`` removes ``run_id`` (written before anything of it is removed,
    atomically and durably: a delete stopped half-way is still recorded, and deleting again finishes it).
    ``retention``: what retention aged the run by (:func:`benchrun.warehouse.retention.age_record`), so
    the stored evidence delete keeps still ages out. A second delete keeps the first record's."""
    path = tombstone_path(home, run_id)
    when = (now or dt.datetime.now(dt.timezone.utc)).isoformat(timespec="seconds")
    if retention is None:
        retention = _read_tombstone(path).get("retention")
    doc = {"run_id": run_id, "deleted_utc": when, "retention": retention}
    with atomic_path(path, sync_dir=True) as tmp:
        tmp.write_text(json.dumps(doc, sort_keys=True, default=str) + "\n", encoding="utf-8")
    return path


def pull_removed(home: Path) -> None:
    """With shared state: the tombstones and retention records every pod shares, into ``home`` before a
    decision reads them (a no-op without it). Before, ``rebuild-warehouse`` in a fresh home restored from
    the store, into the shared catalog, runs another home had deleted or aged out (found in review)."""
    from benchrun.sharedstate import pull_paths

    pull_paths(home, f"{DIR_NAME}/{DELETED_DIR}/", f"{DIR_NAME}/{RETENTION_DIR}/")


def deleted_records(home: Path) -> dict[str, dict]:
    """Each run ``benchrun delete`` removed: its record ({} where it does not read; it still counts)."""
    out: dict[str, dict] = {}
    directory = warehouse_root(home) / DELETED_DIR
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        run_id = path.name.removesuffix(".json")
        if not is_run_id(run_id):  # not a tombstone benchrun wrote
            continue
        out[run_id] = _read_tombstone(path)
    return out


def _read_tombstone(path: Path) -> dict:
    """A tombstone's record; {} where it is missing or does not read (a damaged one still counts)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def deleted_runs(home: Path) -> dict[str, dt.datetime | None]:
    """Each run ``benchrun delete`` removed: when (None where the tombstone does not say; it still counts)."""
    from benchrun.warehouse.sources import parse_ts

    return {run_id: parse_ts(doc.get("deleted_utc")) for run_id, doc in deleted_records(home).items()}


def retention_parts(home: Path) -> list[tuple[str, str, str]]:
    """(record, table, run id) of each partition an applied (or applying) retention pass removed (its records,
    ``warehouse/_retention/retention-*.json``); a record that does not read is named in a warning."""
    out: list[tuple[str, str, str]] = []
    directory = warehouse_root(home) / RETENTION_DIR
    for record in sorted(directory.glob("retention-*.json")) if directory.is_dir() else []:
        try:
            doc = json.loads(record.read_text(encoding="utf-8"))
            if doc.get("applied") or doc.get("applying"):  # a pass cut short removed some of them already
                out.extend((f"{DIR_NAME}/{RETENTION_DIR}/{record.name}", str(part["table"]), str(part["run_id"]))
                           for part in doc.get("partitions", []))
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            log.warning("warehouse: retention record %s does not read (%s): the runs it removed are not known, so they "
                        "may be copied or rebuilt again; run `benchrun retention --apply` afterwards", record, exc)
    return out


def retention_removed(home: Path) -> dict[str, str]:
    """Each run an applied retention pass removed rows or partitions of: the record that says so."""
    out: dict[str, str] = {}
    for record, _table, run_id in retention_parts(home):
        out.setdefault(run_id, record)
    return out


def removed_runs(home: Path, created: dict[str, dt.datetime | None] | None = None) -> dict[str, str]:
    """Run id -> why it stays out of the warehouse: removed by ``benchrun delete`` or by retention.
    ``created`` (a run directory's creation time, where one exists): a run created after its tombstone is
    a new run under the same id, not the deleted one, and is not skipped."""
    created = created or {}
    out = {r: f"removed by retention (record {where})" for r, where in retention_removed(home).items()}
    deleted = deleted_runs(home)
    for run_id in deleted:
        why = deletion(deleted, run_id, created.get(run_id))
        if why:
            out[run_id] = why
    return out


def deletion(deleted: dict[str, dt.datetime | None], run_id: str, made: dt.datetime | None) -> str | None:
    """Why ``run_id`` is removed by ``benchrun delete`` (``deleted``: :func:`deleted_runs`), or None:
    not deleted, or ``made`` (its creation) after its tombstone, a new run under the same id."""
    if run_id not in deleted:
        return None
    when = deleted[run_id]
    if when is not None and made is not None and made > when:
        return None
    at = f" at {when.isoformat()}" if when else ""
    return f"removed by `benchrun delete`{at} ({DIR_NAME}/{DELETED_DIR}/{run_id}.json)"
