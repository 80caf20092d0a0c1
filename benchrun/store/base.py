"""The object manifest and the store interface both backends (local, S3) implement."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator

from benchrun.errors import BenchrunError
from benchrun.paths import is_scratch, validate_run_id

log = logging.getLogger(__name__)

CHUNK = 1 << 20
MANIFEST_SCHEMA = "benchrun.object_manifest/v1"


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def sha256_stream(stream: Iterable[bytes]) -> str:
    """Hex sha256 of an iterable of byte chunks."""
    h = hashlib.sha256()
    for chunk in stream:
        h.update(chunk)
    return h.hexdigest()


def changed_while_stored(path: Path) -> BenchrunError:
    """A file whose bytes changed after they were hashed for storing (both stores refuse it)."""
    return BenchrunError(f"{path}: changed while being stored; store the run again once it is finished")


def object_key(prefix: str, sha256: str) -> str:
    """Content-addressed key: ``<prefix>sha256/<first two hex>/<hex>``."""
    return f"{prefix}sha256/{sha256[:2]}/{sha256}"


@dataclasses.dataclass(frozen=True)
class ObjectEntry:
    """One file of a run directory as stored: where it was, what it hashes to, where it is."""

    path: str  # relative path inside the run directory, '/'-separated
    sha256: str
    size: int
    key: str  # object key inside the store
    uri: str  # absolute URI of the stored object (file:///... or s3://bucket/key)


@dataclasses.dataclass(frozen=True)
class ObjectManifest:
    """The stored form of one run directory: relative path → sha256 → object."""

    run_id: str
    store_uri: str
    objects: tuple[ObjectEntry, ...]
    created_utc: str = ""

    @property
    def digest(self) -> str:
        """``artifact_manifest_digest``: sha256 of the canonical JSON of the sorted (path, sha256, size) list.

        Locations are left out on purpose: the same evidence stored locally or on S3 has
        the same digest.
        """
        return manifest_digest(self.objects)

    def entry(self, path: str) -> ObjectEntry:
        """The entry for a relative path, or a BenchrunError naming it."""
        for obj in self.objects:
            if obj.path == path:
                return obj
        raise BenchrunError(f"{path}: not in the object manifest of run {self.run_id}")

    def by_uri(self, uri: str) -> ObjectEntry | None:
        """The entry stored at ``uri`` (None when this manifest has none there)."""
        for obj in self.objects:
            if obj.uri == uri:
                return obj
        return None

    def to_json(self) -> dict[str, Any]:
        """The document saved in the store beside the objects."""
        return {
            "schema": MANIFEST_SCHEMA,
            "run_id": self.run_id,
            "store_uri": self.store_uri,
            "created_utc": self.created_utc,
            "artifact_manifest_digest": self.digest,
            "objects": [dataclasses.asdict(o) for o in self.objects],
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any], *, source: str) -> "ObjectManifest":
        """Parse a saved manifest; a missing field or wrong digest names ``source``."""
        try:
            if doc.get("schema") != MANIFEST_SCHEMA:
                raise KeyError("schema")
            objects = tuple(
                ObjectEntry(
                    path=o["path"], sha256=o["sha256"], size=int(o["size"]), key=o["key"], uri=o["uri"]
                )
                for o in doc["objects"]
            )
            manifest = cls(
                run_id=doc["run_id"],
                store_uri=doc["store_uri"],
                objects=objects,
                created_utc=doc.get("created_utc", ""),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise BenchrunError(f"{source}: not a benchrun object manifest (missing or bad {exc})") from exc
        if doc.get("artifact_manifest_digest") != manifest.digest:
            raise BenchrunError(
                f"{source}: artifact_manifest_digest {doc.get('artifact_manifest_digest')} does not match "
                f"its object list ({manifest.digest}); the manifest was altered"
            )
        return manifest


def manifest_digest(objects: Iterable[ObjectEntry]) -> str:
    """sha256 of ``[{"path","sha256","size"}, ...]`` sorted by path, as compact sorted-key JSON."""
    rows = sorted(({"path": o.path, "sha256": o.sha256, "size": o.size} for o in objects), key=lambda r: r["path"])
    canonical = json.dumps(rows, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def iter_run_files(run_dir: Path, exclude: Iterable[str] = ()) -> Iterator[tuple[str, Path]]:
    """(relative path, absolute path) of every regular file under ``run_dir``, sorted.

    Hidden files (``.*``: atomic writers' temporaries, locks; ``RunDir.write_manifest`` and the shared
    state leave them out too, so what is stored is what manifest.json lists — before, a suite's
    ``raw/.x.json`` was stored and signed but not in manifest.json), a suite's scratch folder
    (``benchrun.paths.is_scratch``: fio's test files, left by a suite killed at its timeout) and
    symlinks are skipped: a link could point outside the run directory, and evidence is the bytes in it.
    """
    skip = set(exclude)
    if not run_dir.is_dir():
        raise BenchrunError(f"{run_dir}: run directory does not exist; run the benchmark first")
    found: list[tuple[str, Path]] = []
    for root, _dirs, files in os.walk(run_dir):
        for name in files:
            full = Path(root) / name
            rel = full.relative_to(run_dir).as_posix()
            if rel in skip or name.startswith(".") or is_scratch(rel):
                continue
            if full.is_symlink() or not full.is_file():
                log.warning("skipping %s: not a regular file", rel)
                continue
            found.append((rel, full))
    yield from sorted(found)


def unlisted_run_files(run_dir: Path) -> list[tuple[str, str]]:
    """``(relative path, why)`` of every entry under ``run_dir`` that :func:`iter_run_files` leaves
    out, sorted: ``link`` (a symbolic link, to a file or a folder), ``hidden`` (``.*``), ``scratch``
    (a suite's scratch folder), ``not a regular file``. None of them is stored, sealed or signed: what
    ``verify`` names as not covered (before, they were left out of that list, and a link a reader
    follows was not named anywhere)."""
    out: list[tuple[str, str]] = []
    for root, dirs, files in os.walk(run_dir):
        for name in [*dirs, *files]:
            full = Path(root) / name
            rel = full.relative_to(run_dir).as_posix()
            if full.is_symlink():
                out.append((rel, "link"))
            elif name in files and name.startswith("."):
                out.append((rel, "hidden"))
            elif name in files and is_scratch(rel):
                out.append((rel, "scratch"))
            elif name in files and not full.is_file():
                out.append((rel, "not a regular file"))
    return sorted(out)


PUT_WORKERS = 8  # files stored at once by put_run_dir


class ArtifactStore(ABC):
    """A write-once, content-addressed object store for run directories."""

    #: The store's base URI as given (after defaults), for messages and lineage.
    uri: str

    # -- backend primitives -----------------------------------------------------
    @abstractmethod
    def run_prefix(self, run_id: str) -> str:
        """Key prefix (ending in '/' or empty) under which a run's objects and manifest live."""

    @abstractmethod
    def key_uri(self, key: str) -> str:
        """Absolute URI of the object at ``key``."""

    @abstractmethod
    def _put_file(self, key: str, path: Path, sha256: str) -> bool:
        """Store ``path`` at ``key`` unless present; True if written, False if it already
        held the same bytes; BenchrunError if it holds different bytes."""

    @abstractmethod
    def _put_manifest_doc(self, key: str, data: bytes, *, overwrite: bool) -> None:
        """Write a small document (a manifest) at ``key``."""

    @abstractmethod
    def open_key(self, key: str) -> BinaryIO:
        """A binary stream of the object at ``key``; BenchrunError if absent."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """Whether an object is stored at ``key``."""

    @abstractmethod
    def list_manifest_run_ids(self) -> list[str]:
        """Run ids with a saved object manifest (local layout only lists what it can find)."""

    # -- shared behaviour --------------------------------------------------------
    def manifest_key(self, run_id: str, digest: str | None = None) -> str:
        """``<prefix>manifests/<run_id>.json`` (latest) or ``.../<run_id>/<digest>.json`` (a version)."""
        prefix = self.run_prefix(run_id)
        if digest is None:
            return f"{prefix}manifests/{run_id}.json"
        return f"{prefix}manifests/{run_id}/{digest}.json"

    def put_run_dir(self, run_dir: Path, run_id: str, *, exclude: Iterable[str] = ()) -> ObjectManifest:
        """Store every file of ``run_dir``; return the object manifest (also saved in the store).

        Write-once: an object already stored with the same bytes is a no-op; a key that
        holds different bytes is refused. The manifest is saved immutably under its digest
        and as the run's latest manifest.
        """
        import datetime as dt

        validate_run_id(run_id)
        run_dir = Path(run_dir)
        prefix = self.run_prefix(run_id)
        def put(item: tuple[str, Path]) -> tuple[ObjectEntry, bool]:
            rel, full = item
            digest = sha256_file(full)
            key = object_key(prefix, digest)
            new = self._put_file(key, full, digest)
            return ObjectEntry(rel, digest, full.stat().st_size, key, self.key_uri(key)), new

        # Files are stored side by side: each is a wait on the disk (fsync) or the network
        # (an S3 request), not on the CPU, and a run has hundreds of small ones. Each object
        # is written on its own and the manifest, which names them, only after all of them.
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=PUT_WORKERS, thread_name_prefix="store-put") as pool:
            done = list(pool.map(put, iter_run_files(run_dir, exclude)))
        entries = [entry for entry, _ in done]
        written = sum(new for _, new in done)
        manifest = ObjectManifest(
            run_id=run_id,
            store_uri=self.uri,
            objects=tuple(entries),
            created_utc=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        )
        self._save_manifest(manifest)
        log.info(
            "stored run %s: %d files (%d new) in %s, artifact_manifest_digest %s",
            run_id, len(entries), written, self.uri, manifest.digest,
        )
        return manifest

    def _save_manifest(self, manifest: ObjectManifest) -> None:
        data = (json.dumps(manifest.to_json(), indent=2, sort_keys=True) + "\n").encode()
        version_key = self.manifest_key(manifest.run_id, manifest.digest)
        if not self.exists(version_key):
            self._put_manifest_doc(version_key, data, overwrite=False)
        self._put_manifest_doc(self.manifest_key(manifest.run_id), data, overwrite=True)

    def load_manifest(self, run_id: str, digest: str | None = None) -> ObjectManifest:
        """The run's latest saved manifest, or the version with ``digest``."""
        validate_run_id(run_id)
        key = self.manifest_key(run_id, digest)
        if not self.exists(key):
            raise BenchrunError(
                f"no object manifest for run {run_id} in {self.uri} ({key}); store the run's evidence first"
            )
        with self.open_key(key) as fh:
            raw = fh.read()
        try:
            doc = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise BenchrunError(f"{self.key_uri(key)}: object manifest is not JSON ({exc})") from exc
        manifest = ObjectManifest.from_json(doc, source=self.key_uri(key))
        if digest is not None and manifest.digest != digest:
            raise BenchrunError(f"{self.key_uri(key)}: holds digest {manifest.digest}, not {digest}")
        return manifest

    def get(self, manifest: ObjectManifest, path: str) -> bytes:
        """The stored bytes of one file of a run, checked against its recorded sha256."""
        entry = manifest.entry(path)
        with self.open_key(entry.key) as fh:
            data = fh.read()
        if hashlib.sha256(data).hexdigest() != entry.sha256:
            raise BenchrunError(f"{entry.uri} ({entry.path}): stored bytes do not match sha256 {entry.sha256}; the object was tampered with")
        return data

    def hash_key(self, key: str) -> str:
        """Re-hash the stored object at ``key`` (streamed)."""
        with self.open_key(key) as fh:
            return sha256_stream(iter(lambda: fh.read(CHUNK), b""))

    def verify(self, manifest: ObjectManifest) -> int:
        """Re-hash every object of ``manifest``; return the count, or raise naming every bad object."""
        bad: list[str] = []
        for entry in manifest.objects:
            try:
                actual = self.hash_key(entry.key)
            except (BenchrunError, OSError) as exc:  # one unreadable object is named; the others are checked
                bad.append(f"{entry.path} ({self.key_uri(entry.key)}): {exc}")
                continue
            if actual != entry.sha256:
                bad.append(f"{entry.path} ({self.key_uri(entry.key)}): sha256 {actual} != recorded {entry.sha256}")
        if bad:
            raise BenchrunError(
                f"run {manifest.run_id}: {len(bad)} stored object(s) fail verification: " + "; ".join(bad)
            )
        return len(manifest.objects)
