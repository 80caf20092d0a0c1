"""Retention: which curated partitions and raw objects have outlived their tier, and removing them.

Per run (from its ``benchmark_run_fact`` row, i.e. the run's own pinned spec):
``sinks.curatedWarehouse.retention`` hot/warm/cold days and
``sinks.rawArtifacts.retentionClass``. A run's age counts from ``finished_utc`` (else
``created_utc``). Curated partitions go once the run is older than ``coldDays``. A raw
object (local store only) goes once *every* run whose object manifest lists it is past
its raw retention; an object any run still needs is kept, and so is every object of a
run whose age or retention is unknown. A run a ``published/`` alias names (a baseline) never
expires, as ``benchrun delete`` refuses it, nor does one being run again (its status.json phase not
final: its row is still the previous attempt's). A run ``benchrun delete`` or an earlier pass removed
keeps aging by the retention its tombstone or that pass's record kept, so the objects it shares with
younger runs still go once those age out. S3 objects are left to the bucket's object lock and
lifecycle rules.

With shared state (Kubernetes: the pass runs in a fresh run-worker pod, its home empty) the aliases
and ``delete``'s tombstones are pulled from the shared prefix before planning, and the pass's record
(and the tombstones) pushed back after: the ages come from the shared catalog, and before, a baseline
promoted from another home was aged as any run and its rows deleted once past ``coldDays``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import uuid
from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError
from benchrun.store import LocalStore, open_store, retention_days_for_class
from benchrun.fsio import atomic_write_json
from benchrun.warehouse.schemas import TABLES
from benchrun.warehouse.views import connect, refresh_views
from benchrun.warehouse.writer import partition_run_ids, remove_partition, warehouse_root

log = logging.getLogger(__name__)

# What the plan reads a run's age from: removed last, so a pass stopped half-way (killed, a failed commit)
# leaves every expired run there, and the next plan finds it again and removes the rest.
AGE_TABLE = "benchmark_run_fact"


@dataclasses.dataclass
class RunAge:
    run_id: str
    age_days: float | None
    tier: str  # hot | warm | cold | expired | unknown | published | active
    cold_days: int | None
    raw_days: int | None
    raw_path_template: str | None


@dataclasses.dataclass
class RetentionPlan:
    """What a retention pass would remove (or removed, once applied)."""

    now_utc: str
    runs: list[RunAge]
    partitions: list[dict[str, str]]  # {"table", "run_id", "path"}
    objects: list[dict[str, Any]]  # {"uri", "key", "store", "prefix", "runs": [...], "manifests": {run: digest}}
    kept_objects: int
    notes: list[str]
    applied: bool = False
    applying: bool = False  # recorded before the first removal: a pass cut short still keeps its runs out
    # Planned objects apply kept (a run stored since shares them): moved out of ``objects`` so the record and
    # the counts name only what went; before, they were listed as removed (found in review).
    kept_after_plan: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _tier(age: float | None, hot: int | None, warm: int | None, cold: int | None) -> str:
    if age is None or cold is None:
        return "unknown"
    if age > cold:
        return "expired"
    if warm is not None and age > warm:
        return "cold"
    if hot is not None and age > hot:
        return "warm"
    return "hot"


AGE_SQL = """SELECT run_id, coalesce(finished_utc, created_utc) AS t, retention_hot_days, retention_warm_days,
                    retention_cold_days, raw_retention_class, raw_path_template
             FROM benchmark_run_fact {where} ORDER BY run_id"""
AGE_FIELDS = ("run_id", "t", "hot", "warm", "cold", "raw_class", "template")


def _run_ages(home: Path, now: dt.datetime) -> list[RunAge]:
    con = connect(home)
    try:
        rows = con.execute(AGE_SQL.format(where="")).fetchall()
    finally:
        con.close()
    return [_age(now, *row) for row in rows]


def _age(now: dt.datetime, run_id: str, t: dt.datetime | None, hot: int | None, warm: int | None, cold: int | None,
         raw_class: str | None, template: str | None) -> RunAge:
    age = (now - t).total_seconds() / 86400 if t is not None else None
    raw_days = retention_days_for_class(raw_class, {"hotDays": hot, "warmDays": warm, "coldDays": cold})
    return RunAge(run_id, age, _tier(age, hot, warm, cold), cold, raw_days, template)


def age_record(home: Path, run_id: str) -> dict[str, Any] | None:
    """What retention ages ``run_id`` by (its benchmark_run_fact row), as JSON, for the record
    `benchrun delete` leaves: the run's raw objects then age out like any other's. None when the
    warehouse has no row of it."""
    try:
        con = connect(home)
    except BenchrunError:
        return None
    try:
        row = con.execute(AGE_SQL.format(where="WHERE run_id = ?"), [run_id]).fetchone()
    except Exception:  # no table yet: nothing to age it by
        return None
    finally:
        con.close()
    if row is None:
        return None
    doc = dict(zip(AGE_FIELDS, row))
    doc["t"] = doc["t"].isoformat() if doc["t"] is not None else None
    return doc


def _deleted_ages(home: Path, now: dt.datetime, known: set[str]) -> tuple[list[RunAge], list[str]]:
    """The runs `benchrun delete` removed (their records, :mod:`benchrun.warehouse.removed`), aged by
    the retention they had, so the stored evidence delete keeps ages out; notes for those it cannot age."""
    from benchrun.warehouse.removed import deleted_records
    from benchrun.warehouse.sources import parse_ts

    runs, notes = [], []
    for run_id, record in sorted(deleted_records(home).items()):
        if run_id in known:  # the id was used again: its new run's row governs
            continue
        age = record.get("retention")
        if not isinstance(age, dict):
            notes.append(f"run {run_id}: deleted with no record of its retention (before benchrun kept one, or it "
                         "was never curated); its raw objects are kept")
            continue
        runs.append(_age(now, run_id, parse_ts(age.get("t")), age.get("hot"), age.get("warm"), age.get("cold"),
                         age.get("raw_class"), age.get("template")))
    return runs, notes


def _retention_ages(home: Path, now: dt.datetime, known: set[str]) -> list[RunAge]:
    """The runs an earlier pass removed, aged on from what its record says (age then, raw days, template).
    Found in review: with their rows gone and their manifests still in the store, the objects they share
    with a younger run counted as held by a run of unknown age once that run expired, kept forever."""
    from benchrun.warehouse.removed import RETENTION_DIR
    from benchrun.warehouse.sources import parse_ts

    out: dict[str, RunAge] = {}
    directory = warehouse_root(home) / RETENTION_DIR
    for path in sorted(directory.glob("retention-*.json")) if directory.is_dir() else []:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            then = parse_ts(doc.get("now_utc"))
            if not (doc.get("applied") or doc.get("applying")) or then is None:
                continue
            removed = {str(part["run_id"]) for part in doc.get("partitions", [])}
            for run in doc.get("runs", []):
                run_id, age = str(run["run_id"]), run.get("age_days")
                if run_id in removed and run_id not in known and isinstance(age, (int, float)):
                    age += (now - then).total_seconds() / 86400
                    out[run_id] = RunAge(run_id, age, "expired", run.get("cold_days"), run.get("raw_days"),
                                         run.get("raw_path_template"))
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            continue  # removed.retention_parts warns of it: its runs' objects are kept (no age)
    return list(out.values())


def _kept_active(home: Path, run: RunAge) -> tuple[RunAge, str | None]:
    """A run whose status.json phase is not final is being run again (re-materialized): its row is still
    the previous attempt's, so it is kept until curated again. Found in review: it was expired by the old
    finish time and the objects its new attempt stores removed. An unreadable or absent status (a fresh
    pod's home) says nothing: the row's age governs, as before."""
    from benchrun.paths import safe_join
    from benchrun.sharedstate import FINAL_PHASES

    if run.tier == "published":
        return run, None
    try:
        phase = json.loads(safe_join(home, "runs", run.run_id, "status.json").read_text(encoding="utf-8"))["phase"]
    except (OSError, ValueError, TypeError, KeyError, BenchrunError):
        return run, None
    if not isinstance(phase, str) or phase in FINAL_PHASES:
        return run, None
    return (dataclasses.replace(run, tier="active", raw_days=None),
            f"run {run.run_id}: phase {phase} (being run again); its partitions and raw objects are kept")


def _iceberg_run_ids(home: Path) -> dict[str, set[str]] | None:
    """Per table, the run ids with rows in the Iceberg tables; None for the parquet layout."""
    from benchrun.warehouse import lake

    if not lake.enabled():
        return None
    return {table: lake.run_ids(home, table) for table in TABLES}


def plan_retention(home: Path, now: dt.datetime | None = None) -> RetentionPlan:
    """The dry run: expired curated partitions and raw objects no run still needs."""
    from benchrun.paths import published_runs

    now = now or dt.datetime.now(dt.timezone.utc)
    home = Path(home)
    _pull_shared(home)
    published = published_runs(home)
    runs = [_kept_published(r, published) for r in _run_ages(home, now)]
    notes: list[str] = [f"run {r}: published ({', '.join(a)}); its partitions and raw objects are kept"
                        for r, a in sorted(published.items()) if any(x.run_id == r for x in runs)]
    checked = [_kept_active(home, r) for r in runs]
    runs = [r for r, _ in checked]
    notes += [note for _, note in checked if note]
    deleted, deleted_notes = _deleted_ages(home, now, {r.run_id for r in runs})
    notes += deleted_notes
    deleted += [_kept_published(r, published) for r in
                _retention_ages(home, now, {r.run_id for r in runs} | {r.run_id for r in deleted})]
    partitions = []
    iceberg = _iceberg_run_ids(home)
    if iceberg is not None:  # rows of a run the plan cannot age (its run row gone before the others)
        aged = {r.run_id for r in runs}
        for run_id in sorted(set().union(*(ids for t, ids in iceberg.items() if t != AGE_TABLE)) - aged):
            notes.append(f"run {run_id}: rows in the warehouse but none in {AGE_TABLE} (a retention pass of an "
                         "earlier release stopped half-way, or a curation under way), so its age is unknown: "
                         f"`benchrun rebuild-warehouse {run_id}` writes its run row again (retention then ages it)")
    for run in runs:
        if run.tier == "expired":
            for table in TABLES:
                if iceberg is not None and run.run_id in iceberg[table]:  # its rows, one commit per table
                    partitions.append({"table": table, "run_id": run.run_id, "path": f"iceberg:benchrun.{table}"})
                # the parquet layout's partition (with Iceberg: one an earlier release left, which a
                # migration would otherwise copy back)
                if run.run_id in partition_run_ids(home, table):
                    partitions.append({"table": table, "run_id": run.run_id,
                                       "path": str(warehouse_root(home) / table / f"run_id={run.run_id}")})
        elif run.tier == "unknown":
            notes.append(f"run {run.run_id}: age or coldDays unknown; its partitions are kept")

    # Raw objects in local stores: a key is removable only if every manifest listing it is expired.
    by_store: dict[str, tuple[LocalStore, list[RunAge]]] = {}
    for run in runs + deleted:
        try:
            store = open_store(run.raw_path_template, home)
        except BenchrunError as exc:
            notes.append(f"run {run.run_id}: raw store not usable ({exc}); its objects are kept")
            continue
        if not isinstance(store, LocalStore):
            notes.append(f"run {run.run_id}: raw objects on {store.uri} are governed by object lock/lifecycle, not removed here")
            continue
        # one entry per layout: a root holding runs stored flat (objects/) and per run (objects/${RUN_ID}/)
        # is two stores, each listing its own manifests (keyed by root alone, one layout was never seen)
        by_store.setdefault(f"{store.root}\0{store.prefix_template}", (store, []))[1].append(run)
    objects: list[dict[str, Any]] = []
    kept = 0
    for store, store_runs in by_store.values():
        ages = {r.run_id: r for r in store_runs}
        holders, digests, note = _holders(store)
        if note:
            notes.append(note)
        for key, run_ids in sorted(holders.items()):
            expired = all(
                r in ages and ages[r].raw_days is not None and ages[r].age_days is not None
                and ages[r].age_days > ages[r].raw_days
                for r in set(run_ids)
            )
            if expired and store.exists(key):
                objects.append({"uri": store.key_uri(key), "key": key, "store": str(store.root),
                                "prefix": store.prefix_template, "runs": sorted(set(run_ids)),
                                "manifests": {r: digests.get(r) for r in sorted(set(run_ids))}})
            else:
                kept += 1
    return RetentionPlan(now.isoformat(timespec="seconds"), runs, partitions, objects, kept, notes)


def _holders(store: LocalStore) -> tuple[dict[str, list[str]], dict[str, str], str]:
    """Object key -> the runs whose stored manifests (every version) list it, and each run's latest
    manifest digest (apply compares it with the plan's); ``({}, {}, why)`` when a manifest cannot be
    read (nothing of that store may then be removed)."""
    holders: dict[str, list[str]] = {}
    digests: dict[str, str] = {}
    for run_id in store.list_manifest_run_ids():
        try:
            manifest = store.load_manifest(run_id)
        except BenchrunError as exc:
            return {}, {}, f"{store.uri}: manifest of {run_id} unreadable ({exc}); store left untouched"
        digests[run_id] = manifest.digest
        # Every stored version of the run's manifest counts, not only the latest.
        for version in _manifest_versions(store, run_id):
            for obj in version:
                holders.setdefault(obj, []).append(run_id)
        for obj in manifest.objects:
            holders.setdefault(obj.key, []).append(run_id)
    return holders, digests, ""


def _kept_published(run: RunAge, published: dict[str, list[str]]) -> RunAge:
    """A run a ``published/`` alias names never expires (`delete` refuses it too): it is the
    baseline comparisons read and verify re-hashes."""
    if run.run_id not in published:
        return run
    return dataclasses.replace(run, tier="published", raw_days=None)


def _manifest_versions(store: LocalStore, run_id: str) -> list[list[str]]:
    out = []
    directory = store.path_of(store.manifest_key(run_id)).with_suffix("")
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            doc = json.loads(path.read_text())
            out.append([o["key"] for o in doc.get("objects", [])])
        except (OSError, json.JSONDecodeError, KeyError, TypeError):
            continue
    return out


def _remove(home: Path, part: dict[str, str]) -> None:
    if part["path"].startswith("iceberg:"):
        from benchrun.warehouse.lake import delete_run

        delete_run(home, part["table"], part["run_id"])
    else:
        remove_partition(home, part["table"], part["run_id"])


def apply_retention(home: Path, plan: RetentionPlan) -> Path:
    """Remove what ``plan`` lists, refresh the views, and record it under ``warehouse/_retention/``:
    the rows of every other table, then the raw objects, and the runs' ``benchmark_run_fact`` rows last."""
    home = Path(home)
    stamp = plan.now_utc.replace(":", "").replace("+", "Z").replace("-", "")
    # A short random suffix: found in review, a second pass in the same second (names were stamped to the
    # second) overwrote the first's record, and rebuild-warehouse then wrote the first's runs back.
    record = warehouse_root(home) / "_retention" / f"retention-{stamp}-{uuid.uuid4().hex[:12]}.json"
    # The record first, as "applying": a pass cut short (Ctrl-C, a crash) after removing rows and objects
    # left no record, so `rebuild-warehouse` wrote its runs back without their objects; their runs now stay
    # out, and the next pass removes what this one left
    plan.applying = True
    atomic_write_json(record, plan.to_json())
    _push_shared(home, record)  # shared before the first removal too: a pod killed mid-pass takes nothing with it
    for part in plan.partitions:
        if part["table"] != AGE_TABLE:
            _remove(home, part)
    _remove_objects(plan)
    for part in plan.partitions:
        if part["table"] == AGE_TABLE:
            _remove(home, part)
    if plan.partitions:
        refresh_views(home)
    kept = {(obj["store"], obj.get("prefix"), obj["key"]) for obj in plan.kept_after_plan}
    plan.objects = [obj for obj in plan.objects if (obj["store"], obj.get("prefix"), obj["key"]) not in kept]
    plan.kept_objects += len(plan.kept_after_plan)
    plan.applied, plan.applying = True, False
    atomic_write_json(record, plan.to_json())
    _push_shared(home, record)
    log.info("retention removed %d partitions and %d raw objects; record %s", len(plan.partitions), len(plan.objects), record)
    return record


def _remove_objects(plan: RetentionPlan) -> None:
    """Delete the plan's raw objects no run stored since the plan holds too (read again under the lock),
    nor a run whose manifest changed since (stored again: found in review, a new attempt's objects went);
    the others go to ``plan.kept_after_plan``."""
    by_store: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for obj in plan.objects:
        by_store.setdefault((obj["store"], obj.get("prefix") or ""), []).append(obj)
    for (root, prefix), objs in by_store.items():
        store = LocalStore(Path(root), prefix)
        with store.lock(exclusive=True):  # no run is being stored meanwhile (LocalStore.put_run_dir)
            holders, digests, note = _holders(store)  # read again: a run stored since the plan may share an object
            for obj in objs:
                others = sorted(set(holders.get(obj["key"], [])) - set(obj["runs"])) if not note else ["?"]
                planned = obj.get("manifests") or {}
                again = sorted(r for r in obj["runs"] if r in planned and digests.get(r) != planned[r])
                if others or again:
                    plan.kept_after_plan.append(obj)
                    plan.notes.append(f"{obj['key']}: kept ({note})" if note else
                                      f"{obj['key']}: kept, now also held by {', '.join(others)}" if others else
                                      f"{obj['key']}: kept, {', '.join(again)} stored again since the plan")
                    continue
                store.delete_key(obj["key"])


def _pull_shared(home: Path) -> None:
    """With shared state: the ``published/`` aliases, ``delete``'s tombstones and earlier passes' records
    every pod shares, into ``home`` before a plan reads them (a no-op without it). The records too: a run an
    earlier pass removed ages on from its record (``_retention_ages``), which a fresh pod's home otherwise
    lacked (found in the re-read)."""
    from benchrun.sharedstate import pull_paths
    from benchrun.warehouse.removed import pull_removed

    pull_removed(home)
    pull_paths(home, "published/")


def _push_shared(home: Path, record: Path) -> None:
    """With shared state: the pass's record and the tombstones this home holds, to the shared prefix
    (``rebuild-warehouse`` and the next pass on any pod read them; a no-op without it)."""
    from benchrun.sharedstate import push_paths
    from benchrun.warehouse.removed import DELETED_DIR, DIR_NAME

    push_paths(home, record.relative_to(home).as_posix(), f"{DIR_NAME}/{DELETED_DIR}/")
