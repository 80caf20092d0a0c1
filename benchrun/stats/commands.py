"""CLI commands of the statistics: ``benchrun compare``, ``benchrun promote``, ``benchrun report``, ``benchrun plan``.

``benchrun compare`` exits 0 when no gating metric regressed, 3 when a gating regression is
suspected (the CLI runs no confirmation round, so a suspicion is not cleared here) or
confirmed, 4 when the one-variable gate refuses the pair, 5 when the pair is not comparable
(fail closed: a run not Succeeded, different layer/suite sets, evidence that does not verify,
a primary metric not measured in both), 2 for a run compared with itself or a ``--variable`` /
``--allow-differences`` path that does not resolve, 1 on other errors. Exit 0 is only ever given
for metrics measured in both runs; its condition's reason says whether every primary was shown
within its margin (``NoGatingRegression``) or some were not (``NoRegressionShown``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from benchrun.errors import BenchrunError, check_range
from benchrun.console import console as make_console, number

if TYPE_CHECKING:
    import click

    from benchrun.stats.compare import Comparison
    from benchrun.stats.gate import GateResult

EXIT_GATING_REGRESSION = 3
EXIT_GATE_REFUSED = 4

JSON_KEYS = ("metric", "baseline_median", "candidate_median", "ratio", "ci_low", "ci_high", "p_value",
             "verdict", "gating", "role", "change_pct", "change_low_pct", "change_high_pct", "better_worse",
             "mde_pct", "replicates_needed", "advice", "p99_pooled_baseline", "p99_pooled_candidate")


def _num(v: object) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else number(float(v))


def error_json(exit_code: int, message: str, baseline: str | None, candidate: str | None) -> str:
    """``compare --json``'s answer when it compares nothing because of an error (a run not found, a
    usage error the CLI reports before the command runs: ``benchrun.cli``): why, and the exit code."""
    return json.dumps({"refused": True, "error": True, "exit_code": exit_code, "message": message,
                       "baseline": baseline, "candidate": candidate}, indent=2)


def usage_error_json(error: "click.UsageError", argv: list[str]) -> str | None:
    """The JSON ``benchrun compare ... --json`` writes for a usage error click raised before the
    command ran (a missing CANDIDATE, ``--variable`` without its value), or None when the command line
    ``argv`` (without the program) is another command's or has no ``--json`` before any ``--``. The
    option parser's errors carry no context, so the command is read from ``argv``."""
    ctx = error.ctx
    if argv[:1] != ["compare"] or (ctx is not None and getattr(ctx.command.callback, "__wrapped__",
                                                               ctx.command.callback) is not compare):
        return None
    args = argv[1:]
    if "--json" not in (args[:args.index("--")] if "--" in args else args):
        return None
    given = ctx.params if ctx is not None else {}
    return error_json(error.exit_code, error.format_message(), given.get("baseline"), given.get("candidate"))


