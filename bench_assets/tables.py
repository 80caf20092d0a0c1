"""Rows as a Dagster table (``MetadataValue.table`` with a ``TableSchema``), shown inline in the UI."""

from __future__ import annotations

import math
from typing import Any, Sequence

import dagster as dg

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
