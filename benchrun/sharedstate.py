"""Shared state in object storage: run directories and pinned specs mirrored under one S3 prefix, so
the daemon's, the run worker's and the controller's pods see one run. The warehouse is not mirrored:
its Iceberg tables (the default) are shared through their Postgres catalog and S3 location, which the
shared state then requires; only the parquet layout of earlier releases
(``BENCHRUN_WAREHOUSE_FORMAT=parquet``) has its partitions mirrored here as well. Beside the runs:
``published/`` aliases, the change-point fact and retention's and delete's records (:func:`pull_paths`).

``BENCHRUN_SHARED_STATE=s3://bucket/prefix`` switches it on (endpoint and credentials as for
the artifact store: ``BENCHRUN_S3_ENDPOINT_URL``, ``AWS_*``). Unset, every function here
returns at once and nothing but ``$BENCHRUN_HOME`` is touched: the local default is unchanged.

``$BENCHRUN_HOME`` stays the working copy (suites, DuckDB and the report write files): a
process pulls what another pod wrote before it reads, and pushes after it writes. Keys
mirror the home: ``<prefix>/runs/<run_id>/...``, ``<prefix>/specs/sha256/<hex>.yaml``,
``<prefix>/warehouse/<table>/run_id=<id>/part.parquet``. Hand-written over boto3 (no
library syncs a directory with S3 without a CLI); every download lands through a
temporary name and a rename.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from benchrun.errors import BenchrunError
from benchrun.fsio import atomic_path, atomic_write_bytes
from benchrun.paths import SCRATCH_PREFIX, is_run_id
from benchrun.stats.cpfact import FACT_RELPATH
from benchrun.stats.cpindex import index_status
from benchrun.urlsafe import has_credentials, redact, redact_in

log = logging.getLogger(__name__)

ENV = "BENCHRUN_SHARED_STATE"
# A run's final phases (``rundir.TERMINAL_PHASES`` is this set), and the status fields that move
# with its phase: a merge that keeps another pod's final phase keeps these from that pod as well.
FINAL_PHASES = frozenset({"Succeeded", "Failed", "Rejected", "Canceled"})
PHASE_FIELDS = ("phase", "message", "outcome", "outcome_measured", "started_utc", "first_started_utc",
                "finished_utc")
# Never mirrored: another process's temporary files, locks, and the DuckDB file (the views are
# rebuilt from the parquet wherever they are needed; DuckDB allows one writer process).
_SKIP_SUFFIXES = (".tmp", ".lock", ".duckdb", ".duckdb.wal")


@dataclass(frozen=True)
class SharedState:
    """One S3 prefix that mirrors ``$BENCHRUN_HOME``."""

    bucket: str
    prefix: str  # "" or ends with "/"
    client: Any

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def key(self, rel: str) -> str:
        return f"{self.prefix}{rel}"

    def push_file(self, home: Path, rel: str) -> None:
        path = home / rel
        self._call(f"upload {rel}", lambda: self.client.upload_file(str(path), self.bucket, self.key(rel)))

    def push_status(self, home: Path, rel: str) -> None:
        """Upload a run's status.json unless another pod wrote the shared copy since this home
        pushed or pulled it (it is not the recorded base), or it is as late (``status_seq``) as
        this home's or later: then :class:`StaleStatus`, and the shared copy stays. Read, compare,
        then a conditional write (``If-Match`` on the ETag read, ``If-None-Match: *`` when there
        was none), so a status another pod writes between the read and the write is never
        replaced either: it is read again and compared again.

        The recorded base matters because a later ``status_seq`` alone does not show that a copy
        was made from the shared one: two homes that each wrote twice since the same pull hold the
        same ``status_seq``, and one that wrote three times would replace the other's two."""
        data = (home / rel).read_bytes()
        local = _seq_of(data)
        try:
            base: bytes | None = _base_path(home, rel).read_bytes()
        except OSError:
            base = None  # never pushed or pulled from here: the status_seq comparison alone
        for _ in range(_CONFLICT_TRIES):
            current = self._get(rel)
            if current is None:
                condition = {"IfNoneMatch": "*"}
            else:
                etag, held = current
                if held == data:  # already there (pushed before, or pulled and not changed since)
                    _record_base(home, rel, data)
                    return
                if _seq_of(held) >= local or (base is not None and held != base):
                    raise StaleStatus(
                        f"shared state {self.uri}: {rel} there (status_seq {_seq_of(held)}; this home's "
                        f"{local}) was written by another pod since this home read it; the shared status "
                        "is kept. Pull the run and make the change again", held)
                condition = {"IfMatch": etag}
            if self._put_if(rel, data, condition):
                _record_base(home, rel, data)
                return
        raise BenchrunError(f"shared state {self.uri}: {rel} changed {_CONFLICT_TRIES} times while this home "
                            "wrote it; push the run again")

    def written_since(self, home: Path, rel: str) -> bool:
        """Whether another pod wrote ``rel`` (a status.json) since this home last pushed or pulled it:
        the shared copy is neither the recorded base nor this home's own (False with no base recorded
        or no shared copy: nothing to tell it from)."""
        try:
            base = _base_path(home, rel).read_bytes()
        except OSError:
            return False
        current = self._get(rel)
        if current is None:
            return False
        held = current[1]
        try:
            mine = (home / rel).read_bytes()
        except OSError:
            mine = None
        return held != base and held != mine

    def _get(self, rel: str) -> tuple[str, bytes] | None:
        """``(ETag, bytes)`` of an object, None when there is none."""
        import botocore.exceptions as bex

        def get() -> tuple[str, bytes] | None:
            try:
                resp = self.client.get_object(Bucket=self.bucket, Key=self.key(rel))
            except bex.ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                    return None
                raise
            return resp["ETag"], resp["Body"].read()

        return self._call(f"read {rel}", get)

    def _put_if(self, rel: str, data: bytes, condition: dict[str, str]) -> bool:
        """PutObject under ``condition``; False when the object changed since it was read."""
        import botocore.exceptions as bex

        def put(extra: dict[str, str]) -> bool:
            try:
                self.client.put_object(Bucket=self.bucket, Key=self.key(rel), Body=data,
                                       ContentType="application/json", **extra)
            except bex.ClientError as exc:
                err = exc.response.get("Error", {}).get("Code", "")
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                if err in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
                    return False
                if err == "NotImplemented":
                    # An S3-compatible server without conditional writes (AWS S3, MinIO and moto
                    # have them): the status_seq comparison just made is the only guard left, and a
                    # pod writing between that read and this write is not seen.
                    log.warning("shared state %s: conditional writes not supported; %s written after "
                                "the status_seq check only", self.uri, rel)
                    return put({})
                raise
            return True

        return self._call(f"upload {rel}", lambda: put(condition))

    def push_tree(self, home: Path, rel: str, *, skip: frozenset[str] = frozenset(),
                  pushed: list[str] | None = None) -> int:
        """Upload every regular file under ``home/rel`` but those in ``skip`` (paths relative to the
        home); how many. Symlinks (to files or folders) are never followed: a link a suite left in
        its run directory could name any file the process can read (the home's signing key), and
        the shared prefix is read by every pod."""
        root = home / rel
        count = 0
        found = []
        for top, dirs, files in os.walk(root) if root.is_dir() and not root.is_symlink() else []:
            # nor a suite's scratch folder (benchrun.paths.is_scratch: fio's test files, never evidence)
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(top, d)) and not d.startswith(SCRATCH_PREFIX)]
            found += [Path(top) / f for f in files if not os.path.islink(os.path.join(top, f))]
        for path in sorted(found):
            if path.name.startswith(".") or path.name.endswith(_SKIP_SUFFIXES) or not path.is_file():
                continue
            if path.relative_to(home).as_posix() in skip:
                continue
            self.push_file(home, path.relative_to(home).as_posix())
            if pushed is not None:
                pushed.append(path.relative_to(home).as_posix())
            count += 1
        return count

    def put_marker(self, rel: str) -> None:
        """An empty object at ``rel`` (an index key, :mod:`benchrun.stats.cpindex`)."""
        self._call(f"upload {rel}", lambda: self.client.put_object(Bucket=self.bucket, Key=self.key(rel), Body=b""))

    def list_keys(self, rel: str) -> list[str]:
        """The paths (relative to the home) of the objects under ``<prefix><rel>``."""
        paginator = self.client.get_paginator("list_objects_v2")
        pages = self._call(f"list {rel}", lambda: list(paginator.paginate(Bucket=self.bucket, Prefix=self.key(rel))))
        return [obj["Key"][len(self.prefix):] for page in pages for obj in page.get("Contents", [])]

    def prune(self, rel: str, keep: set[str]) -> list[str]:
        """Delete the objects under ``<prefix><rel>`` whose path (relative to the home) is not in ``keep``:
        what the home no longer holds there; the paths deleted."""
        gone = [self.key(r) for r in self.list_keys(rel) if r not in keep]
        for i in range(0, len(gone), 1000):
            batch = [{"Key": k} for k in gone[i:i + 1000]]
            self._call(f"delete under {rel}", lambda batch=batch: self.client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True}))
        return [k[len(self.prefix):] for k in gone]

    def list_runs(self) -> list[str]:
        """The run ids the prefix holds a folder of (``runs/<run_id>/``), in order."""
        top = self.key("runs/")
        paginator = self.client.get_paginator("list_objects_v2")
        pages = self._call("list runs/", lambda: list(paginator.paginate(Bucket=self.bucket, Prefix=top, Delimiter="/")))
        found = {c["Prefix"][len(top):].rstrip("/") for page in pages for c in page.get("CommonPrefixes", [])}
        return sorted(r for r in found if is_run_id(r))

    def pull_tree(self, home: Path, rel: str, *, skip: frozenset[str] = frozenset(),
                  only: Callable[[str], bool] | None = None) -> int:
        """Download every object under ``<prefix><rel>`` into ``home`` but those in ``skip``
        (paths relative to the home), and with ``only`` just those it takes; how many.

        A read-only local file with the same size is kept (pinned specs and stored evidence
        never change); a local ``status.json`` later than the shared one (its ``status_seq``,
        ``RunDir.write_status``) is kept too: a status this home wrote and has not pushed yet
        is not lost to an older copy; everything else is replaced by the shared copy.
        """
        count = 0
        paginator = self.client.get_paginator("list_objects_v2")
        pages = self._call(f"list {rel}", lambda: list(paginator.paginate(Bucket=self.bucket, Prefix=self.key(rel))))
        for page in pages:
            for obj in page.get("Contents", []):
                relative = obj["Key"][len(self.prefix):]
                if relative in skip or relative.endswith("/") or (only is not None and not only(relative)):
                    continue  # (a folder marker: a console's "create folder", s3fs; no file to pull)
                target = _inside(home, relative)
                if target.is_file() and not os.access(target, os.W_OK) and target.stat().st_size == obj["Size"]:
                    continue
                try:
                    with atomic_path(target) as tmp:
                        self._call(f"download {relative}",
                                   lambda: self.client.download_file(self.bucket, obj["Key"], str(tmp)))
                        if target.name == "status.json" and _status_seq(target) > _status_seq(tmp):
                            raise _KeepLocal  # the temporary copy goes, the local status stays
                        if target.exists() and not os.access(target, os.W_OK):
                            target.chmod(0o644)
                        pulled = tmp.read_bytes() if target.name == "status.json" else None
                except _KeepLocal:
                    log.info("%s: the local status is later than the shared one; kept", relative)
                    continue
                if pulled is not None:
                    _record_base(home, relative, pulled)
                count += 1
        return count

    def read_status(self, run_id: str) -> dict[str, Any] | None:
        """A run's status.json as the shared prefix holds it (None: no such run there), read
        without writing anything into a home (a connection error, as every other call here, raises
        BenchrunError with the endpoint redacted)."""
        from benchrun.paths import validate_run_id

        got = self._get(f"runs/{validate_run_id(run_id)}/status.json")
        return None if got is None else json.loads(got[1])

    def _call(self, what: str, fn: Any) -> Any:
        import boto3.exceptions as b3ex
        import botocore.exceptions as bex

        try:
            return fn()
        except (bex.BotoCoreError, bex.ClientError, b3ex.Boto3Error) as exc:  # S3UploadFailedError is boto3's
            shown = redact_in(str(exc), os.environ.get("BENCHRUN_S3_ENDPOINT_URL"))  # botocore names the endpoint
            raise BenchrunError(f"shared state {self.uri}: {what} failed ({type(exc).__name__}: {shown}); "
                                f"check {ENV}, BENCHRUN_S3_ENDPOINT_URL and the AWS_* credentials") from exc