def compare(
    baseline: str = typer.Argument(..., help="Baseline: run id, run directory, or published/current."),
    candidate: str = typer.Argument(..., help="Candidate: run id or run directory."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout: the exit code, the "
                                 "RegressionDetected condition, the notes and one object per metric under "
                                 "'metrics' (a refused pair: the refusal and the exit code)."),
    variable: Optional[str] = typer.Option(
        None, "--variable", help="Variable under test: a named variable or a spec path such as "
        "layers.micro.suites[gemm].env.OMP_NUM_THREADS (default: the candidate spec's comparison.variableUnderTest)."),
    allow_differences: list[str] = typer.Option(
        [], "--allow-differences", help="A spec path (or environment field) allowed to differ besides the variable "
        "under test; repeat it, or separate paths with commas. Recorded in the output and, replacing the one it "
        "had, in the candidate's comparison document and report."),
) -> None:
    """Compare CANDIDATE with BASELINE behind the one-variable gate: ratios, exact intervals, verdicts.

    Exit 0: no gating regression; 3: a gating regression is suspected or confirmed; 4: the
    one-variable gate refused the pair; 5: not comparable (a run not Succeeded, different
    suites, evidence that does not verify, a primary not measured in both); 2: a run
    compared with itself, or a --variable / --allow-differences path that does not resolve;
    1: another error.
    """
    from benchrun.stats.admit import EXIT_NOT_COMPARABLE
    from benchrun.stats.analysis import compare_runs
    from benchrun.stats.load import alias_of, resolve_run
    from benchrun.paths import home_location

    from benchrun.report.worker import settle

    home = home_location()[0]  # read, never created: a run directory given as a path needs no home
    try:
        settle(home, lambda line: typer.echo(line, err=True))  # both runs' signatures cover their final reports
        base_dir, cand_dir = resolve_run(baseline, home), resolve_run(candidate, home, role="candidate")
        if base_dir.resolve() == cand_dir.resolve():
            raise BenchrunError(f"compare: baseline {baseline!r} and candidate {candidate!r} are the same run "
                                f"({base_dir.name}); compare two different runs", exit_code=2)
        allow = tuple(p.strip() for a in allow_differences for p in a.split(",") if p.strip())
        _check_paths(base_dir, cand_dir, variable, allow)
        gate, result = compare_runs(base_dir, cand_dir, variable=variable, baseline_alias=alias_of(baseline),
                                    allow_differences=allow, home=home)
    except BenchrunError as exc:
        if as_json:  # a pipeline reading the JSON learns why there is nothing to read (a baseline alias not set...)
            typer.echo(error_json(exc.exit_code, str(exc), baseline, candidate))
        raise
    if result is None:
        code = EXIT_NOT_COMPARABLE if gate.not_comparable else EXIT_GATE_REFUSED
        message = gate.message() if gate.not_comparable else (
            gate.message() + "; compare runs that differ only in the declared variable")
        if as_json:  # a pipeline reading the JSON learns why there are no rows (the error goes to stderr)
            typer.echo(json.dumps(strict_json({
                "refused": True, "exit_code": code, "comparable": not gate.not_comparable, "message": message,
                "baseline": baseline, "candidate": candidate, "variable": gate.variable,
                "refusals": [r.to_json() for r in gate.refusals], "problems": list(gate.problems),
                "differences": [{"field": d.field, "category": d.category, "baseline": d.baseline,
                                 "candidate": d.candidate, "allowed": d.allowed, "how": d.how} for d in gate.diffs],
            }), indent=2, default=str, allow_nan=False))
        raise BenchrunError(message, exit_code=code)
    records = result.records()
    if allow:  # an override leaves its trace in the candidate's own record, as comparison.allowDifferences does
        typer.echo(f"gate overridden: --allow-differences {', '.join(allow)}; "
                   + _record_override(gate, result, base_dir, cand_dir), err=True)
    if as_json:  # the run-level answer beside the rows: what the table's notes and condition line say
        extra = {"allowed_differences": list(allow)} if allow else {}
        rows = [{**{k: r.get(k) for k in JSON_KEYS}, **{k: v for k, v in r.items() if k not in JSON_KEYS}, **extra}
                for r in records]
        out = {"refused": False, "exit_code": EXIT_GATING_REGRESSION if result.gating_regression else 0,
               "condition": result.condition(), "notes": list(result.notes), "baseline": baseline,
               "candidate": candidate, "variable": gate.variable, "metrics": rows}
        typer.echo(json.dumps(strict_json(out), indent=2, default=str, allow_nan=False))
        _exit(result)
        return
    from rich.markup import escape
    from rich.table import Table

    from benchrun.stats.reading import left_out_notes, n_shown, pooled_notes

    console = make_console()
    console.print(escape(gate.message()))
    table = Table(title=f"{candidate} vs {baseline} (confidence {result.confidence:.0%}; change = candidate against "
                        "baseline as measured, + = the value went up; better/worse by the metric's direction)")
    for col in ("metric", "role", "baseline", "candidate", "n", "change", "interval", "", "MDE", "p 2-sided",
                "p adj", "verdict"):
        table.add_column(col, justify="left" if col in ("metric", "verdict", "role", "") else "right")
    for r in display_order(records):
        shown = verdict_cell(r)
        if r.get("advice"):
            shown += f" [yellow]{escape(r['advice'])}[/]"
        table.add_row(
            escape(r["metric"]), "★ primary" if r["gating"] else (r.get("role") or ""), _num(r["baseline_median"]),
            _num(r["candidate_median"]), n_shown(r), *change_cells(r), r.get("better_worse") or "", _mde(r), _num(r["p_value"]),
            _num(r["p_adjusted"]), shown,
        )
    console.print(table)
    console.print(P_ADJ_NOTE)
    for line in left_out_notes(records):
        console.print(escape(line), highlight=False)
    for line in pooled_notes(records):
        console.print(escape(line), highlight=False)
    for note in result.notes:
        console.print(f"note: {escape(note)}")
    cond = result.condition()
    console.print(escape(f"RegressionDetected={cond['status']} ({cond['reason']}): {cond['message']}"))
    _exit(result)


