"""The local-filesystem artifact store: content-addressed, read-only files under one root."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import stat
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from benchrun.errors import BenchrunError
from benchrun.store.base import ArtifactStore, ObjectManifest, changed_while_stored, sha256_file
from benchrun.fsio import atomic_path, create_once

log = logging.getLogger(__name__)

READ_ONLY = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
STALE_TEMP_S = 3600.0  # a temporary file a put left this long ago: the put died


class LocalStore(ArtifactStore):
    """Objects at ``<root>/<prefix>sha256/<aa>/<hex>``, written once and made read-only.

    ``prefix_template`` is the part of the path template from ``${RUN_ID}`` on (empty for
    the default store, which then de-duplicates identical files across runs).
    """

    def __init__(self, root: Path, prefix_template: str = "") -> None:
        self.root = Path(root).resolve()
        self.prefix_template = prefix_template
        self.uri = self.root.as_uri() + "/" + prefix_template
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BenchrunError(f"artifact store {self.root}: cannot create it ({exc}); check sinks.rawArtifacts.pathTemplate") from exc

    def run_prefix(self, run_id: str) -> str:
        prefix = self.prefix_template.replace("${RUN_ID}", run_id)
        return prefix if not prefix or prefix.endswith("/") else prefix + "/"

    def path_of(self, key: str) -> Path:
        """Filesystem path of ``key``; refuses keys that would leave the root."""
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root):
            raise BenchrunError(f"object key {key!r} escapes the store root {self.root}")
        return path

    def key_uri(self, key: str) -> str:
        return self.path_of(key).as_uri()

    def exists(self, key: str) -> bool:
        return self.path_of(key).is_file()

    def open_key(self, key: str) -> BinaryIO:
        path = self.path_of(key)
        try:
            return open(path, "rb")
        except FileNotFoundError as exc:
            raise BenchrunError(f"{path.as_uri()}: stored object is missing") from exc

    def _link_new(self, target: Path, write) -> bool:
        """Create ``target`` read-only, atomically and only if absent (fsio.create_once)."""
        return create_once(target, write, mode=READ_ONLY)

    def _put_file(self, key: str, path: Path, sha256: str) -> bool:
        target = self.path_of(key)
        if not target.exists():

            def copy(fh: BinaryIO) -> None:
                # hashed as it is copied, and checked before the object is linked in: the source
                # changing while it is copied never puts a mislabelled object where readers look
                # (before, it was linked first and removed after, readable meanwhile)
                h = hashlib.sha256()
                with open(path, "rb") as src:
                    while chunk := src.read(1 << 20):
                        h.update(chunk)
                        fh.write(chunk)
                if h.hexdigest() != sha256:
                    raise changed_while_stored(path)

            if self._link_new(target, copy):
                return True
        existing = sha256_file(target)
        if existing != sha256:
            raise BenchrunError(
                f"{target.as_uri()}: already holds different bytes (sha256 {existing}) than {path} "
                f"({sha256}); stored objects are write-once, so the stored copy was altered: investigate the store"
            )
        return False

    def _put_manifest_doc(self, key: str, data: bytes, *, overwrite: bool) -> None:
        target = self.path_of(key)
        if not overwrite:
            if not self._link_new(target, lambda fh: fh.write(data)) and target.read_bytes() != data:
                raise BenchrunError(f"{target}: a different manifest is already stored under this digest")
            return
        with atomic_path(target) as tmp:
            tmp.write_bytes(data)
            os.chmod(tmp, READ_ONLY)

    def list_manifest_run_ids(self) -> list[str]:
        pattern = "manifests/*.json" if not self.prefix_template else "*/manifests/*.json"
        return sorted({p.stem for p in self.root.glob(pattern)})

    @contextlib.contextmanager
    def lock(self, *, exclusive: bool, wait: bool = True) -> Iterator[bool]:
        """The store's lock (``flock`` on ``<root>/.lock``): storing a run holds it shared,
        retention's deletions exclusive, so an object a run being stored reuses (identical
        bytes are one object) is never deleted between retention's plan and its apply.
        Yields whether it is held (always, unless ``wait`` is False and another holds it)."""
        fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)  # releases the lock

    def put_run_dir(self, run_dir: Path, run_id: str, *, exclude: Iterable[str] = ()) -> ObjectManifest:
        self.sweep_stale_temps()
        with self.lock(exclusive=False):
            return super().put_run_dir(run_dir, run_id, exclude=exclude)

    def sweep_stale_temps(self, older_than_s: float = STALE_TEMP_S) -> int:
        """Remove the temporary files (fsio's ``.<name>.<random>.tmp``) that a put which died left in
        the store, full-size copies nothing else removes; how many. Only with the store's lock held
        exclusively, taken without waiting (no put is running then; when one is, the next put
        sweeps), only temporaries older than ``older_than_s`` (a live put's is seconds old), and at
        most once per ``older_than_s`` (``<root>/.swept``): a put does not list the store each time."""
        marker = self.root / ".swept"
        now = time.time()
        with contextlib.suppress(FileNotFoundError):
            if now - marker.stat().st_mtime < older_than_s:
                return 0
        removed = 0
        with self.lock(exclusive=True, wait=False) as held:
            if not held:
                return 0
            for top, _dirs, files in os.walk(self.root):
                for name in files:
                    path = Path(top) / name
                    if not (name.startswith(".") and name.endswith(".tmp")):
                        continue
                    with contextlib.suppress(FileNotFoundError):
                        if now - path.lstat().st_mtime > older_than_s:
                            path.unlink()
                            removed += 1
            marker.touch()
        if removed:
            log.info("artifact store %s: removed %d temporary file(s) left by puts that died", self.root, removed)
        return removed

    def delete_key(self, key: str) -> None:
        """Remove one object (retention only; never called inside a retention window)."""
        path = self.path_of(key)
        path.unlink(missing_ok=True)
