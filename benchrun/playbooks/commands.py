"""The ``benchrun playbook`` command: the scenario playbooks' verdicts and evidence for one run."""

from __future__ import annotations

import json
from typing import Any, List, Optional

import typer
from benchrun.console import console


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


_STYLE = {"flagged": "bold red", "clear": "green", "unavailable": "yellow"}


def playbook_cmd(
    run_id: str = typer.Argument(..., help="The run id (curated into the warehouse)."),
    names: Optional[List[str]] = typer.Argument(None, help="Playbooks to run (default: all four)."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Baseline: a run id, run directory or "
                                           "published/<alias> (default: the baseline the run was compared with, "
                                           "else the one its spec names)."),
    as_json: bool = typer.Option(False, "--json", help="Print the verdicts, evidence rows and SQL as JSON."),
) -> None:
    """Answer the scenario playbooks for a run from the warehouse: verdict, reason and evidence rows."""
    from benchrun.paths import benchrun_home
    from benchrun.playbooks import DISPLAY_COLUMNS, playbooks_document, run_playbooks

    home = benchrun_home()
    baseline_id = None
    if baseline and ("/" in baseline or baseline.startswith(".")):
        from benchrun.stats.load import resolve_run

        baseline_id = resolve_run(baseline, home).name  # a run directory or published/<alias>
    elif baseline:
        baseline_id = baseline  # a run id: only the warehouse is needed (checked by run_playbooks)
    source = ""
    if baseline is None:
        baseline_id, source = default_baseline(home, run_id)
    results = run_playbooks(home, run_id, baseline_id, names or None)
    if as_json:
        typer.echo(json.dumps(playbooks_document(results), indent=2, default=str))
        return
    from rich.markup import escape
    from rich.table import Table

    con = console()
    con.print(f"[bold]{run_id}[/]" + (f" against baseline [bold]{baseline_id}[/]{escape(source)}" if baseline_id
                                      else " (no baseline: give --baseline RUN_ID)"))
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


def default_baseline(home: Any, run_id: str) -> tuple[str | None, str]:
    """The baseline a run's playbooks judge against when none is given: the run the comparison
    compared it with, else the one its spec's ``comparison.baseline.artifactRef`` names now."""
    from benchrun.errors import BenchrunError
    from benchrun.paths import validate_run_id
    from benchrun.stats.load import _get, load_run, resolve_run

    run_dir = home / "runs" / validate_run_id(run_id)
    comparison = run_dir / "structured" / f"{run_id}_comparison.json"
    try:
        doc = json.loads(comparison.read_text(encoding="utf-8"))
        if isinstance(doc, dict) and doc.get("baseline") and doc.get("baseline") != run_id:
            return str(doc["baseline"]), " (the run's own comparison)"
    except (OSError, ValueError):
        pass
    try:
        ref = _get(load_run(run_dir).spec, "spec", "comparison", "baseline", "artifactRef")
        found = resolve_run(str(ref), home, paths=False).name if ref else None
    except BenchrunError:
        return None, ""
    if found is None or found == run_id:
        return None, ""
    return found, f" (its spec's {ref})"


def register(app: typer.Typer) -> None:
    """Add playbook to the benchrun CLI."""
    app.command("playbook")(playbook_cmd)
