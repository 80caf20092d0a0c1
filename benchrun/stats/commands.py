"""CLI commands of the statistics: ``benchrun compare``, ``benchrun promote``, ``benchrun report``.

``benchrun compare`` exits 0 when no gating metric regressed, 3 when a gating regression is
suspected (the CLI runs no confirmation round, so a suspicion is not cleared here) or
confirmed, 4 when the one-variable gate refuses the pair, 2 for a run compared with itself,
1 on other errors.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from benchrun.errors import BenchrunError
from benchrun.console import console as make_console

if TYPE_CHECKING:
    from benchrun.stats.compare import Comparison

EXIT_GATING_REGRESSION = 3
EXIT_GATE_REFUSED = 4

JSON_KEYS = ("metric", "baseline_median", "candidate_median", "ratio", "ci_low", "ci_high", "p_value",
             "verdict", "gating")


def _num(v: object) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4g}"


def compare(
    baseline: str = typer.Argument(..., help="Baseline: run id, run directory, or published/current."),
    candidate: str = typer.Argument(..., help="Candidate: run id or run directory."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per metric on stdout."),
    variable: Optional[str] = typer.Option(
        None, "--variable", help="Variable under test (default: the candidate spec's comparison.variableUnderTest)."),
) -> None:
    """Compare CANDIDATE with BASELINE behind the one-variable gate: ratios, exact intervals, verdicts.

    Exit 0: no gating regression; 3: a gating regression is suspected or confirmed; 4: the
    one-variable gate refused the pair; 2: a run compared with itself; 1: another error.
    """
    from benchrun.rundir import PHASES
    from benchrun.stats.analysis import compare_runs
    from benchrun.stats.load import _read_json, resolve_run

    base_dir, cand_dir = resolve_run(baseline), resolve_run(candidate)
    if base_dir.resolve() == cand_dir.resolve():
        raise BenchrunError(f"compare: baseline {baseline!r} and candidate {candidate!r} are the same run "
                            f"({base_dir.name}); compare two different runs", exit_code=2)
    not_run = {*PHASES[:PHASES.index("Analyzing")], "Rejected"}  # no measurements yet, or never
    for role, ref, run_dir in (("baseline", baseline, base_dir), ("candidate", candidate, cand_dir)):
        phase = _read_json(run_dir / "status.json", "status.json").get("phase")  # none: a bare run directory
        if phase in not_run:
            raise BenchrunError(f"compare: {role} {ref!r} ({run_dir.name}) has not run (phase {phase}); "
                                f"compare runs whose suites have run (`benchrun runs` lists them)")
    gate, result = compare_runs(base_dir, cand_dir, variable=variable)
    if result is None:
        raise BenchrunError(gate.message() + "; compare runs that differ only in the declared variable",
                            exit_code=EXIT_GATE_REFUSED)
    records = result.records()
    if as_json:
        out = [{**{k: r.get(k) for k in JSON_KEYS}, **{k: v for k, v in r.items() if k not in JSON_KEYS}}
               for r in records]
        typer.echo(json.dumps(out, indent=2, default=str))
        _exit(result)
        return
    from rich.markup import escape
    from rich.table import Table

    console = make_console()
    console.print(escape(gate.message()))
    table = Table(title=f"{candidate} vs {baseline} (confidence {result.confidence:.0%}; ratio > 1 is better)")
    for col in ("metric", "gating", "baseline", "candidate", "ratio", "interval", "p 2-sided", "p adj", "verdict"):
        table.add_column(col, justify="left" if col in ("metric", "verdict") else "right")
    colors = {"regression": "red", "improvement": "green", "no_change": "blue", "inconclusive": "white"}
    for r in records:
        table.add_row(
            escape(r["metric"]), "★" if r["gating"] else "", _num(r["baseline_median"]), _num(r["candidate_median"]),
            *_effect_cells(r), _num(r["p_value"]),
            _num(r["p_adjusted"]), f"[{colors[r['verdict']]}]{r['verdict']}[/]",
        )
    console.print(table)
    console.print(P_ADJ_NOTE)
    for note in result.notes:
        console.print(f"note: {escape(note)}")
    cond = result.condition()
    console.print(escape(f"RegressionDetected={cond['status']} ({cond['reason']}): {cond['message']}"))
    _exit(result)


P_ADJ_NOTE = ("p adj: gating rows (★) are Holm-adjusted over the one-sided p in the regression direction "
              "(the gate); other rows Benjamini–Hochberg over the two-sided p.")


def _effect_cells(r: dict) -> tuple[str, str]:
    """Ratio and its interval; for metrics compared by absolute difference, Δ in the unit."""
    if r.get("scale") == "absolute" and r.get("difference") is not None:
        return f"Δ {_num(r['difference'])}", f"[{_num(r['diff_ci_low'])}, {_num(r['diff_ci_high'])}]"
    return _num(r["ratio"]), f"[{_num(r['ci_low'])}, {_num(r['ci_high'])}]"


def _exit(result: "Comparison") -> None:
    if result.gating_regression:
        raise typer.Exit(EXIT_GATING_REGRESSION)


def promote(
    run_id: str = typer.Argument(..., help="The run to publish as baseline."),
    alias: str = typer.Option("current", "--alias", help="Alias name under published/ (specs refer to it)."),
) -> None:
    """Point the baseline alias published/current (or published/ALIAS) at RUN_ID."""
    from benchrun.stats.load import promote as _promote

    path = _promote(run_id, alias=alias)
    typer.echo(f"published/{alias} -> {run_id} ({path})")


def report(run_id: str = typer.Argument(..., help="Run id or run directory.")) -> None:
    """Write the run's self-contained HTML report and its figures."""
    from benchrun.report.html import build_report
    from benchrun.stats.load import resolve_run

    run_dir = resolve_run(run_id)
    path = build_report(run_dir)
    _resign(run_dir)
    typer.echo(f"report: {path}")
    typer.echo(f"figures: {path.parent.parent / 'figures'}")


def _resign(run_dir: "Path") -> None:
    """The report and figures are signed files: sign the run again through the run's own path
    (a run never signed stays unsigned; one whose evidence was edited is not re-signed)."""
    from benchrun.provenance.signing import resign_if_intact

    run_dir = Path(run_dir)
    if (run_dir / "status.json").is_file() and run_dir.parent.name == "runs":
        why = resign_if_intact(run_dir)
        if why:
            typer.echo(f"warning: {run_dir.name}: {why}", err=True)


def register(app: typer.Typer) -> None:
    """Add compare, promote and report to the benchrun CLI."""
    app.command("compare")(compare)
    app.command("promote")(promote)
    app.command("report")(report)
