"""Rows as a Dagster table (``MetadataValue.table`` with a ``TableSchema``), shown inline in the UI, and
the files an asset wrote as the UI should name them (:func:`path`)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Sequence

import dagster as dg

# What the shared prefix mirrors of a home (benchrun.sharedstate), beside the change-point fact's file.
MIRRORED = ("runs/", "specs/", "published/", "warehouse/_retention/", "warehouse/_deleted/")


def path(p: Path | str) -> dg.MetadataValue:
    """A file of the home as asset metadata. With shared state (``BENCHRUN_SHARED_STATE``), a file the
    shared prefix mirrors (a run's files, pinned specs, ``published/``, the change-point fact, retention's
    and delete's records) is named by its ``s3://`` key, where it outlives the pod: on Kubernetes the home
    is a run-worker pod's, and a path into it led nowhere once the run ended (found in review). Any other
    file, and every file without shared state, by its path."""
    import urllib.parse

    from benchrun.errors import BenchrunError
    from benchrun.paths import home_location
    from benchrun.sharedstate import CHANGE_POINTS, ENV
    from benchrun.urlsafe import has_credentials

    shown = str(p)
    uri = os.environ.get(ENV, "").strip()
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme == "s3" and parsed.netloc and not has_credentials(uri):  # (refused before any asset runs)
        try:  # the file's folder resolved, not the file: a link is not what the prefix mirrors under its name
            where = Path(p).parent.resolve() / Path(p).name
            rel = where.relative_to(home_location()[0]).as_posix()
        except (ValueError, BenchrunError):
            rel = ""
        if rel.startswith(MIRRORED) or rel == CHANGE_POINTS:
            prefix = parsed.path.strip("/")  # the keys as benchrun.sharedstate.shared_state makes them
            shown = f"s3://{parsed.netloc}/{prefix + '/' if prefix else ''}{rel}"
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
