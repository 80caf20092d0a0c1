"""The pin of a spec's dataset: ``spec.workload.dataset`` resolved to its file, whose sha256 joins the spec's digest.

A relative ``path`` is read from the working directory (the repository root, as a suite's
``repoCommand`` is), else from the spec file's folder; the run's pinned copy of the spec is
read again from the run directory, so the working directory comes first. The digest document is the spec as written
with ``sha256`` filled from the file, so the spec digest (and the workload digest) change
when the dataset's bytes change; a ``sha256`` written in the spec must equal the file's. The
model's copy carries the resolved absolute path too, so a suite (which runs in the run
directory) reads the same file, and checks its bytes against the pinned sha256 before use.
"""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path as FsPath
from typing import Any

FIELD = ("spec", "workload", "dataset")


def _sha256(path: FsPath) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def pin_dataset(data: Any, source: str) -> tuple[Any, Any, list[tuple[tuple[Any, ...], str]]]:
    """``(digest document, model document, errors)`` for ``data`` read from ``source``;
    both documents are ``data`` itself when it names no dataset (or names it in the wrong shape,
    which the model reports)."""
    spec = data.get("spec") if isinstance(data, dict) else None
    workload = spec.get("workload") if isinstance(spec, dict) else None
    ds = workload.get("dataset") if isinstance(workload, dict) else None
    if not isinstance(ds, dict) or not isinstance(ds.get("path"), str) or not ds["path"].strip():
        return data, data, []
    written = FsPath(ds["path"])
    src = FsPath(source)
    if written.is_absolute():
        candidates = [written]
    else:
        candidates = [FsPath.cwd() / written] + ([src.parent / written] if src.is_file() else [])
    file = next((c for c in candidates if c.is_file()), None)
    if file is None:
        where = " or ".join(str(c) for c in candidates)
        return data, data, [(FIELD + ("path",), f"no file at {where} (a relative path is read from the working "
                                                f"directory, then the spec's folder); give the dataset's path")]
    digest = _sha256(file)
    given = ds.get("sha256")
    if isinstance(given, str) and given and given != digest:
        return data, data, [(FIELD + ("sha256",), f"is {given} but {file} has sha256 {digest}; the dataset changed: "
                                                  f"write the new sha256 or restore the file")]
    pinned = copy.deepcopy(data)
    pinned["spec"]["workload"]["dataset"]["sha256"] = digest
    resolved = copy.deepcopy(pinned)
    resolved["spec"]["workload"]["dataset"]["path"] = str(file.resolve())
    return pinned, resolved, []
