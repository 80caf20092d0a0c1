"""CLI: ``benchrun cadence run NAME`` submits a cadence's specs now, as its schedule would."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any, Optional

import typer

cadence_app = typer.Typer(
    name="cadence",
    help="Cadences (canary, nightly, pre_release): submit their specs now, for CI and people without the UI.",
    no_args_is_help=True,
)


def _use_home(home: Optional[Path]) -> None:
    if home is not None:
        os.environ["BENCHRUN_HOME"] = str(home.expanduser().resolve())


@cadence_app.command("run")
def run(
    name: str = typer.Argument(..., help="canary, nightly or pre_release"),
    specs: Optional[Path] = typer.Option(
        None, "--specs", help="folder searched recursively (default $BENCHRUN_SPECS_DIR or specs/; crd/ skipped)"
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="list the specs that would be submitted; submit nothing"),
    execute: bool = typer.Option(False, "--execute", help="after submitting, run each one here, one after another"),
    home: Optional[Path] = typer.Option(None, "--home", help="benchrun state directory (default $BENCHRUN_HOME or ./.benchrun)"),
) -> None:
    """Submit every spec whose intent.cadence is NAME and whose automation.ci switch for it is on.

    Invalid documents are listed with their errors and never run; the exit status is 1 if
    any was invalid, or was valid but could not be registered (the shared state or the disk
    failed: run the command again once fixed); the others are still submitted.
    """
    from benchrun.automation.discovery import check_cadence, default_specs_dir, discover
    from benchrun.automation.ticks import cadence_tick, submit_register

    _use_home(home)
    cadence = check_cadence(name)
    if execute:  # as `benchrun run`: a bad setting is refused before anything is submitted
        from benchrun.runsettings import settings_up_front

        interval_s = settings_up_front()
    folder = specs if specs is not None else default_specs_dir()
    failed_runs = 0
    not_registered: list[str] = []
    if dry_run:
        found = discover(cadence, folder)
        for spec in found.selected:
            typer.echo(f"would submit {spec.path} ({spec.name}, {spec.spec_digest[:19]})")
        invalid = list(found.invalid)
        if not found.selected:
            typer.echo(f"no {cadence} specs under {folder}")
    else:
        from benchrun.submit import get_instance

        instance = get_instance()
        outcome = cadence_tick(cadence, folder, dt.datetime.now(dt.timezone.utc), submit_register(None, instance))
        for sub in outcome.submissions:
            typer.echo(f"submitted {sub.run_id}  {sub.path}")
        for note in outcome.notes:
            typer.echo(note)
        invalid = outcome.invalid
        not_registered = outcome.failed
        failed_runs = _execute_all([s.prepared for s in outcome.submissions], interval_s) if execute else 0
    for bad in invalid:
        typer.echo(f"invalid {bad.path} (not run): {len(bad.errors)} error(s)", err=True)
        for err in bad.errors:
            typer.echo(f"  {err}", err=True)
    for text in not_registered:
        typer.echo(f"not submitted: {text}; run this command again once that is fixed", err=True)
    if invalid or failed_runs or not_registered:
        raise typer.Exit(1)


def _execute_all(prepared_runs: list[Any], interval_s: float) -> int:
    """Run each submitted run in this process, in order, as ``benchrun run`` runs one
    (:func:`benchrun.commands.run_here`: the one-benchmark-at-a-time turn, live progress, Ctrl-C as
    Canceled, a failed step's reason); count the runs that did not succeed. A canceled run stops the
    rest, which stay submitted (Pending)."""
    from benchrun.commands import _console, run_here

    failed = 0
    for i, prepared in enumerate(prepared_runs):
        typer.echo(f"running {prepared.run_id} ...")
        phase = run_here(_console(), prepared, interval_s).get("phase")
        failed += phase != "Succeeded"
        rest = [p.run_id for p in prepared_runs[i + 1:]]
        if phase == "Canceled" and rest:
            typer.echo(f"not run after the cancel, still submitted (Pending): {', '.join(rest)}; run them from the UI "
                       "or `benchrun cancel RUN_ID` each", err=True)
            break
    return failed


def register(app: typer.Typer) -> None:
    """Add the ``cadence`` command group to the benchrun app."""
    app.add_typer(cadence_app, name="cadence")
