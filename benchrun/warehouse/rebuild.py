"""Re-create the warehouse's facts and dimensions from the run directories, or from the
artifact store for runs whose directory is gone (the same curation the assets run)."""

from __future__ import annotations

import datetime as dt
import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError
from benchrun.paths import validate_run_id

log = logging.getLogger(__name__)

LOCAL_LAYOUTS = (None, "objects/${RUN_ID}/")


@dataclass
class RebuildReport:
    """Rows written per run, where each run came from, the runs that could not be rebuilt, and those
    left out because they were removed on purpose."""

    rebuilt: dict[str, dict[str, int]] = field(default_factory=dict)
    source: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # removed on purpose (delete, retention): why
    # runs whose directory's source files are not its stored evidence (curated from the stored copy): which
    diverged: dict[str, list[str]] = field(default_factory=dict)
    dropped: list[Any] = field(default_factory=list)  # damaged data files taken out first (lakefiles.Dropped)


def _restore(store, run_id: str, target: Path, manifest=None, status: dict | None = None) -> Path:
    """The run directory as stored (every object read back and checked against its sha256): the
    latest stored version, or ``manifest``'s; with ``status`` as its status.json (the live status of a
    run whose directory is still there), else the status the stored evidence gives."""
    manifest = manifest or store.load_manifest(run_id)
    run_dir = target / "runs" / run_id
    for entry in manifest.objects:
        dest = (run_dir / entry.path).resolve()
        if not dest.is_relative_to(run_dir.resolve()):
            raise BenchrunError(f"{store.uri}: manifest of {run_id} names {entry.path!r} outside the run directory")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(store.get(manifest, entry.path))
    # status.json is live, never stored: rebuild what curation reads from the stored evidence.
    import json

    if status is None:
        status = {"run_id": run_id, "artifact_manifest_digest": manifest.digest, **_stored_status(run_dir, run_id)}
    (run_dir / "status.json").write_text(json.dumps(status))
    return run_dir


def _stored_status(run_dir: Path, run_id: str) -> dict[str, object]:
    """The status fields the stored evidence holds: from the pinned spec its name, intent and the two
    digests (as submission computed them; not where the spec names a dataset without its sha256, which
    submission filled in from the file); from manifest.json (sealed as the run ended) the outcome, the
    phase that follows from it (``lifecycle.finalize``), as the finish the time it was sealed, and the
    start status.json had (``RunDir.write_manifest`` records it, so that the rows rebuilt from the
    store carry the start the run directory's rows were partitioned and signed by; for a run sealed
    before it did, the environment's capture time, as the run started); the creation time where the
    run id is the one minted from it (``<name>-<yyyymmddhhmmss>-<digest8>``, the pinned spec's digest).
    Fields the evidence does not hold stay absent (null in the rows), never guessed."""
    import json
    import re

    from benchrun.spec.digest import spec_digest, workload_spec_digest
    from benchrun.spec.loader import YamlLoadError, load_documents

    def read(rel: str) -> dict:
        path = run_dir / rel
        try:
            doc = json.loads(path.read_text(encoding="utf-8")) if rel.endswith(".json") \
                else load_documents(path.read_bytes())[0].data
        except (OSError, ValueError, IndexError, YamlLoadError) as exc:
            log.warning("run %s: stored %s not readable (%s); the fields it gives are left null", run_id, rel, exc)
            return {}
        return doc if isinstance(doc, dict) else {}

    def part(doc: dict, *keys: str) -> dict:
        for key in keys:
            doc = doc.get(key) if isinstance(doc, dict) else None
        return doc if isinstance(doc, dict) else {}

    out: dict[str, object] = {}
    spec = read(f"structured/{run_id}_spec.yaml")
    if spec:
        intent = part(spec, "spec", "intent")
        out.update(name=part(spec, "metadata").get("name"), benchmark_class_requested=intent.get("benchmarkClass"),
                   workload_type=intent.get("workloadType"), cadence=intent.get("cadence"),
                   scheduler_path_requested=intent.get("schedulerPath"),
                   variable_under_test=part(spec, "spec", "comparison").get("variableUnderTest"))
        dataset = part(spec, "spec", "workload", "dataset")
        if not dataset.get("path") or dataset.get("sha256"):
            out.update(spec_digest=spec_digest(spec), workload_spec_digest=workload_spec_digest(spec))
            minted = re.fullmatch(r".+-(\d{14})-([0-9a-f]{8})(?:-\d+)?", run_id)
            if minted and spec_digest(spec).startswith(minted.group(2)):
                created = dt.datetime.strptime(minted.group(1), "%Y%m%d%H%M%S").replace(tzinfo=dt.timezone.utc)
                out["created_utc"] = created.isoformat()
    sealed = read("manifest.json")
    outcome = sealed.get("status")
    if outcome in ("succeeded", "partial", "failed"):  # lifecycle.record_evidence writes it
        out.update(outcome=outcome, phase="Failed" if outcome == "failed" else "Succeeded",
                   finished_utc=sealed.get("timestamp_utc"))
    started = sealed.get("started_utc") or read(f"structured/{run_id}_environment.json").get("captured_utc")
    if started:  # the run's first start (RunDir.write_manifest records it): its rows were filed under it
        out["started_utc"] = out["first_started_utc"] = started
    return {k: v for k, v in out.items() if v is not None}


