"""An Iceberg table's files looked after: those it no longer references removed (what snapshot
expiry leaves behind), and damaged data files taken out of it (:func:`drop_damaged`).

pyiceberg 0.12's ``expire_snapshots`` rewrites the table metadata only; it never deletes a file
(measured: after about ten rebuilds of one run and an expiry of 22 snapshots a table, 241 parquet
files, 9.7 MB, lay under the tables for 11 live ones, and after ``delete`` plus expiry two files
still held every request row of the deleted run). pyiceberg has no orphan-file removal, so it is
written here, as Iceberg's own ``remove_orphan_files`` and ``expire_snapshots`` (Java, Spark) do it:
every file under the table's ``data/`` and every manifest and manifest list under ``metadata/``
that no snapshot still in the metadata (tagged ones included) references is deleted — but only
once it is older than a grace period, so the files of a commit in flight elsewhere (written
before the commit that references them) are never taken. The table's metadata JSON files are
left to Iceberg's own ``write.metadata.previous-versions-max``.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# A writer's files exist before the commit that references them: a commit takes seconds, so a file
# an hour old that no snapshot names is left over (Iceberg's Spark action waits three days by
# default; benchrun's writers are its own, whose commits are bounded by COMMIT_ATTEMPTS).
GRACE = dt.timedelta(hours=1)


@dataclass(frozen=True)
class Removed:
    """What one table's cleanup removed (or, in a dry run, would)."""

    files: int
    bytes: int


def referenced(tbl: Any, expiring: frozenset[int] = frozenset()) -> set[str]:
    """Every file path a snapshot still in ``tbl``'s metadata (less ``expiring``) needs: its manifest
    list, its manifests and their live data files."""
    io = tbl.io
    out: set[str] = set()
    seen_manifests: set[str] = set()
    for snap in tbl.snapshots():
        if snap.snapshot_id in expiring:
            continue
        if snap.manifest_list:
            out.add(snap.manifest_list)
        for manifest in snap.manifests(io):
            out.add(manifest.manifest_path)
            if manifest.manifest_path in seen_manifests:
                continue
            seen_manifests.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
                out.add(entry.data_file.file_path)
    return out


def _normal(path: str, tbl: Any) -> str:
    """A path as the table's file system names it (no scheme), to compare listings with references."""
    return tbl.io.parse_location(path, tbl.io.properties)[2]


def remove_unreferenced(tbl: Any, *, grace: dt.timedelta = GRACE, now: dt.datetime | None = None,
                        dry_run: bool = False, expiring: frozenset[int] = frozenset()) -> Removed:
    """Delete the files under ``tbl``'s ``data/`` and its ``metadata/*.avro`` that no snapshot
    references and that are older than ``grace``; what was (or would be) removed. ``expiring``:
    snapshots a dry run of expiry would expire, counted as gone."""
    from pyarrow.fs import FileSelector, FileType

    io = tbl.io
    scheme, netloc, root = io.parse_location(tbl.location(), io.properties)
    fs = io.fs_by_scheme(scheme, netloc)
    keep = {_normal(p, tbl) for p in referenced(tbl, expiring)}
    cutoff = (now or dt.datetime.now(dt.timezone.utc)) - grace
    files = n_bytes = 0
    for sub, suffixes in (("data", (".parquet",)), ("metadata", (".avro",))):
        try:
            listing = fs.get_file_info(FileSelector(f"{root.rstrip('/')}/{sub}", recursive=True, allow_not_found=True))
        except FileNotFoundError:
            continue
        for info in listing:
            if info.type != FileType.File or not info.path.endswith(suffixes) or info.path in keep:
                continue
            mtime = info.mtime
            if mtime is not None and (mtime if mtime.tzinfo else mtime.replace(tzinfo=dt.timezone.utc)) > cutoff:
                continue  # a commit in flight may be about to reference it
            files += 1
            n_bytes += info.size or 0
            if not dry_run:
                try:
                    fs.delete_file(info.path)
                except FileNotFoundError:  # another maintenance got there first
                    pass
    if files:
        log.info("%s: %s %d unreferenced file(s), %d bytes", tbl.name(), "would remove" if dry_run else "removed",
                 files, n_bytes)
    return Removed(files, n_bytes)


@dataclass(frozen=True)
class Dropped:
    """A damaged data file taken out of its table: which, why, and the run ids its rows could hold
    (the file's recorded bounds on ``run_id``; None when it records none: any run)."""

    table: str
    path: str
    problem: str
    run_ids: tuple[str, str] | None

    def may_hold(self, run_id: str) -> bool:
        return self.run_ids is None or self.run_ids[0] <= run_id <= self.run_ids[1]


def size_problem(path: str, recorded: int) -> str:
    """For a local file, a size other than the manifest's (a truncated file); "" otherwise (and for a
    file in object storage, whose size is not looked up). FileNotFoundError when it is gone."""
    if "://" in path and not path.startswith("file://"):
        return ""
    size = Path(path.removeprefix("file://")).stat().st_size
    return "" if size == recorded else f"{size} bytes, the manifest records {recorded}"


def _damage(tbl: Any, df: Any) -> str:
    """Why ``df`` cannot be read ("" when it reads): a local size other than the manifest's, a footer
    that does not parse, a file that is gone. Other I/O errors (a store that is down) raise."""
    import pyarrow.parquet as pq

    path = df.file_path
    try:
        problem = size_problem(path, df.file_size_in_bytes)
    except FileNotFoundError:
        return "the file is gone"
    if problem:
        return problem
    try:
        with tbl.io.new_input(path).open() as fh:
            pq.ParquetFile(fh).metadata
    except FileNotFoundError:
        return "the file is gone"
    except ValueError as exc:  # pyarrow's ArrowInvalid: not parquet (a truncated footer, other bytes)
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return ""


def _run_id_bounds(tbl: Any, df: Any) -> tuple[str, str] | None:
    try:
        fid = tbl.schema().find_field("run_id").field_id
        lo, hi = (df.lower_bounds or {}).get(fid), (df.upper_bounds or {}).get(fid)
        return (bytes(lo).decode("utf-8"), bytes(hi).decode("utf-8")) if lo is not None and hi is not None else None
    except (ValueError, KeyError, UnicodeDecodeError):
        return None


def drop_damaged(tbl: Any, table: str) -> list[Dropped]:
    """Take the data files of ``tbl``'s current snapshot that cannot be read out of the table, in one
    commit (their rows are unreadable already; the runs they held are curated again from the evidence
    by the caller). Before, a re-curation or a delete that had to rewrite such a file's day failed with
    pyarrow's error, so `rebuild-warehouse`, the fix the query notes give, could not repair it."""
    from benchrun.warehouse import laketx

    if tbl.current_snapshot() is None:
        return []
    found = []
    for task in tbl.scan().plan_files():
        problem = _damage(tbl, task.file)
        if problem:
            found.append((task.file, Dropped(table, task.file.file_path, problem, _run_id_bounds(tbl, task.file))))
    if not found:
        return []
    with laketx.Transaction(tbl) as tx:
        with tx.update_snapshot(snapshot_properties={"benchrun.dropped-damaged": str(len(found))}).overwrite() as ow:
            for df, _ in found:
                ow.delete_data_file(df)
    for _, d in found:
        log.warning("%s: damaged data file %s taken out of the table (%s)", table, d.path, d.problem)
    return [d for _, d in found]
