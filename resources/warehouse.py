"""The warehouse resource: curate a run into parquet, refresh the DuckDB views, query."""


from pathlib import Path
from typing import Any, Optional

import dagster as dg

from benchrun.paths import benchrun_home


class WarehouseResource(dg.ConfigurableResource):
    """The parquet + DuckDB warehouse under ``home`` (default ``$BENCHRUN_HOME``)."""

    home: Optional[str] = None

    def home_path(self) -> Path:
        return benchrun_home(self.home)

    def run_dir(self, run_id: str) -> Path:
        from benchrun.paths import safe_join, validate_run_id

        return safe_join(self.home_path(), "runs", validate_run_id(run_id))

    def curate(self, run_id: str, tables: Optional[list[str]] = None) -> dict[str, int]:
        """Write the run's partition of ``tables`` (all by default); rows per table."""
        from benchrun.warehouse import curate_run

        return curate_run(self.run_dir(run_id), self.home_path(), None, tables=tables)

    def refresh_views(self) -> Path:
        """(Re)create the views in warehouse.duckdb; callers hold the ``duckdb_writer`` pool.

        The connection is dagster-duckdb's (``DuckDBResource``: retries while another process
        holds the file), on the warehouse file under this home."""
        from dagster_duckdb import DuckDBResource

        from benchrun.warehouse import refresh_views

        return refresh_views(self.home_path(), connect=lambda db: DuckDBResource(database=str(db)).get_connection())

    def query(self, sql: str) -> Any:
        """Read-only SQL over the views (an in-memory connection)."""
        from benchrun.warehouse import query

        return query(sql, self.home_path())


warehouse = WarehouseResource()