def _created(rd: Any) -> dt.datetime | None:
    """A run directory's creation time (None where its status does not read or say)."""
    from benchrun.warehouse.sources import parse_ts

    try:
        return parse_ts(rd.read_status().get("created_utc"))
    except BenchrunError:
        return None


def _running(home: Path, rd: Any) -> str:
    """Why a run directory is not curated now: its run is still going (not in a final phase, and a
    live process claims it: its own warehouse step curates it when it gets there); '' otherwise."""
    from benchrun.liveness import describe, live_claim
    from benchrun.rundir import TERMINAL_PHASES

    if rd is None:
        return ""
    try:
        phase = rd.read_status().get("phase")
    except BenchrunError:
        return ""
    claim = None if phase in TERMINAL_PHASES else live_claim(home, rd.run_id)
    return (f"still {phase}: {describe(claim)} runs it, and it curates the run itself when it gets there; "
            "rebuild it after it ends") if claim else ""


def _canceled_unsealed(rd: Any) -> str:
    """Why a run directory is not curated: canceled before its evidence was sealed (no manifest.json),
    as the run itself left it (a canceled run never reaches its warehouse step); '' otherwise."""
    if rd is None or (rd.path / "manifest.json").is_file():
        return ""
    try:
        phase = rd.read_status().get("phase")
    except BenchrunError:
        return ""
    return ("canceled before its evidence was sealed (no manifest.json): a canceled run is not curated, and its "
            "partial files are not evidence; `benchrun show` reads them") if phase == "Canceled" else ""


