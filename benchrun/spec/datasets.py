"""The pin of a spec's dataset: ``spec.workload.dataset`` resolved to its file, whose sha256 joins the spec's digest.

A relative ``path`` is read from the working directory (the repository root, as a suite's
``repoCommand`` is), else from the spec file's folder; a spec read from a commit (the sensors)
reads its dataset from the same commit (``benchrun.automation.discovery.git_finder``). A run
keeps its own copy, ``structured/<run_id>_dataset.<ext>`` (:func:`copy_into_run`, at
submission), and its pinned spec is read again against that copy, so neither the working
directory of whoever runs it nor a later change of the file can change what it measures. The digest document is the spec as written
with ``sha256`` filled from the file, so the spec digest (and the workload digest) change
when the dataset's bytes change; a ``sha256`` written in the spec must equal the file's. The
model's copy carries the resolved absolute path too, so a suite (which runs in the run
directory) reads the same file, and checks its bytes against the pinned sha256 before use.
"""

from __future__ import annotations

import copy
import hashlib
import re
from pathlib import Path as FsPath
from typing import Any, Callable

from benchrun.errors import BenchrunError

FIELD = ("spec", "workload", "dataset")


def _sha256(path: FsPath) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# (written path) -> (the file, or None, and where it was looked for, for the error)
Finder = Callable[[str], "tuple[FsPath | None, str]"]


def file_finder(source: str) -> Finder:
    """The working directory, then the spec file's folder (``source``, when it is a file)."""
    def find(written: str) -> tuple[FsPath | None, str]:
        path = FsPath(written)
        src = FsPath(source)
        candidates = [path] if path.is_absolute() else (
            [FsPath.cwd() / path] + ([src.parent / path] if src.is_file() else []))
        where = " or ".join(str(c) for c in candidates)
        return next((c for c in candidates if c.is_file()), None), where
    return find


class DatasetCacheError(RuntimeError):
    """The dataset cache could not be written (the disk, its permissions): the machine's fault,
    not the spec's. Not a BenchrunError, so no caller mistakes it for an invalid spec: a sensor
    tick fails and is tried again with its cursor where it was."""


def cache_bytes(data: bytes, suffix: str, cache: FsPath | None = None) -> FsPath:
    """``data`` as a read-only, content-addressed file (default ``<home>/cache/datasets/<sha256><suffix>``):
    a committed dataset's bytes, so the model has a file to name."""
    from benchrun.fsio import atomic_write_bytes
    from benchrun.paths import benchrun_home

    folder = cache if cache is not None else benchrun_home() / "cache" / "datasets"
    target = folder / f"{hashlib.sha256(data).hexdigest()}{suffix}"
    try:
        if not (target.is_file() and _sha256(target) == target.name[:64]):
            atomic_write_bytes(target, data, mode=0o444)
    except OSError as exc:
        raise DatasetCacheError(f"dataset cache {folder}: cannot write {target.name} ({exc.strerror or exc}); "
                                f"free space or fix its permissions") from exc
    return target


def pinned_finder(copy: FsPath | None, source: str) -> Finder:
    """A run's own copy of its dataset (re-reading the pinned spec), else the file rule (runs
    made before runs kept a copy)."""
    fallback = file_finder(source)

    def find(written: str) -> tuple[FsPath | None, str]:
        if copy is not None and copy.is_file():
            return copy, str(copy)
        return fallback(written)
    return find


def pin_dataset(data: Any, source: str, find: Finder | None = None
                ) -> tuple[Any, Any, list[tuple[tuple[Any, ...], str]]]:
    """``(digest document, model document, errors)`` for ``data`` read from ``source``;
    both documents are ``data`` itself when it names no dataset (or names it in the wrong shape,
    which the model reports). ``find``: where the written path is looked for (default
    :func:`file_finder`; :func:`git_finder` for a committed spec, :func:`pinned_finder` for a run)."""
    spec = data.get("spec") if isinstance(data, dict) else None
    workload = spec.get("workload") if isinstance(spec, dict) else None
    ds = workload.get("dataset") if isinstance(workload, dict) else None
    if not isinstance(ds, dict) or not isinstance(ds.get("path"), str) or not ds["path"].strip():
        return data, data, []
    given = ds.get("sha256")
    if given is not None and not (isinstance(given, str) and re.fullmatch(r"[0-9a-f]{64}", given)):
        return data, data, []  # the model names the field (it was overwritten with the file's sha256)
    try:
        file, where = (find or file_finder(source))(ds["path"])
        digest = _sha256(file) if file is not None else ""
    except OSError as exc:  # a name too long, a folder without permission: the field is wrong, not the run
        return data, data, [(FIELD + ("path",), f"cannot read {ds['path']!r}: {exc.strerror or exc}; "
                                                f"give a readable dataset file")]
    if file is None:
        return data, data, [(FIELD + ("path",), f"no file at {where} (a relative path is read from the working "
                                                f"directory, then the spec's folder); give the dataset's path")]
    if given and given != digest:
        return data, data, [(FIELD + ("sha256",), f"is {given} but {file} has sha256 {digest}; the dataset changed: "
                                                  f"write the new sha256 or restore the file")]
    pinned = copy.deepcopy(data)
    pinned["spec"]["workload"]["dataset"]["sha256"] = digest
    resolved = copy.deepcopy(pinned)
    resolved["spec"]["workload"]["dataset"]["path"] = str(file.resolve())
    return pinned, resolved, []


def copy_into_run(dataset: dict[str, Any], target: FsPath) -> FsPath:
    """Copy the resolved dataset file (``workload_env()["dataset"]``) to ``target`` in the run
    directory, read-only, refusing bytes that are not the pinned sha256 (the file changed
    between validation and the copy)."""
    from benchrun.fsio import atomic_path

    src = FsPath(dataset["path"])
    if target.is_file() and _sha256(target) == dataset["sha256"]:
        return target
    h = hashlib.sha256()
    with atomic_path(target, mode=0o444) as tmp, open(src, "rb") as fin, open(tmp, "wb") as fout:
        for block in iter(lambda: fin.read(1 << 20), b""):
            h.update(block)
            fout.write(block)
        if h.hexdigest() != dataset["sha256"]:
            raise BenchrunError(f"dataset {src} changed while the run was pinned (sha256 {h.hexdigest()}, pinned "
                                f"{dataset['sha256']}); submit the run again")
    return target
