"""Rows as a Dagster table (``MetadataValue.table`` with a ``TableSchema``), shown inline in the UI, and
the files an asset wrote as the UI should name them (:func:`path`)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Sequence

import dagster as dg

from benchrun.warehouse.removed import DELETED_DIR, DIR_NAME, RETENTION_DIR

# What the shared prefix mirrors of a home (benchrun.sharedstate), beside the change-point fact's file:
# runs, pinned specs, aliases, and retention's and delete's records (benchrun.warehouse.removed).
MIRRORED = ("runs/", "specs/", "published/", f"{DIR_NAME}/{RETENTION_DIR}/", f"{DIR_NAME}/{DELETED_DIR}/")


def path(p: Path | str) -> dg.MetadataValue:
    """A file of the home as asset metadata. With shared state (``BENCHRUN_SHARED_STATE``), a file the
    shared prefix mirrors (a run's files, pinned specs, ``published/``, the change-point fact, retention's
    and delete's records) is named by its ``s3://`` key, where it outlives the pod: on Kubernetes the home
    is a run-worker pod's, and a path into it led nowhere once the run ended (found in review). Any other
    file, and every file without shared state, by its path."""
    from benchrun.errors import BenchrunError
    from benchrun.paths import home_location
    from benchrun.sharedstate import CHANGE_POINTS, ENV, shared_state

    if not os.environ.get(ENV, "").strip():
        return dg.MetadataValue.path(str(p))
    try:  # the file's folder resolved, not the file: a link is not what the prefix mirrors under its name
        shared = shared_state()  # (its URI parsed and checked as everywhere else; refused before any asset runs)
        rel = (Path(p).parent.resolve() / Path(p).name).relative_to(home_location()[0]).as_posix()
    except (ValueError, BenchrunError):
        shared, rel = None, ""
    mirrored = shared is not None and (rel.startswith(MIRRORED) or rel == CHANGE_POINTS)
    shown = f"{shared.uri}{rel}" if mirrored else str(p)
    return dg.MetadataValue.path(shown)


# Dagster's column types for the Python values these tables hold.
_TYPES = {bool: "bool", int: "int", float: "float", str: "string"}


def _cell(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None  # NaN/inf are not JSON; the UI shows an empty cell
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str], descriptions: dict[str, str] | None = None,
          limit: int = 200) -> dg.MetadataValue:
    """The first ``limit`` rows, one typed column per name (a column's type from its first non-null value)."""
    rows = list(rows)[:limit]
    cols = []
    for c in columns:
        first = next((r.get(c) for r in rows if _cell(r.get(c)) is not None), None)
        kind = _TYPES.get(type(first), "string")
        cols.append(dg.TableColumn(c, kind, description=(descriptions or {}).get(c)))
    records = [dg.TableRecord({c: (_cell(r.get(c)) if cols[i].type != "string" or r.get(c) is None
                                   else str(_cell(r.get(c))))
                               for i, c in enumerate(columns)}) for r in rows]
    return dg.MetadataValue.table(records, schema=dg.TableSchema(columns=cols))
