"""Migration of a parquet-layout warehouse (``warehouse/<table>/run_id=<id>/part.parquet``) into the Iceberg tables."""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path
from typing import Iterable

import pyarrow as pa

from benchrun.warehouse.lake import commit_run
from benchrun.warehouse.schemas import TABLES

log = logging.getLogger(__name__)



def _run_starts(home: Path, run_ids: Iterable[str]) -> dict[str, dt.datetime | None]:
    """Each run's start (status.json's started_utc, else created_utc), for the day partition."""
    from benchrun.rundir import read_json_or_none
    from benchrun.warehouse.sources import parse_ts

    out: dict[str, dt.datetime | None] = {}
    for run_id in run_ids:
        status = read_json_or_none(Path(home) / "runs" / run_id / "status.json", fix="curate the run again") or {}
        out[run_id] = parse_ts(status.get("started_utc")) or parse_ts(status.get("created_utc"))
    return out


def migrate_parquet(home: Path) -> dict[str, tuple[int, int]]:
    """Copy a parquet-layout home's partitions into the Iceberg tables: per table, rows (before, after).

    One commit per run per table, as curation makes (re-running replaces those rows again, so a
    migration stopped half-way is finished by running it again). Partitions that do not read are
    named and left in place; the parquet files are never removed here.
    """
    import pyarrow.parquet as pq

    from benchrun.warehouse.views import readable_partitions

    counts: dict[str, tuple[int, int]] = {}
    for table in TABLES:
        files, notes = readable_partitions(home, table)
        for note in notes:
            log.warning("%s", note)
        by_run = {f.parent.name.removeprefix("run_id="): f for f in files}
        starts = _run_starts(home, by_run)
        before = after = 0
        for run_id, f in sorted(by_run.items()):
            data = pq.ParquetFile(f).read()  # the file alone: no hive run_id= column inferred from its directory
            before += data.num_rows
            missing = [c for c in TABLES[table].names if c not in data.column_names]
            for name in missing:  # a partition written before the column existed: null, never invented
                data = data.append_column(TABLES[table].field(name), pa.nulls(data.num_rows, TABLES[table].field(name).type))
            after += commit_run(home, table, run_id, [data], starts[run_id]).rows
        counts[table] = (before, after)
    return counts