def shared_state() -> SharedState | None:
    """The configured shared state, or None (the local default)."""
    uri = os.environ.get(ENV, "").strip()
    if not uri:
        return None
    if has_credentials(uri):  # else the bucket name would carry them into every message
        raise BenchrunError(f"{ENV}={redact(uri)!r} carries credentials (user:password@, or an '@' that may be "
                            "part of them): use s3://bucket/prefix, with the S3 credentials in AWS_* in the environment")
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise BenchrunError(f"{ENV}={uri!r}: use s3://bucket/prefix")
    prefix = parsed.path.strip("/")
    import boto3

    endpoint = os.environ.get("BENCHRUN_S3_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL") or None
    client = boto3.client("s3", endpoint_url=endpoint)
    return SharedState(parsed.netloc, f"{prefix}/" if prefix else "", client)


def push_run(run_dir: Path, home: Path, *, status_only: bool = False,
             merge: Callable[[dict[str, Any]], Any] | None = None) -> None:
    """After writing: the run directory (or just its status.json) and the run's warehouse
    partitions and pinned spec go to the shared prefix.

    A shared status.json as late as this home's or later (another pod wrote it since this home
    read it) is never replaced: ``merge`` (``RunDir.merge_shared_status``) is given it and writes
    the merged status here, which is then pushed; without ``merge`` :class:`StaleStatus` is raised."""
    shared = shared_state()
    if shared is None:
        return
    run_id = run_dir.name
    status = f"runs/{run_id}/status.json"
    if not status_only and files_behind(home, run_id):
        # this home read a later status alone (a sensor, the controller, `benchrun cancel` on another
        # machine) and holds the run's files as of before it, or none: only the status is its to push.
        # Before, a Failed or Canceled marked from such a home pushed its few files and pruned every
        # shared file it did not hold: the worker's results and logs (found in review)
        log.info("%s: this home holds the run's files as of an earlier status than the one it read; only the "
                 "status is pushed", status)
        status_only = True
    if not status_only and shared.written_since(home, status):
        # another pod wrote the run since this home read it: its files stand (this home's copy may be
        # a mid-run one), only the status is merged. Before, the files went first and the status
        # conflict was found after: a stale home marking the run Failed replaced the finished
        # run's results beside the Succeeded status it then kept (found in review).
        log.warning("%s: another pod wrote the run since this home read it; its files are kept, the status "
                    "merged", status)
        status_only = True
    if not status_only:
        # status.json goes last: a pod that pulls meanwhile and reads a finished phase then finds
        # every file the run finished with, never a terminal status beside half of them
        pushed: list[str] = []
        shared.push_tree(home, f"runs/{run_id}", skip=frozenset({status}), pushed=pushed)
        # the prefix mirrors the run as this home holds it: an earlier attempt's files, which this home
        # set aside under attempts/<k>/, no longer lie at their first paths there too (before, a pod that
        # pulled the run got both attempts' files mixed, a failed attempt beside the other's manifest)
        gone = shared.prune(f"runs/{run_id}/", set(pushed) | {status})
        if gone:
            log.info("runs/%s: %d shared file(s) this home no longer holds deleted (e.g. %s)", run_id, len(gone),
                     gone[0])
        warehouse = home / "warehouse"
        parts = sorted(warehouse.glob(f"*/run_id={run_id}")) if warehouse.is_dir() and not _iceberg_warehouse() else []
        for part in parts:
            shared.push_tree(home, part.relative_to(home).as_posix())
        pinned = _pinned_rel(run_dir)
        if pinned is not None and (home / pinned).is_file():
            shared.push_file(home, pinned)
    if status_only or (home / status).is_file():
        _push_status(shared, home, status, merge)


