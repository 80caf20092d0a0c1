"""The ``benchrun migrate-warehouse`` and ``benchrun maintain-warehouse`` commands (the Iceberg tables)."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path

import typer


def _home(command: str):
    """The home these commands repair: one that exists (a mistyped BENCHRUN_HOME is refused, not made)."""
    from benchrun.paths import existing_home

    return existing_home(command)


def migrate_cmd(as_json: bool = typer.Option(False, "--json", help="Print the row counts as JSON.")) -> None:
    """Copy a parquet-layout warehouse into the Iceberg tables; print rows before and after per table.

    The first use of an older home does this by itself, once. Runs the tables already hold are left
    as they are (their rows there are the same or newer), so it can be run again and never puts older
    rows back; the parquet files stay."""
    from benchrun.errors import BenchrunError
    from benchrun.warehouse import lake

    if not lake.enabled():
        raise BenchrunError(f"migrate-warehouse: {lake.FORMAT_ENV}=parquet keeps the old layout; unset it (Iceberg is "
                            "the default) so that the tables it fills are the ones read")
    from benchrun.warehouse.migrate import migrate_parquet, write_marker
    from benchrun.warehouse.views import refresh_views

    home = _home("migrate-warehouse")
    done = migrate_parquet(home)
    refresh_views(home)  # a commit per run per table: its views named metadata files those commits aged out
    if as_json:
        typer.echo(json.dumps({t: {"before": b, "after": a, "runs_already_in_the_table": done.already.get(t, 0),
                                   "runs_removed_by_retention": done.expired.get(t, 0)}
                               for t, (b, a) in done.counts.items()}, indent=2))
    else:
        for table, (before, after) in done.counts.items():
            already, expired = done.already.get(table, 0), done.expired.get(table, 0)
            typer.echo(f"{table}: {before} rows in parquet, {after} rows in the table for those runs"
                       + (f" ({already} runs already in the table, left as they are)" if already else "")
                       + (f" ({expired} runs removed by retention, not copied back)" if expired else ""))
        for note in done.left_out:
            typer.echo(f"left out: {note}", err=True)
    if done.differ:
        raise BenchrunError(f"migrate-warehouse: row counts differ for {done.differ}; nothing was removed, run it again")
    write_marker(home, done)


def _refuse_parquet(command: str) -> None:
    """The parquet layout has no tables to maintain: maintaining made empty Iceberg tables there, and a
    later switch to Iceberg then saw tables, copied nothing by itself, and read without the old runs."""
    from benchrun.errors import BenchrunError
    from benchrun.warehouse import lake

    if not lake.enabled():
        raise BenchrunError(f"{command}: compaction and snapshot expiry are the Iceberg tables'; {lake.FORMAT_ENV}=parquet "
                            "keeps the per-run parquet layout, which has neither: unset it (Iceberg is the default)")


def maintain_cmd(
    expire_days: float = typer.Option(7.0, "--expire-days", help="Expire snapshots older than this many days."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List the snapshots that would expire; change nothing."),
) -> None:
    """Compact each table's small files (one per day and suite) and expire old snapshots."""
    from benchrun.errors import BenchrunError
    from benchrun.warehouse.migrate import migrate_on_first_use

    _refuse_parquet("maintain-warehouse")
    if not (math.isfinite(expire_days) and 0 <= expire_days <= 36500):  # NaN, and 1e308 overflowed the date
        raise BenchrunError(f"maintain-warehouse --expire-days {expire_days:g}: give a number of days from 0 to 36500 "
                            "(snapshots older than that expire; default 7)")
    home = _home("maintain-warehouse")
    if not dry_run:  # a dry run changes nothing: no first-use migration either
        migrate_on_first_use(home)
    cutoff = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=expire_days)
    done, failed = maintain_tables(home, cutoff, dry_run=dry_run)
    verb = "would expire" if dry_run else "expired"
    for table, (before, after, expired, removed) in done.items():
        typer.echo(f"{table}: data files {before} -> {after}; {verb} {expired} snapshots; "
                   f"{'would remove' if dry_run else 'removed'} {removed} unreferenced files")
    for table, why in failed.items():
        typer.echo(f"{table}: not maintained: {why}", err=True)
    if failed:
        raise BenchrunError(f"maintain-warehouse: {len(failed)} table(s) not maintained ({', '.join(failed)}); "
                            "the reasons are above")


def maintain_tables(home: Path, cutoff: dt.datetime, *, dry_run: bool) -> tuple[dict[str, tuple[int, int, int, int]],
                                                                                 dict[str, str]]:
    """Compact every table and expire its snapshots older than ``cutoff`` (`maintain-warehouse`
    and the maintenance asset), going on past a damaged table; then refresh ``warehouse.duckdb``,
    whose views name each table's metadata file: maintenance's commits age those files out
    (``write.metadata.previous-versions-max``), and the file's views then failed to open.
    Returns (table: (data files before, after, snapshots expired, unreferenced files removed)) and
    (table: why not maintained)."""
    from benchrun.errors import BenchrunError
    from benchrun.warehouse import TABLES, lake
    from benchrun.warehouse.views import refresh_views

    _refuse_parquet("maintain-warehouse")
    done: dict[str, tuple[int, int, int, int]] = {}
    failed: dict[str, str] = {}
    for table in TABLES:
        try:
            before, after, old, removed = lake.maintain(home, table, cutoff, dry_run=dry_run)
        except BenchrunError as exc:  # one damaged table: reported, the others are still maintained
            failed[table] = str(exc)
            continue
        done[table] = (before, after, len(old), removed)
    if not dry_run:
        try:
            refresh_views(home)
        except BenchrunError as exc:
            failed["warehouse.duckdb"] = f"its views were not refreshed ({exc})"
    return done, failed


def tag_cmd(
    name: str = typer.Argument(..., help="The tag, e.g. release-2026-12-03 (a letter first)."),
    force: bool = typer.Option(False, "--force", help="Move an existing tag of that name to the current snapshots."),
    as_json: bool = typer.Option(False, "--json", help="Print each table's tagged snapshot as JSON."),
) -> None:
    """Tag every Iceberg table's current snapshot: `benchrun query --as-of NAME` reads exactly these
    numbers later (the numbers as they were when you decided), and no expiry removes them."""
    from benchrun.errors import BenchrunError
    from benchrun.warehouse import lake

    if not lake.enabled():
        raise BenchrunError(f"tag-warehouse: the tags are Iceberg's; unset {lake.FORMAT_ENV}=parquet (Iceberg is the "
                            "default)")
    from benchrun.warehouse.migrate import migrate_on_first_use

    home = _home("tag-warehouse")
    migrate_on_first_use(home)  # the tag names the migrated rows too
    tagged = lake.tag_tables(home, name, force=force)
    from benchrun.warehouse.views import refresh_views

    refresh_views(home)  # its views name the metadata files the tag's commits age out
    if as_json:
        # snapshot ids as strings, as `query --json` writes them: jq rounds integers beyond 2**53
        typer.echo(json.dumps({"tag": name, "snapshots": {t: str(s) for t, s in tagged.items()}}, indent=2,
                              sort_keys=True))
    else:
        for table, snapshot in sorted(tagged.items()):
            typer.echo(f"{table}: snapshot {snapshot} tagged {name}")
        if not tagged:
            typer.echo("no table has rows yet: nothing tagged")


def register(app: typer.Typer) -> None:
    app.command("migrate-warehouse")(migrate_cmd)
    app.command("maintain-warehouse")(maintain_cmd)
    app.command("tag-warehouse")(tag_cmd)
