"""The pin of a spec's dataset: ``spec.workload.dataset`` resolved to its file, whose sha256 joins the spec's digest.

A relative ``path`` is read from the working directory (the repository root, as a suite's
``repoCommand`` is), else from the spec file's folder; a spec read from a commit (the sensors)
reads its dataset from the same commit (``benchrun.automation.discovery.git_finder``), and a
BenchmarkRun resource's (no repository on the orchestrator) from the image's ``specs/`` folder
(:func:`resource_finder`). Admission (:func:`path_error`) refuses an absolute path, a ``..``
component and a file that is not a dataset the loader reads (``.json``, ``.jsonl``,
``.parquet``), so a spec cannot pin (and copy into its run) any other file of the machine that
reads it. A run
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
SUFFIXES = (".json", ".jsonl", ".parquet")  # what benchrun.loadgen.dataset reads (ShareGPT JSON/JSONL, JSONL, Parquet)
RESOURCE = "cr:"  # the source of a BenchmarkRun resource's document (benchrun.controller.resources)
IMAGE_FOLDER = "specs"  # the image's copy of the repository's specs/ (Dockerfile), where a resource's dataset is
_FIX = "give its path from the repository root, e.g. specs/datasets/conversations.jsonl"


class PathRefused(ValueError):
    """A finder's refusal of the file it found (its real path leaves where it may be read)."""


def path_error(written: str, source: str) -> str | None:
    """Why ``written`` may not be ``spec.workload.dataset.path`` of a spec read from ``source``,
    or None. A spec names a dataset of its repository, never a file of the machine that reads it."""
    parts = written.replace("\\", "/").split("/")
    if written.startswith("/") or FsPath(written).is_absolute():
        return (f"{written!r} is absolute: a dataset is read from the repository (the working directory, the "
                f"spec's folder, a committed spec's commit), never from the machine that reads the spec; {_FIX}")
    if ".." in parts:
        return f"'..' is not allowed in {written!r}: a dataset is read from inside the repository; {_FIX}"
    if FsPath(written).suffix.lower() not in SUFFIXES:
        return (f"{written!r} is not a dataset file: the loader reads ShareGPT (.json, .jsonl), JSONL (.jsonl) "
                f"and Parquet (.parquet) datasets; give such a file")
    if source.startswith(RESOURCE) and [p for p in parts if p not in ("", ".")][:1] != [IMAGE_FOLDER]:
        return (f"{written!r}: a BenchmarkRun resource's dataset is read from the image's {IMAGE_FOLDER}/ folder "
                f"(docs/loadgen-workloads.md), not from the orchestrator's other files; ship the dataset in the "
                f"image under {IMAGE_FOLDER}/ and give its path from there, e.g. {IMAGE_FOLDER}/datasets/x.jsonl")
    return None


def _sha256(path: FsPath) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# (written path) -> (the file, or None, and where it was looked for, for the error)
Finder = Callable[[str], "tuple[FsPath | None, str]"]


def file_finder(source: str) -> Finder:
    """The working directory, then the spec file's folder (``source``, when it is a file); a file
    found under one of them whose real path (links followed) leaves it, or is not a dataset file, is
    refused (PathRefused): a link in the repository must not pin, and copy into the run, a file of
    the machine that reads the spec."""
    def find(written: str) -> tuple[FsPath | None, str]:
        path = FsPath(written)
        src = FsPath(source)
        bases = [] if path.is_absolute() else [FsPath.cwd()] + ([src.parent] if src.is_file() else [])
        candidates = [(None, path)] if path.is_absolute() else [(b, b / path) for b in bases]
        where = " or ".join(str(c) for _, c in candidates)
        for base, c in candidates:
            if not c.is_file():
                continue
            real = c.resolve()
            if base is not None and not real.is_relative_to(base.resolve()):
                raise PathRefused(f"{written!r} leads out of {base} (to {real}); give a dataset file kept in the "
                                  f"repository, not a link to another file of this machine")
            if real.suffix.lower() not in SUFFIXES:
                raise PathRefused(f"{written!r} leads to {real}, which is not a dataset file (.json, .jsonl, .parquet); "
                                  f"give the dataset file itself")
            return c, where
        return None, where
    return find


def resource_finder() -> Finder:
    """A BenchmarkRun resource's dataset: a file under the image's ``specs/`` (the orchestrator's
    working directory is the image's WORKDIR), whose real path stays there (not a link out)."""
    def find(written: str) -> tuple[FsPath | None, str]:
        root = FsPath.cwd() / IMAGE_FOLDER
        candidate = FsPath.cwd() / written
        if not candidate.is_file():
            return None, str(candidate)
        if not candidate.resolve().is_relative_to(root.resolve()):
            raise PathRefused(f"{written!r} leads out of the image's {IMAGE_FOLDER}/ folder (to "
                              f"{candidate.resolve()}); give a dataset file kept under {IMAGE_FOLDER}/")
        return candidate, str(candidate)
    return find


def default_finder(source: str) -> Finder:
    """Where a spec read from ``source`` finds its dataset: a resource's in the image's specs/, else the file rule."""
    return resource_finder() if source.startswith(RESOURCE) else file_finder(source)


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
    made before runs kept a copy). The path rules are admission's: a pinned spec was admitted
    under the rules of its day, so it is not refused again (``find.admitted``)."""
    fallback = default_finder(source)

    def find(written: str) -> tuple[FsPath | None, str]:
        if copy is not None and copy.is_file():
            return copy, str(copy)
        return fallback(written)
    find.admitted = True  # type: ignore[attr-defined]
    return find


def pin_dataset(data: Any, source: str, find: Finder | None = None
                ) -> tuple[Any, Any, list[tuple[tuple[Any, ...], str]]]:
    """``(digest document, model document, errors)`` for ``data`` read from ``source``;
    both documents are ``data`` itself when it names no dataset (or names it in the wrong shape,
    which the model reports). ``find``: where the written path is looked for (default
    :func:`default_finder`; :func:`git_finder` for a committed spec, :func:`pinned_finder` for a run)."""
    spec = data.get("spec") if isinstance(data, dict) else None
    workload = spec.get("workload") if isinstance(spec, dict) else None
    ds = workload.get("dataset") if isinstance(workload, dict) else None
    if not isinstance(ds, dict) or not isinstance(ds.get("path"), str) or not ds["path"].strip():
        return data, data, []
    refused = None if getattr(find, "admitted", False) else path_error(ds["path"], source)
    if refused:
        return data, data, [(FIELD + ("path",), refused)]
    given = ds.get("sha256")
    if given is not None and not (isinstance(given, str) and re.fullmatch(r"[0-9a-f]{64}", given)):
        return data, data, []  # the model names the field (it was overwritten with the file's sha256)
    try:
        file, where = (find or default_finder(source))(ds["path"])
        digest = _sha256(file) if file is not None else ""
    except PathRefused as exc:
        return data, data, [(FIELD + ("path",), str(exc))]
    except OSError as exc:  # a name too long, a folder without permission: the field is wrong, not the run
        return data, data, [(FIELD + ("path",), f"cannot read {ds['path']!r}: {exc.strerror or exc}; "
                                                f"give a readable dataset file")]
    if file is None:
        rule = (f"a BenchmarkRun resource's dataset is read from the image's {IMAGE_FOLDER}/ folder"
                if source.startswith(RESOURCE) and find is None else
                "a relative path is read from the working directory, then the spec's folder")
        return data, data, [(FIELD + ("path",), f"no file at {where} ({rule}); give the dataset's path")]
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