VERDICT_STYLES = {"regression": "red", "improvement": "green", "no_change": "blue", "inconclusive": "white"}


def verdict_cell(r: dict) -> str:
    """The verdict as rich markup: red/green only on gating rows (they decide the run, as the
    report's verdict box says); a secondary row's verdict in plain text; context has none."""
    verdict = r.get("verdict") or ""
    spread = r.get("spread") or ""
    extra = f" (spread {spread})" if spread and verdict != "spread changed" else ""
    if r.get("role") == "context" or verdict not in VERDICT_STYLES:
        return "context (no verdict)" if r.get("role") == "context" else verdict + (f" ({spread})" if spread else "")
    return (f"[{VERDICT_STYLES[verdict]}]{verdict}[/]" if r.get("gating") else verdict) + extra


def _record_override(gate: "GateResult", result: "Comparison", base_dir: Path, cand_dir: Path) -> str:
    """Write this comparison, with the differences the CLI let through, as the candidate's
    comparison document and report (re-signing the run as `benchrun report` does): an override
    is never only on someone's terminal."""
    from benchrun.report.html import build_report
    from benchrun.stats.analysis import write_comparison

    had = (cand_dir / "structured" / f"{cand_dir.name}_comparison.json").is_file()
    path = write_comparison(gate, result, base_dir.name, cand_dir)
    report_path = build_report(cand_dir)
    _resign(cand_dir, path.relative_to(cand_dir).as_posix())
    return f"recorded in {path} and {report_path}" + (" (replacing the comparison the run had)" if had else "")


def display_order(records: list[dict]) -> list[dict]:
    """Outcomes first (primary, then secondary), each suite's context rows right after that
    suite's outcomes (they explain them); context of a suite with no outcome last."""
    order = {"primary": 0, "secondary": 1, "context": 2}
    outcomes = sorted((r for r in records if r.get("role") != "context"),
                      key=lambda r: order.get(r.get("role") or "secondary", 1))
    suites = list(dict.fromkeys(str(r.get("suite")) for r in outcomes))
    rank = {s: i for i, s in enumerate(suites)}
    out = []
    for s in suites:
        out.extend(r for r in outcomes if str(r.get("suite")) == s)
        out.extend(r for r in records if r.get("role") == "context" and str(r.get("suite")) == s)
    out.extend(r for r in records if r.get("role") == "context" and str(r.get("suite")) not in rank)
    return out


P_ADJ_NOTE = ("p adj: gating rows (★) are Holm-adjusted over the one-sided p in the regression direction "
              "(the gate); secondary rows Benjamini–Hochberg over the two-sided p, as their own family; context "
              "rows are in no family. n: the replicates compared, baseline/candidate; ‡: some were left out "
              "(contended and excluded, or failed), as said below the table. MDE: the smallest change this n detects with 80 % power at that corrected α. "
              "ratio in the JSON is on the higher-is-better scale; change_pct is as measured. change: the "
              "estimated shift the verdict is about (Hodges–Lehmann over replicates; §: a request percentile judged on "
              "pooled requests, whose change is the ratio of the two arms' pooled-request p99s, given below the "
              "table), not the ratio of the two medians shown: when replicates cluster they can differ, even in "
              "sign. baseline and candidate: the replicate medians, on every row.")


