"""The curated warehouse: parquet facts and dimensions per run, DuckDB views, lineage, retention.

Public entry points: :func:`curate_run` (one run directory → its partition of every
table), :func:`refresh_views` (the one writer of ``warehouse.duckdb``), :func:`query`
(read-only SQL with ``query_spec_digest``), :func:`benchrun.warehouse.lineage.trace`
and :mod:`benchrun.warehouse.retention`.

The names below are imported on first use (PEP 562): the CLI imports
``benchrun.warehouse.commands`` for every command, and pyarrow/duckdb should load only
for the commands that need them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchrun._lazy import lazy_exports

if TYPE_CHECKING:
    from benchrun.warehouse.curate import curate_run
    from benchrun.warehouse.schemas import DIMENSIONS, FACTS, JOIN_KEY_NAMES, TABLES
    from benchrun.warehouse.views import QueryResult, connect, query, query_spec_digest, refresh_views

_LAZY = {
    "curate_run": "benchrun.warehouse.curate",
    "DIMENSIONS": "benchrun.warehouse.schemas",
    "FACTS": "benchrun.warehouse.schemas",
    "JOIN_KEY_NAMES": "benchrun.warehouse.schemas",
    "TABLES": "benchrun.warehouse.schemas",
    "QueryResult": "benchrun.warehouse.views",
    "connect": "benchrun.warehouse.views",
    "query": "benchrun.warehouse.views",
    "query_spec_digest": "benchrun.warehouse.views",
    "refresh_views": "benchrun.warehouse.views",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)
