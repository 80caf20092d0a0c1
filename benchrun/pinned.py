"""A run's pinned spec, read back: re-validated once per process, its digest checked against
status.json. Below :mod:`benchrun.lifecycle` (which names it too), so the modules a run's end
reaches (:mod:`benchrun.hotpublish`) read it without importing the lifecycle."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError
from benchrun.paths import safe_join
from benchrun.rundir import RunDir


def load_pinned(rd: RunDir) -> Any:
    """The run's pinned spec, re-validated, its digest checked against status.json."""
    path = rd.file("structured", "spec", "", "yaml")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise BenchrunError(f"run {rd.run_id}: pinned spec {path} is missing; submit the run again") from None
    status = rd.read_status()
    kept = (status.get("dataset") or {}).get("copy") if isinstance(status.get("dataset"), dict) else None
    copy = str(safe_join(rd.path, "structured", kept)) if isinstance(kept, str) and kept else ""
    loaded = _load_pinned_bytes(raw, str(path), copy)
    expected = status.get("spec_digest")
    if expected and loaded.spec_digest != expected:
        raise BenchrunError(
            f"run {rd.run_id}: pinned spec digest {loaded.spec_digest} != {expected} in status.json; "
            "a pinned run never changes: submit a new run"
        )
    return loaded


@functools.lru_cache(maxsize=8)
def _load_pinned_bytes(raw: bytes, source: str, dataset_copy: str = "") -> Any:
    """Parse and validate pinned bytes once per process: every asset of a run reads the same
    immutable spec, and YAML with line marks plus the model cost ~0.3 s CPU each time.
    ``dataset_copy``: the run's own copy of its dataset (``submit._keep_dataset``), read instead
    of the path as written (a run made before runs kept one reads the path as written)."""
    from benchrun.spec import load_spec_bytes
    from benchrun.spec.datasets import pinned_finder

    return load_spec_bytes(raw, source, find_dataset=pinned_finder(Path(dataset_copy) if dataset_copy else None,
                                                                   source))
