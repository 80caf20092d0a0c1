"""The ``benchrun migrate-warehouse`` and ``benchrun maintain-warehouse`` commands (the Iceberg tables)."""

from __future__ import annotations

import datetime as dt
import json

import typer


def _home():
    from benchrun.paths import benchrun_home

    return benchrun_home()


def migrate_cmd(as_json: bool = typer.Option(False, "--json", help="Print the row counts as JSON.")) -> None:
    """Copy a parquet-layout warehouse into the Iceberg tables; print rows before and after per table.

    Idempotent: each run's rows are replaced, never added twice; the parquet files stay where they are."""
    from benchrun.errors import BenchrunError
    from benchrun.warehouse import lake

    if not lake.enabled():
        raise BenchrunError(f"migrate-warehouse: set {lake.FORMAT_ENV}=iceberg first (the tables it fills are read "
                            "only then)")
    from benchrun.warehouse.migrate import migrate_parquet

    counts = migrate_parquet(_home())
    if as_json:
        typer.echo(json.dumps({t: {"before": b, "after": a} for t, (b, a) in counts.items()}, indent=2))
    else:
        for table, (before, after) in counts.items():
            typer.echo(f"{table}: {before} rows in parquet, {after} rows committed")
    lost = {t: c for t, c in counts.items() if c[0] != c[1]}
    if lost:
        raise BenchrunError(f"migrate-warehouse: row counts differ for {sorted(lost)}; nothing was removed, run it again")


def maintain_cmd(
    expire_days: float = typer.Option(7.0, "--expire-days", help="Expire snapshots older than this many days."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List the snapshots that would expire; change nothing."),
) -> None:
    """Compact each table's small files (one per day and suite) and expire old snapshots."""
    from benchrun.warehouse import TABLES, lake

    home = _home()
    cutoff = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=expire_days)
    for table in TABLES:
        before, after, old = lake.maintain(home, table, cutoff, dry_run=dry_run)
        verb = "would expire" if dry_run else "expired"
        typer.echo(f"{table}: data files {before} -> {after}; {verb} {len(old)} snapshots")


def register(app: typer.Typer) -> None:
    app.command("migrate-warehouse")(migrate_cmd)
    app.command("maintain-warehouse")(maintain_cmd)
