"""Durable file writes: every file others read is written to a temporary name and renamed.

Standard library only: suites import it inside benchmark pods (ARCHITECTURE.md §1).

- :func:`atomic_path` / :func:`atomic_write_bytes` / ``_text`` / ``_json``: readers see the
  old file or the new one, never half of one (temp file beside the target, fsync, rename;
  with ``sync_dir`` an fsync of the directory so the rename survives a power loss).
- :func:`create_once`: write-once creation; the first writer wins and a later one is told
  so (``link()`` of a complete temporary file: never a half-written target, never a
  replaced one).
- :func:`fsync_dir`: make a rename or a new name in a directory durable.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """fsync a directory so that names created or renamed in it survive a crash."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temp_beside(target: Path) -> tuple[int, str]:
    target.parent.mkdir(parents=True, exist_ok=True)
    return tempfile.mkstemp(prefix=f".{target.name[:48]}.", suffix=".tmp", dir=target.parent)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], *, mode: int | None = None,
                sync_dir: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success fsync it and rename it over
    ``path``, on failure remove it. Readers see the old file or the new one, never half.

    For writers that want a file name (pyarrow, matplotlib, pandas). ``mode`` sets the
    published file's permissions (default: 0644 unless the caller chmod-ed the temp file).
    ``sync_dir`` also fsyncs the directory, so the rename itself survives a power loss (off
    by default: a crash still never leaves half a file, and most writes are re-creatable)."""
    target = Path(path)
    fd, tmp = _temp_beside(target)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        elif os.stat(tmp).st_mode & 0o777 == 0o600:
            # mkstemp makes 0600 files; what we publish is for others to read (the UI, a
            # reader under another user), as a plain open() would have made it. A mode the
            # caller set (the store's read-only objects) is kept.
            os.chmod(tmp, 0o644)
        os.replace(tmp, target)
        if sync_dir:
            fsync_dir(target.parent)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, mode: int | None = None) -> Path:
    """Write ``data`` to a temporary name beside ``path``, fsync, then rename over it."""
    with atomic_path(path, mode=mode) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike[str], text: str, *, mode: int | None = None) -> Path:
    """Write ``text`` (UTF-8) to a temporary name beside ``path``, then rename over it."""
    return atomic_write_bytes(path, text.encode("utf-8"), mode=mode)


def atomic_write_json(path: str | os.PathLike[str], data: Any) -> Path:
    """JSON with sorted keys, written atomically."""
    return atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def create_once(path: str | os.PathLike[str], write: Callable[[BinaryIO], Any], *, mode: int = 0o444) -> bool:
    """Create ``path`` with what ``write(fh)`` writes, unless it exists: True when this call
    created it, False when another writer got there first (theirs is kept, untouched).

    The content goes to a complete, fsync-ed temporary file that is then hard-linked to the
    target: ``link()`` fails when the name exists, so creation is atomic and write-once."""
    target = Path(path)
    fd, tmp = _temp_beside(target)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        try:
            os.link(tmp, target)
        except FileExistsError:
            return False
        fsync_dir(target.parent)
        return True
    finally:
        os.unlink(tmp)