def _push_status(shared: SharedState, home: Path, rel: str, merge: Callable[[dict[str, Any]], Any] | None) -> None:
    """``rel`` (a status.json) to the shared prefix; a later shared copy is merged with ``merge``
    (which writes a status later than it into the home) and the push tried again."""
    for attempt in range(_CONFLICT_TRIES):
        try:
            shared.push_status(home, rel)
            index_status(shared, home / rel)  # a Succeeded run under its workload, for the report's history
            return
        except StaleStatus as exc:
            if merge is None or attempt == _CONFLICT_TRIES - 1:
                raise
            log.info("%s: another pod wrote the shared status; merging", rel)
            merge(exc.shared)
            _record_base(home, rel, exc.shared_bytes)  # the home's status is now made from it


def base_status(home: Path, run_id: str) -> dict[str, Any] | None:
    """The shared status.json this home last pushed or pulled for the run (None: none recorded):
    what the local status was made from, so a merge can tell this home's changes from another pod's."""
    try:
        return json.loads(_base_path(home, f"runs/{run_id}/status.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def merge_status(base: dict[str, Any], local: dict[str, Any], shared: dict[str, Any]) -> dict[str, Any]:
    """A three-way merge of a run's status: the shared copy, with every field (and every condition,
    by type) this home changed since ``base`` set as this home set it. ``status_seq`` is the later
    of the two; writing the result (``RunDir.write_status``) makes it later than both.

    One exception: when another pod moved the run to a final phase this home had not seen (the
    shared phase is final and not the base's), this home's phase change was decided on a stale
    copy (a deleted object's run marked Canceled after its worker made it Succeeded) and is
    dropped, with the fields and conditions that go with a phase: the final phase stands. A home
    that had seen the final phase (base and shared agree) still moves it on (a retry, or
    publication failing after Succeeded)."""
    if (shared.get("phase") in FINAL_PHASES and shared.get("phase") != base.get("phase")
            and local.get("phase") != base.get("phase")):
        local = {**local, **{k: base[k] for k in PHASE_FIELDS if k in base}, "conditions": base.get("conditions")}
        local = {k: v for k, v in local.items() if k in base or k not in PHASE_FIELDS}
    merged = _merge_fields(base, local, shared, skip=("status_seq", "conditions"))
    by_type = [{str(c.get("type")): c for c in doc.get("conditions") or [] if isinstance(c, dict)}
               for doc in (base, local, shared)]
    conditions = _merge_fields(*by_type)
    order = [*by_type[2], *(t for t in by_type[1] if t not in by_type[2])]
    merged["conditions"] = [conditions[t] for t in order if t in conditions]
    merged["status_seq"] = max(_seq_of_doc(local), _seq_of_doc(shared))
    return merged


def _merge_fields(base: dict[str, Any], local: dict[str, Any], shared: dict[str, Any],
                  skip: tuple[str, ...] = ()) -> dict[str, Any]:
    merged = dict(shared)
    for name in {*base, *local} - set(skip):
        if local.get(name, _ABSENT) == base.get(name, _ABSENT):
            continue  # not changed here: the shared value stands
        if name in local:
            merged[name] = local[name]
        else:
            merged.pop(name, None)
    return merged


_ABSENT = object()
_CONFLICT_TRIES = 5


class StaleStatus(BenchrunError):
    """The shared status.json is as late as the one a push would write, or later: not replaced."""

    def __init__(self, message: str, shared_bytes: bytes = b"{}") -> None:
        super().__init__(message)
        self.shared_bytes = shared_bytes
        try:
            self.shared: dict[str, Any] = json.loads(shared_bytes)
        except ValueError:
            self.shared = {}


def _base_path(home: Path, rel: str) -> Path:
    # beside the home's status locks, outside the run directory: not evidence, never mirrored
    return home / "locks" / "shared" / rel


def _read_base(home: Path, rel: str) -> bytes | None:
    try:
        return _base_path(home, rel).read_bytes()
    except OSError:
        return None


def _files_behind_path(home: Path, run_id: str) -> Path:
    return _base_path(home, f"runs/{run_id}/files-behind")


def files_behind(home: Path, run_id: str) -> bool:
    """Whether this home read the run's status alone since it last pulled the whole run: its run
    files (if any) are older than the status it holds, and are not pushed."""
    return _files_behind_path(home, run_id).exists()


def _mark_files_behind(home: Path, run_id: str, behind: bool) -> None:
    path = _files_behind_path(home, run_id)
    if behind:
        atomic_write_bytes(path, b"")
    else:
        path.unlink(missing_ok=True)


def _record_base(home: Path, rel: str, data: bytes) -> None:
    try:
        atomic_write_bytes(_base_path(home, rel), data)
    except OSError as exc:  # a later conflict then cannot merge and is refused
        log.warning("%s: the shared status this home holds could not be recorded (%s)", rel, exc)


def _seq_of(data: bytes) -> int:
    try:
        return _seq_of_doc(json.loads(data))
    except ValueError:  # (UnicodeDecodeError is one)
        return 0


def _seq_of_doc(doc: Any) -> int:
    try:
        return int(doc.get("status_seq") or 0)
    except (AttributeError, TypeError, ValueError):
        return 0


def pull_run(run_id: str, home: Path, *, status_only: bool = False, warehouse: bool = False) -> None:
    """Before reading a run another pod may have written: its directory (or status.json),
    and with ``warehouse`` every warehouse partition (history for baselines and change points)."""
    from benchrun.paths import validate_run_id

    shared = shared_state()
    if shared is None:
        return
    validate_run_id(run_id)
    if status_only:
        rel = f"runs/{run_id}/status.json"
        before = _read_base(home, rel)
        shared.pull_tree(home, rel)
        if _read_base(home, rel) != before:  # another pod's status came, not the files it wrote with it
            _mark_files_behind(home, run_id, True)
        return
    # status.json first, the rest listed after it: push_run uploads it last, so every file of the
    # push whose status is read here is in the listing (listed first, a finished status could come
    # down beside a listing taken before most of its files were up)
    status = f"runs/{run_id}/status.json"
    shared.pull_tree(home, status)
    shared.pull_tree(home, f"runs/{run_id}/", skip=frozenset({status}))
    _mark_files_behind(home, run_id, False)  # the files came with it (a pull cut short leaves the mark)
    pinned = _pinned_rel(home / "runs" / run_id)
    if pinned is not None:
        shared.pull_tree(home, pinned)
    if warehouse:  # Iceberg: pods read the catalog and its location directly, the change-point fact from here
        shared.pull_tree(home, CHANGE_POINTS if _iceberg_warehouse() else "warehouse/")


# change_points' fact: one file for the whole history (no Iceberg table), read by its next pass and the views
CHANGE_POINTS = FACT_RELPATH


def pull_paths(home: Path, *rels: str) -> None:
    """Before reading what another pod wrote outside any run (``published/``, the change-point fact,
    retention's and ``delete``'s records under ``warehouse/``): each file, or folder ending in '/'."""
    shared = shared_state()
    for rel in rels if shared is not None else ():
        shared.pull_tree(home, rel)


def push_paths(home: Path, *rels: str) -> None:
    """After writing them: each file, or every file under each folder, to the shared prefix."""
    shared = shared_state()
    for rel in rels if shared is not None else ():
        if rel.endswith("/"):
            shared.push_tree(home, rel.rstrip("/"))  # (a folder absent here: nothing to push)
        elif (home / rel).is_file():
            shared.push_file(home, rel)


def push_alias(home: Path, alias: str) -> None:
    """After ``benchrun promote``: ``published/<alias>`` to the shared prefix, where every pod's
    comparison reads it (before, the alias stayed in the promoting home: a run worker's fresh home
    found none, took the run for a first run and compared it with nothing, green; found in review)."""
    from benchrun.paths import validate_name

    shared = shared_state()
    if shared is not None:
        shared.push_file(home, f"published/{validate_name(alias, what='baseline alias')}")


def pull_baseline(home: Path, alias: str | None, run_id: str | None) -> str | None:
    """Before a comparison reads its baseline: ``published/<alias>`` from the shared prefix (when
    ``alias``; absent there too, the alias was never promoted) and then the whole run it names (or
    ``run_id``). The baseline's run id, or None when there is none to pull."""
    from benchrun.paths import validate_name

    if (shared := shared_state()) is None:
        return None
    if alias is not None:
        rel = f"published/{validate_name(alias, what='baseline alias')}"
        got = shared._get(rel)
        if got is None:
            return None
        atomic_write_bytes(_inside(home, rel), got[1])
        lines = got[1].decode("utf-8", "replace").splitlines()
        run_id = lines[0].strip() if lines else None
    if run_id:
        pull_run(run_id, home)
    return run_id or None


def _iceberg_warehouse() -> bool:
    """Iceberg, the default unless BENCHRUN_WAREHOUSE_FORMAT=parquet (read as benchrun.warehouse.lake reads it)."""
    return (os.environ.get("BENCHRUN_WAREHOUSE_FORMAT", "").strip().lower() or "iceberg") == "iceberg"


class _KeepLocal(Exception):
    """A pulled status.json older than the local one: not written."""


def _status_seq(path: Path) -> int:
    """``status_seq`` of a status.json (0: none, absent or unreadable)."""
    try:
        return _seq_of(path.read_bytes())
    except OSError:
        return 0


def _inside(home: Path, relative: str) -> Path:
    """``home/relative`` for a key from the bucket, refused when it would leave the home."""
    parts = relative.split("/")
    if not relative or relative.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise BenchrunError(f"shared state key {relative!r} is not a plain relative path; refusing to write it")
    path = home.joinpath(*parts).resolve()
    if not path.is_relative_to(home.resolve()):
        raise BenchrunError(f"shared state key {relative!r} leaves {home}; refusing to write it")
    return path


def _pinned_rel(run_dir: Path) -> str | None:
    """``specs/sha256/<hex>.yaml`` of the run's pinned spec (status.json holds the absolute
    path in the home of the pod that pinned it; the key is the same in every home)."""
    import re

    try:
        value = json.loads((run_dir / "status.json").read_text(encoding="utf-8")).get("pinned_spec")
    except (OSError, ValueError):
        return None
    name = Path(value).name if value else ""
    return f"specs/sha256/{name}" if re.fullmatch(r"[0-9a-f]{64}\.yaml", name) else None