def change_cells(r: dict) -> tuple[str, str]:
    """The change as measured (+ = the value went up) and its interval: % for ratio-scale
    metrics, Δ in the unit for those compared by absolute difference."""
    from benchrun.stats.reading import POOLED_MARK, pooled_shift

    pct, lo, hi = r.get("change_pct"), r.get("change_low_pct"), r.get("change_high_pct")
    if r.get("scale") == "absolute" and r.get("difference") is not None:
        return f"Δ {r['difference']:+.4g}", f"[{_num(r['diff_ci_low'])}, {_num(r['diff_ci_high'])}]"
    if pct is None:
        return "–", ""
    mark = f" {POOLED_MARK}" if pooled_shift(r) else ""  # the pooled-request p99s' ratio (said below the table)
    return f"{pct:+.1f} %{mark}", f"[{_pct(lo)}, {_pct(hi)}]"


def _pct(v: object) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:+.1f} %"


def _mde(r: dict) -> str:
    v = r.get("mde_pct")
    if v is None:
        return ""
    return "none at this n" if math.isinf(v) else f"{v:.1f} %"


def _check_paths(base_dir: Path, cand_dir: Path, variable: str | None, allow: tuple[str, ...]) -> None:
    """``--variable`` and ``--allow-differences`` by the rules ``validate`` applies to the spec's own
    ``comparison.variableUnderTest`` (a path must name a field the gate compares, in either run's
    spec: a field the candidate removed is a difference too) and ``allowDifferences`` (paths that
    parse): one that names nothing would let the gate pass on a variable nobody changed (exit 2,
    naming the option)."""
    import copy

    from benchrun.spec.comparison_rules import rule_variable_under_test_resolves
    from benchrun.stats.load import load_run

    said: list[list[tuple[tuple[object, ...], str]]] = []
    for run_dir in (cand_dir, base_dir):
        doc = copy.deepcopy(load_run(run_dir).spec)
        if not isinstance(doc, dict) or not isinstance(doc.setdefault("spec", {}), dict) or not isinstance(
                doc["spec"].setdefault("comparison", {}), dict):
            return  # a damaged pinned spec: admission refuses the run (its evidence does not verify), exit 5
        comp = doc["spec"]["comparison"]
        if variable is not None:
            comp["variableUnderTest"] = variable
        comp["allowDifferences"] = list(allow)
        said.append(list(rule_variable_under_test_resolves(doc)))
    in_base = {path for path, _ in said[1]}
    for path, message in said[0]:
        if path in in_base:  # wrong in both specs
            option = "--variable" if path[-1] == "variableUnderTest" else "--allow-differences"
            raise BenchrunError(f"compare {option}: {message}", exit_code=2)


