"""The curated warehouse: parquet facts and dimensions per run, DuckDB views, lineage, retention.

Public entry points: :func:`curate_run` (one run directory → its partition of every
table), :func:`refresh_views` (the one writer of ``warehouse.duckdb``), :func:`query`
(read-only SQL with ``query_spec_digest``), :func:`benchrun.warehouse.lineage.trace`
and :mod:`benchrun.warehouse.retention`.
"""

from __future__ import annotations

from benchrun.warehouse.curate import curate_run
from benchrun.warehouse.schemas import DIMENSIONS, FACTS, JOIN_KEY_NAMES, TABLES
from benchrun.warehouse.views import QueryResult, connect, query, query_spec_digest, refresh_views

__all__ = [
    "DIMENSIONS",
    "FACTS",
    "JOIN_KEY_NAMES",
    "QueryResult",
    "TABLES",
    "connect",
    "curate_run",
    "query",
    "query_spec_digest",
    "refresh_views",
]
