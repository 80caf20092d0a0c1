"""The parquet layout's partitions as readers take them: a damaged, foreign or mistyped file is
left out with a note naming it and the fix, and one changed since its run was signed is read with a
warning. Used by the views over that layout and by the migration from it into the Iceberg tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError
from benchrun.warehouse.schemas import TABLES, duckdb_type
from benchrun.warehouse.writer import warehouse_root


def readable_partitions(home: Path, table: str) -> tuple[list[Path], list[str]]:
    """A table's partition files whose parquet footer reads and whose columns have the table's
    types, and one note per file left out or read with a warning.

    A truncated, foreign or mistyped partition (``value`` stored as text, say) is left out of
    the view (and named in the note), so one damaged run never stops queries, lineage or
    playbooks over every other run. A partition whose bytes differ from the hash in its run's
    signed statement is read, with a warning (``benchrun verify`` fails on it).
    """
    import pyarrow.parquet as pq

    expected = {f.name: f.type for f in TABLES[table]}
    good: list[Path] = []
    notes: list[str] = []
    for f in sorted((warehouse_root(home) / table).glob("run_id=*/part.parquet")):
        run_id = f.parent.name.removeprefix("run_id=")
        try:
            schema = pq.read_schema(f)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a damaged file
            notes.append(f"{f}: damaged partition left out of {table} ({str(exc).splitlines()[0]}); "
                         f"curate run {run_id} again or remove that directory")
            continue
        wrong = [f"{col.name} is {col.type}, not {expected[col.name]}" for col in schema
                 if col.name in expected and not _same_type(col.type, expected[col.name])]
        if wrong:
            notes.append(f"{f}: partition with another schema than {table}'s left out ({'; '.join(wrong[:3])}); "
                         f"curate run {run_id} again or remove that directory")
            continue
        notes.extend(_signature_note(home, table, run_id, f))
        good.append(f.resolve())
    return good, notes


def _same_type(actual: Any, expected: Any) -> bool:
    """Equal, or read by DuckDB as the same SQL type (string and large_string, say)."""
    if actual.equals(expected):
        return True
    try:
        return duckdb_type(actual) == duckdb_type(expected)
    except KeyError:
        return False


def _signature_note(home: Path, table: str, run_id: str, f: Path) -> list[str]:
    """A warning when the run's signed statement hashed this partition with other bytes."""
    from benchrun.paths import validate_run_id
    from benchrun.provenance.statement import signed_partitions_unverified
    from benchrun.store.base import sha256_file

    try:
        run_dir = Path(home) / "runs" / validate_run_id(run_id)
    except BenchrunError:
        return []
    signed = signed_partitions_unverified(run_dir)
    rel = f"{table}/run_id={run_id}/part.parquet"
    if not signed or rel not in signed or sha256_file(f) == signed[rel]:
        return []
    return [f"{f}: does not match the sha256 signed for run {run_id} (changed since signing); its rows are "
            f"read but not trusted: `benchrun verify {run_id}` fails, `benchrun rebuild-warehouse` curates it again"]
