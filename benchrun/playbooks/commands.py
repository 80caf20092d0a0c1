"""The ``benchrun playbook`` command: the scenario playbooks' verdicts and evidence for one run."""

from __future__ import annotations

import json
from typing import Any, List, Optional

import typer
from benchrun.console import console, number


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return number(value)
    return str(value)


_STYLE = {"flagged": "bold red", "clear": "green", "unavailable": "yellow"}


def playbook_cmd(
    run_id: str = typer.Argument(..., help="The run id (curated into the warehouse)."),
    names: Optional[List[str]] = typer.Argument(None, help="Playbooks to run (default: all four)."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Baseline: a run id, run directory or "
                                           "published/<alias>; it must be Succeeded (default: the baseline the run was "
                                           "compared with when that comparison's gate passed, else the one its spec "
                                           "names; one no longer in the warehouse is skipped)."),
    as_json: bool = typer.Option(False, "--json", help="Print the verdicts, evidence rows and SQL as JSON."),
) -> None:
    """Answer the scenario playbooks for a run from the warehouse: verdict, reason and evidence rows."""
    from benchrun.paths import existing_home
    from benchrun.playbooks import DISPLAY_COLUMNS, playbooks_document, run_playbooks
    from benchrun.playbooks.baseline import default_baseline

    home = existing_home("playbook")  # a mistyped BENCHRUN_HOME is refused, never made
    baseline_id = None
    if baseline and ("/" in baseline or baseline.startswith(".")):
        from benchrun.stats.load import resolve_run

        baseline_id = resolve_run(baseline, home).name  # a run directory or published/<alias>
    elif baseline:
        baseline_id = baseline  # a run id: only the warehouse is needed (checked by run_playbooks)
    note = ""
    if baseline is None:
        baseline_id, note = default_baseline(home, run_id)
    gate_note = _gate_note(home, run_id, baseline_id) if baseline_id and note != "the run's own comparison" else ""
    results = run_playbooks(home, run_id, baseline_id, names or None)
    if gate_note and not as_json:
        typer.echo(f"warning: {gate_note}", err=True)
    if as_json:
        typer.echo(json.dumps(playbooks_document(results, "; ".join(filter(None, (note, gate_note)))), indent=2,
                              default=str))
        return
    from rich.markup import escape
    from rich.table import Table

    con = console()
    con.print(f"[bold]{escape(run_id)}[/]" + (
        f" against baseline [bold]{escape(baseline_id)}[/]" + (f" ({escape(note)})" if note else "") if baseline_id
        else f" (no baseline: {escape(note) + '; ' if note else ''}give --baseline RUN_ID)"))
    for res in results:
        con.print()
        con.print(f"[bold]{res.name}[/]: [{_STYLE[res.verdict]}]{res.verdict}[/]")
        con.print(f"  {res.question}", markup=False)
        con.print(f"  {res.reason}", markup=False)
        if not res.rows:
            continue
        cols = [c for c in DISPLAY_COLUMNS.get(res.name, tuple(res.rows[0])) if c in res.rows[0]]
        table = Table(caption=f"{len(res.rows)} rows · query_spec_digest {res.query_spec_digest[:16]}… "
                              "(--json for every column and the SQL)")
        for c in cols:
            table.add_column(c, overflow="fold")
        for row in res.rows:
            table.add_row(*[escape(_cell(row.get(c))) for c in cols], style="red" if row.get("flagged") else None)
        con.print(table)


def _gate_note(home: Any, run_id: str, baseline_id: str) -> str:
    """Why the pair is not comparable by the one-variable gate ("" when it passes, or when a run
    directory is gone and the gate cannot be asked). A baseline given with --baseline, or the one the
    run's spec names, was never gated (found in review: a baseline on another model got a tail-latency
    verdict without a word); the playbooks still answer, with this said."""
    from benchrun.errors import BenchrunError
    from benchrun.stats.gate import check_gate
    from benchrun.stats.load import load_run

    try:
        gate = check_gate(load_run(home / "runs" / baseline_id), load_run(home / "runs" / run_id))
    except BenchrunError:
        return ""
    if gate.passed:
        return ""
    return (f"baseline {baseline_id} and run {run_id} differ in more than the variable under test "
            f"({gate.message()}): the answers compare different setups")


def register(app: typer.Typer) -> None:
    """Add playbook to the benchrun CLI."""
    app.command("playbook")(playbook_cmd)