def rebuild_warehouse(home: Path, run_ids: list[str] | None = None) -> RebuildReport:
    """Curate every run (or ``run_ids``) again, then refresh the views; one failure is reported,
    the other runs are still rebuilt. A run ``benchrun delete`` or retention removed is skipped, with why."""
    from benchrun.rundir import list_runs
    from benchrun.store import open_store
    from benchrun.warehouse import lake
    from benchrun.warehouse.curate import curate_run
    from benchrun.warehouse.lakecatalog import MovedHomeError, reset_moved
    from benchrun.warehouse.migrate import has_parquet_layout, migrate_parquet, write_marker
    from benchrun.warehouse.removed import pull_removed, removed_runs
    from benchrun.warehouse.views import refresh_views

    home = Path(home)
    pull_removed(home)
    if lake.enabled():
        if run_ids:
            try:
                lake.catalog(home)
            except MovedHomeError as exc:
                raise BenchrunError(f"{exc}; with the run ids given only those would be rebuilt: run it without them"
                                    ) from exc
        elif reset_moved(home) is not None and has_parquet_layout(home):
            done = migrate_parquet(home)  # runs only the parquet layout of an earlier release still holds
            if not done.differ:
                write_marker(home, done)
    on_disk = {rd.run_id: rd for rd in list_runs(home)}
    # The local layouts benchrun writes: the shared default and one prefix per run.
    stores = [open_store(t, home) for t in LOCAL_LAYOUTS]
    where: dict[str, object] = {}
    for candidate in stores:
        try:
            for run_id in candidate.list_manifest_run_ids():
                where.setdefault(run_id, candidate)
        except BenchrunError as exc:
            log.warning("%s: %s", candidate.uri, exc)
    stored = set(where)
    wanted = [validate_run_id(r) for r in run_ids] if run_ids else sorted(set(on_disk) | stored)
    removed = removed_runs(home, {r: _created(rd) for r, rd in on_disk.items()})
    report = RebuildReport()
    if lake.enabled():
        # a damaged data file first: its rows are unreadable, and every re-curation of its day must rewrite it
        report.dropped = _drop_damaged(home)
        wanted += [r for r in sorted(set(on_disk) | stored)
                   if r not in wanted and any(d.may_hold(r) for d in report.dropped)]
    # Each table's commit deletes the run's rows of every day and appends the new ones in one transaction
    # (a run curated before it started, or restored from the store, whose status is not stored, may have
    # rows on another day than its start now says): a reader never sees the run without rows, and a
    # curation that fails or is killed leaves each table with the old rows or the new, never none.
    every_day = lake.enabled()
    for run_id in wanted:
        if run_id in removed:
            report.skipped[run_id] = removed[run_id]
            continue
        live = _running(home, on_disk.get(run_id)) or _canceled_unsealed(on_disk.get(run_id))
        if live:
            report.skipped[run_id] = live
            continue
        try:
            if run_id in on_disk:
                _from_directory(report, on_disk[run_id], home, stores, every_day)
            elif run_id in stored:
                with tempfile.TemporaryDirectory(prefix=f".rebuild-{run_id}-", dir=home) as tmp:
                    run_dir = _restore(where[run_id], run_id, Path(tmp))
                    report.rebuilt[run_id] = curate_run(run_dir, home, every_day=every_day)
                report.source[run_id] = f"{where[run_id].uri} (no run directory)"
            else:
                report.failed[run_id] = (f"no run directory under {home / 'runs'} and no stored manifest in "
                                         + ", ".join(x.uri.replace("${RUN_ID}", run_id) for x in stores))
        except BenchrunError as exc:
            report.failed[run_id] = str(exc)
        except (FileNotFoundError, ValueError) as exc:  # pyarrow's errors reading a file: this run, not every run
            first = str(exc).splitlines()[0] if str(exc) else ""
            report.failed[run_id] = f"{type(exc).__name__}: {first}"
    refresh_views(home)
    return report


def _drop_damaged(home: Path) -> list[Any]:
    from pyiceberg.exceptions import CommitFailedException

    from benchrun.warehouse import lake, lakefiles

    dropped: list[Any] = []
    for table in lake.current_tables(home):
        try:
            dropped += lakefiles.drop_damaged(lake.load_or_create(lake.catalog(home), table), table)
        except CommitFailedException as exc:
            raise BenchrunError(f"rebuild-warehouse: taking a damaged data file out of {table} lost a race with "
                                f"another writer ({exc}); run it again") from None
    return dropped


def _from_directory(report: RebuildReport, rd: Any, home: Path, stores: list, every_day: bool) -> None:
    """Curate a run from its directory, each file curation reads re-hashed against the run's stored
    evidence first; where one differs (edited, added or removed since the run was stored), from the
    stored copy instead (with the directory's live status), naming the files; a BenchrunError naming
    them when the stored copy does not read back intact either."""
    from benchrun.warehouse.curate import curate_run
    from benchrun.warehouse.sources import source_mismatches, stored_evidence

    evidence = stored_evidence(rd.path, home, also=tuple(stores))
    differ = source_mismatches(rd.path, evidence[1]) if evidence else []
    if not differ:
        report.rebuilt[rd.run_id] = curate_run(rd.path, home, every_day=every_day)
        report.source[rd.run_id] = str(rd.path)
        return
    store, manifest = evidence
    try:
        with tempfile.TemporaryDirectory(prefix=f".rebuild-{rd.run_id}-", dir=home) as tmp:
            run_dir = _restore(store, rd.run_id, Path(tmp), manifest, status=rd.read_status())
            report.rebuilt[rd.run_id] = curate_run(run_dir, home, every_day=every_day)
    except BenchrunError as exc:
        raise BenchrunError(f"{rd.path}: not its stored evidence ({'; '.join(differ)}), and the stored copy does "
                            f"not stand in for it: {exc}; nothing curated") from exc
    report.diverged[rd.run_id] = differ
    report.source[rd.run_id] = (f"{store.uri.replace('${RUN_ID}', rd.run_id)} (the stored evidence: {len(differ)} "
                                f"file(s) of {rd.path} differ from it)")