def strict_json(value: object) -> object:
    """``value`` with every float that JSON cannot hold (NaN, ±inf) as null: ``json.dumps`` would
    write the ``NaN``/``Infinity`` tokens, which strict parsers (jq, Go, browsers) reject. A null
    ``mde_pct`` is the text table's "none at this n"."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def _exit(result: "Comparison") -> None:
    if result.gating_regression:
        raise typer.Exit(EXIT_GATING_REGRESSION)


def promote(
    run_id: str = typer.Argument(..., help="The run to publish as baseline."),
    alias: str = typer.Option("current", "--alias", help="Alias name under published/ (specs refer to it)."),
    public_key: Optional[Path] = typer.Option(None, "--public-key", help="PEM ed25519 public key to verify with "
                                              "(default: as `benchrun verify`, else the home's own key)."),
    trust_keyid: list[str] = typer.Option([], "--trust-keyid", help="Trust the home's own key if its keyid is this."),
    allow_adhoc: bool = typer.Option(False, "--allow-adhoc", help="Publish a run whose intent.cadence is adhoc."),
) -> None:
    """Verify RUN_ID as `benchrun verify` does (signature, manifest, every signed file, the stored
    objects), then point published/current (or published/ALIAS) at it, recording its attestation digest."""
    from benchrun.paths import existing_home
    from benchrun.report.worker import settle
    from benchrun.stats.baseline import promote as _promote

    # its report is final, and signed; a mistyped BENCHRUN_HOME is refused, never made
    settle(existing_home("promote"), lambda line: typer.echo(line, err=True))
    path = _promote(run_id, alias=alias, public_key=public_key, pinned=tuple(trust_keyid), allow_adhoc=allow_adhoc)
    from benchrun.stats.baseline import read_alias

    _, rec = read_alias(path)
    typer.echo(f"verified {run_id}: signature ({rec['checked_with']}), every signed file, manifest.json, "
               f"{rec['stored_objects']} stored objects")
    typer.echo(f"published/{alias} -> {run_id} ({path}; attestation sha256 {rec['attestation_sha256']})")
    from benchrun.paths import benchrun_home
    from benchrun.stats.load import runs_root

    _warn_contended(runs_root(benchrun_home()) / run_id, alias)


def _warn_contended(run_dir: "Path", alias: str) -> None:
    """A baseline measured on a busy machine is published (it is the run asked for), but said:
    every comparison against it keeps or leaves out those replicates (benchrun.stats.contention)."""
    from benchrun.rundir import read_json_or_none

    st = read_json_or_none(Path(run_dir) / "status.json", fix="restore it with `benchrun verify`") or {}
    for c in st.get("conditions") or []:
        if c.get("type") == "ReplicatesUncontended" and c.get("status") == "False":
            typer.echo(f"warning: published/{alias} was measured partly on a contended machine "
                       f"(ReplicatesUncontended=False: {c.get('message', '')}); comparisons against it leave those "
                       "replicates out where 3 quiet ones remain, else keep them and say so (‡)", err=True)


def report(run_id: str = typer.Argument(..., help="Run id or run directory.")) -> None:
    """Write the run's self-contained HTML report and its figures."""
    from benchrun.report.html import build_report
    from benchrun.stats.load import resolve_run

    from benchrun.paths import home_location
    from benchrun.report.worker import settle

    settle(home_location()[0], lambda line: typer.echo(line, err=True))  # one writer of the report at a time
    run_dir = resolve_run(run_id)
    _refuse_live(run_dir)
    kept = _signed_report_files(run_dir)
    path = build_report(run_dir)
    if kept is None:
        _resign(run_dir)
    else:
        _resign_or_restore(run_dir, kept)
    typer.echo(f"report: {path}")
    typer.echo(f"figures: {path.parent.parent / 'figures'}")


def _refuse_live(run_dir: "Path") -> None:
    """A run still in progress gets no report from the CLI: it would draw figures beside a
    benchmark that is measuring and record a partial report as the run's; the run writes its
    own when it ends."""
    from benchrun.rundir import TERMINAL_PHASES, read_json_or_none

    phase = (read_json_or_none(Path(run_dir) / "status.json", fix="restore it from the run's artifact store "
                               "(`benchrun verify`)") or {}).get("phase")
    if phase and phase not in TERMINAL_PHASES:
        raise BenchrunError(f"run {Path(run_dir).name} is {phase}: its report is written when it ends (`benchrun show "
                            f"{Path(run_dir).name}` shows its progress); if its process is gone, `benchrun runs` "
                            "marks it Failed, and then `benchrun report` writes one")


