"""The ``benchrun rebuild-warehouse`` command."""

from __future__ import annotations

from typing import Optional

import typer


def rebuild_warehouse_cmd(
    run_ids: Optional[list[str]] = typer.Argument(None, help="Runs to rebuild (default: every run)."),
) -> None:
    """Re-create the warehouse's facts from the run directories (or the store, where a run's
    directory is gone); exit 1 naming every run that could not be rebuilt. Each file curation reads
    is re-hashed against the run's stored evidence: one edited, added or removed since is named, and
    the run curated from the stored copy (refused when that does not read back intact either)."""
    from benchrun.errors import BenchrunError
    from benchrun.paths import existing_home
    from benchrun.warehouse.rebuild import rebuild_warehouse

    from benchrun.lifecycle import resign_if_intact

    home = existing_home("rebuild-warehouse")  # a mistyped BENCHRUN_HOME is refused, never made
    report = rebuild_warehouse(home, run_ids or None)
    for d in report.dropped:
        typer.echo(f"warning: {d.table}: damaged data file {d.path} ({d.problem}) taken out of the table; "
                   "the runs it could hold are curated again", err=True)
    for run_id, counts in report.rebuilt.items():
        typer.echo(f"rebuilt {run_id}: {sum(counts.values())} rows in {len(counts)} tables from {report.source[run_id]}")
        for why in report.diverged.get(run_id, ()):
            typer.echo(f"warning: {run_id}: run directory file {why}; curated from the stored evidence instead", err=True)
        run_dir = home / "runs" / run_id
        if run_dir.is_dir():  # its partitions are signed: sign the run again (only if its evidence is intact)
            why = resign_if_intact(run_dir, home)
            if why:
                typer.echo(f"warning: {run_id}: {why}", err=True)
    for run_id, why in report.skipped.items():
        typer.echo(f"skipped {run_id}: {why}; not written back")
    skipped = f", {len(report.skipped)} skipped (removed on purpose)" if report.skipped else ""
    typer.echo(f"rebuild-warehouse: {len(report.rebuilt)} run(s) rebuilt, {len(report.failed)} failed{skipped}")
    if report.failed:
        raise BenchrunError("rebuild-warehouse: " + "; ".join(f"{r}: {why}" for r, why in report.failed.items()))


def register(app: typer.Typer) -> None:
    """Add rebuild-warehouse to the benchrun CLI."""
    app.command("rebuild-warehouse")(rebuild_warehouse_cmd)