def plan(
    spec: str = typer.Argument(..., help="A BenchmarkRun spec file."),
    power: float = typer.Option(0.8, "--power", min=0.5, max=0.99, help="Power to plan for."),
    max_n: int = typer.Option(30, "--max-n", min=2, max=100, help="Most replicates considered."),
) -> None:
    """How many replicates each primary metric needs to detect its δ, from the warehouse's history."""
    from benchrun.paths import existing_home
    from benchrun.spec.normal import WorkloadDigests
    from benchrun.spec.validation import load_spec
    from benchrun.stats.planning import plan as make_plan

    loaded = load_spec(spec)
    digests = WorkloadDigests(loaded.workload_spec_digest, loaded.workload_spec_digest_normalized)
    check_range(power, "--power", 0.5, 0.99)  # NaN passed typer's bounds and printed "30 replicates for nan% power"
    plans = make_plan(loaded.document, digests, existing_home("plan"), target=power, max_n=max_n)
    if not plans:
        raise BenchrunError(f"{spec}: no primary metrics (spec.metrics.<family>.primary): nothing to plan")
    con = make_console()
    for p in plans:
        need = "?" if p.needed is None else str(p.needed)
        now = "" if p.power_at_current is None else f"; power now at {p.current}: {p.power_at_current:.0%}"
        where = f" in {p.suite}" if p.suite and not p.metric.startswith(f"{p.suite}/") else ""
        con.print(f"{p.metric}{where}: {need} replicates for {power:.0%} power to detect {p.delta_pct:g} % "
                  f"(CV {_num(p.cv * 100)} % from {p.runs} runs, {p.family} gating tests{now})"
                  + (f" — {p.note}" if p.note else ""), markup=False, highlight=False)


def _resign(run_dir: "Path", *written: str) -> None:
    """The report and figures are signed files: sign the run again through the run's own path
    (a run never signed stays unsigned; one whose evidence, or a signed file other than the
    report, its figures and ``written``, was edited, or with a file added since that this
    command did not write, is not re-signed)."""
    from benchrun.lifecycle import resign_if_intact
    from benchrun.report.html import report_outputs

    run_dir = Path(run_dir)
    if (run_dir / "status.json").is_file() and run_dir.parent.name == "runs":
        why = resign_if_intact(run_dir, rewritten=(*report_outputs(run_dir), *written))
        if why:
            typer.echo(f"warning: {run_dir.name}: {why}", err=True)


def _signed_report_files(run_dir: "Path") -> "dict[str, bytes | None] | None":
    """The report's files as signed (run-relative path -> bytes, None when absent), for a signed run of
    a home; None for a run never signed (its report is simply written)."""
    from benchrun.provenance.signing import envelope_path
    from benchrun.report.html import report_outputs

    run_dir = Path(run_dir)
    if not (envelope_path(run_dir).is_file() and (run_dir / "status.json").is_file() and run_dir.parent.name == "runs"):
        return None
    return {rel: (run_dir / rel).read_bytes() if (run_dir / rel).is_file() else None for rel in report_outputs(run_dir)}


def _resign_or_restore(run_dir: "Path", kept: "dict[str, bytes | None]") -> None:
    """Sign the run again over the report just written; when it cannot be (a key that does not verify its
    signature, an edit elsewhere), put the signed report and figures back as they were and refuse: the
    report was rewritten with exit 0 and the run then failed verify and promote (review 2026-12-08)."""
    from benchrun.fsio import atomic_write_bytes
    from benchrun.lifecycle import resign_if_intact
    from benchrun.report.html import report_outputs

    run_dir = Path(run_dir)
    why = resign_if_intact(run_dir, rewritten=tuple(report_outputs(run_dir)))
    if not why:
        return
    for rel in sorted(set(report_outputs(run_dir)) | set(kept)):
        data = kept.get(rel)
        if data is not None:
            atomic_write_bytes(run_dir / rel, data)
        else:
            (run_dir / rel).unlink(missing_ok=True)
    raise BenchrunError(f"{run_dir.name}: report not rewritten, its signed report and figures are kept as they were: "
                        f"{why}. The run is signed, and a report it cannot sign again would fail `benchrun verify` "
                        "and `promote`; make the signature checkable (the key that signed it: unset "
                        "BENCHRUN_VERIFY_PUBLIC_KEY / BENCHRUN_SIGNING_KEY if they name another) and run it again")


def register(app: typer.Typer) -> None:
    """Add compare, promote, report and plan to the benchrun CLI."""
    app.command("compare")(compare)
    app.command("promote")(promote)
    app.command("report")(report)
    app.command("plan")(plan)
