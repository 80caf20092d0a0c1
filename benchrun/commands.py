"""CLI commands for the run lifecycle: run, submit, runs, show."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Iterator, Optional

import typer

from benchrun.dagster_result import _failure_reason, _interrupted, _only_the_verdict_check_failed
from benchrun.errors import BenchrunError

HomeOpt = typer.Option(None, "--home", help="benchrun state directory (default $BENCHRUN_HOME or ./.benchrun)")


def _use_home(home: Optional[Path]) -> None:
    # The assets find the run directory through $BENCHRUN_HOME, in this process or the UI's.
    if home is not None:
        os.environ["BENCHRUN_HOME"] = str(home.expanduser().resolve())


def _read_home(home: Optional[Path]) -> Optional[Path]:
    """The home a read-only command (`runs`, `show`) reads, never created: None when there is
    none yet; a ``--home`` that names no directory is an error naming it (a typo made a home)."""
    from benchrun.paths import benchrun_home, home_location

    path, where = home_location(home)
    _use_home(home)
    if path.exists():
        return benchrun_home()  # a file in the way is benchrun_home's error, naming what named it
    if home is not None:
        raise BenchrunError(f"benchrun home {path} (--home) does not exist, so it holds no runs; check --home "
                            "(run and submit create a home, the commands that read one do not)")
    return None


def _console() -> Any:
    from benchrun.console import console

    return console()


def _err_console() -> Any:
    """stderr, where errors go: stdout carries what a command produces (submit's run id alone)."""
    from benchrun.console import console

    return console(stderr=True)


def _esc(value: Any) -> str:
    """``value`` as text rich prints as it is: data (a case label ``[c=4]``, a message with ``[/]``) is
    never read as markup, which dropped it or raised MarkupError."""
    from rich.markup import escape

    return escape(str(value))


# Conditions whose True is the news (the others are news when not True).
TRUE_IS_NEWS = ("RegressionDetected",)


def _worth_saying(c: dict[str, Any]) -> bool:
    """Whether `benchrun run` prints condition ``c``: Complete always, RegressionDetected always (its
    True is a confirmed regression: it was hidden while False was printed), any other when not True."""
    return c.get("type") in ("Complete", *TRUE_IS_NEWS) or c.get("status") != "True"


def _fmt(v: Any) -> str:
    from benchrun.console import number

    if v is None:
        return "-"
    if isinstance(v, float):
        return number(v)
    return str(v)


def summary_rows(run_dir: Path, run_id: str) -> list[dict[str, Any]]:
    """Suite × metric rows (median, min, max, n ok, n failed) from the launch records."""
    from benchrun.execute import summarise
    from benchrun.launch.base import LaunchResult

    path = run_dir / "structured" / f"{run_id}_launches.json"
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return []
    try:
        return summarise([LaunchResult(**r) for r in rows])
    except (TypeError, AttributeError) as exc:  # rows of another shape: a damaged or foreign file
        raise BenchrunError(f"{path}: not a list of launch records ({exc}); the run's other files are "
                            "unaffected (benchrun show RUN_ID --json prints its status)") from None


def print_headline(console: Any, run_dir: Path, run_id: str) -> bool:
    """The report's headline (primary metrics per suite, median, interval, change against the
    baseline) as one table; False when the run has no statistics to show yet."""
    from rich.markup import escape
    from rich.table import Table

    from benchrun.report import content as C

    stats_path = run_dir / "structured" / f"{run_id}_trial_statistics.json"
    if not stats_path.is_file():
        return False
    from benchrun.stats.analysis import read_trial_statistics
    from benchrun.stats.load import load_run

    run = load_run(run_dir)
    comparison = None
    comp_path = run_dir / "structured" / f"{run_id}_comparison.json"
    if comp_path.is_file():
        from benchrun.stats.reading import read_comparison

        try:
            comparison = read_comparison(json.loads(comp_path.read_text(encoding="utf-8")))
        except ValueError:
            comparison = None
    stats = read_trial_statistics(run_dir)
    heads = C.headlines(stats, run.spec, comparison)
    compared = bool(comparison and comparison.get("metrics"))
    said, per_row = C.coverage_said(heads, stats.confidence)
    table = Table(title=f"{run_id}: headline (median over replicates, {said})")
    for col in ("suite", "metric", "case", "median", "unit", "interval", "n") + (("vs baseline",) if compared else ()):
        table.add_column(col, justify="right" if col in ("median", "interval", "n") else "left")
    shown = 0
    for h in heads:
        for r in h.rows:
            interval = "-" if r.low is None else f"[{_fmt(r.low)}, {_fmt(r.high)}]" + ("" if r.informative else " †")
            interval += f" {r.coverage:.1%}" if per_row and r.low is not None and r.coverage is not None else ""
            change = ""
            if r.change:
                from benchrun.stats.reading import POOLED_MARK, format_change, pooled_shift

                change = " ".join(x for x in (format_change(r.change), POOLED_MARK if pooled_shift(r.change) else "",
                                              r.change.get("verdict") or "") if x)
            table.add_row(*[escape(x) for x in (r.suite, r.metric + (" ★" if r.gating else ""), r.case, _fmt(r.median),
                                                r.unit, interval, r.n_text())
                            + ((change,) if compared else ())])
            shown += 1
    console.print(table)
    total = len(stats.summary)
    console.print(f"{shown} headline of {total} metrics (★ gates against the baseline; † interval = the "
                  "replicates' whole range"
                  + ("; vs baseline = the estimated change the verdict is about, + when the value went up, "
                     "better/worse by the metric's direction: Hodges–Lehmann over replicates (§ a request "
                     "percentile judged on pooled requests: the ratio of the two arms' pooled-request p99s, said "
                     "below), not the ratio of the medians, and it can differ from that even in sign when "
                     "replicates cluster" if compared else "") + "); "
                  f"every metric: `benchrun show {run_id} --all` or the report", markup=False)
    from benchrun.stats.reading import pooled_note
    from benchrun.stats.validity import run_notes

    from benchrun.report.content import compared_notes

    for note in [*compared_notes(heads), *(pooled_note(r.change or {}) for h in heads
                                                                         for r in h.rows), *run_notes(run_dir)]:
        if note:
            console.print(note, markup=False, highlight=False)
    return True


def print_summary(console: Any, run_dir: Path, run_id: str) -> None:
    """Every suite × case × metric: median, min, max, ok and failed replicates."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"{run_id}: every metric (over ok replicates)")
    for col in ("suite", "case", "metric", "unit", "median", "min", "max", "ok", "failed"):
        table.add_column(col, justify="right" if col in ("median", "min", "max", "ok", "failed") else "left")
    for r in summary_rows(run_dir, run_id):
        table.add_row(*[escape(str(x)) for x in (r["suite"], r["case"], r["metric"], r["unit"], _fmt(r["median"]),
                                                 _fmt(r["min"]), _fmt(r["max"]), r["n_ok"], r["n_failed"])])
    console.print(table)


def _print_spec_errors(console: Any, exc: Exception) -> None:
    errors = getattr(exc, "errors", None)
    if not errors:
        console.print(f"[red]error:[/] {_esc(exc)}")
        return
    console.print(f"[red]rejected:[/] {len(errors)} validation error(s)")
    for e in errors:
        loc = f"{getattr(e, 'file', '')}:{getattr(e, 'line', '') or '?'}"
        console.print(f"  {loc}: {e.path}: {e.message}", markup=False)


def reap(console: Any, instance: Any) -> None:
    """At CLI start: fail the runs whose process died (they never hold the queue)."""
    from benchrun.liveness import reap_dead_runs
    from benchrun.paths import benchrun_home

    from benchrun.runctl import expire_pending

    for run_id, reason in reap_dead_runs(benchrun_home(), instance) + expire_pending(benchrun_home(), instance):
        console.print(f"[yellow]marked {run_id or 'a run'} Failed:[/] ", end="")
        console.print(reason, markup=False)


@contextlib.contextmanager
def _env_default(name: str, value: str) -> Iterator[None]:
    """``os.environ.setdefault(name, value)`` for the duration of the block."""
    had = name in os.environ
    os.environ.setdefault(name, value)
    try:
        yield
    finally:
        if not had:
            os.environ.pop(name, None)


def run(spec: Path = typer.Argument(..., help="BenchmarkRun YAML"), home: Optional[Path] = HomeOpt,
        no_wait: bool = typer.Option(False, "--no-wait",
                                     help="Refuse (exit 1) instead of waiting while another benchmark runs.")) -> None:
    """Submit a spec and run every layer here, with live progress; exit 0/1/2.

    One benchmark runs at a time (the same turn as Dagster's queue): while another holds it,
    this run waits (or, with --no-wait, refuses) and says which run holds it.
    """
    from benchrun import submit as sub
    from benchrun.lifecycle import exit_code_for

    _use_home(home)
    console = _console()
    from benchrun.runsettings import settings_up_front

    interval_s = settings_up_front()
    try:
        prepared = sub.prepare(spec)
    except BenchrunError as exc:
        _print_spec_errors(_err_console(), exc)
        raise typer.Exit(2) from None
    from benchrun import warmstart

    served = warmstart.served_by
    how = f" in a fork of the warm orchestrator (pid {served['server_pid']})" if served else ""
    console.print(f"run [bold]{prepared.run_id}[/] (spec {prepared.spec_digest[:19]}…) → {prepared.run_dir}{how}")
    raise typer.Exit(exit_code_for(run_here(console, prepared, interval_s, no_wait=no_wait)))


def run_here(console: Any, prepared: Any, interval_s: float, *, no_wait: bool = False) -> dict[str, Any]:
    """Run a prepared (pinned, registered) run in this process as ``benchrun run`` does, and print its
    headline, conditions and report: its liveness claim, the one-benchmark-at-a-time turn (waited for,
    or refused with ``no_wait``), live progress, Ctrl-C as Canceled and a failed step as Failed with
    benchrun's reason; progress lines every ``interval_s`` (:func:`benchrun.runsettings.settings_up_front`, read by the caller
    before anything is made). Returns the final status. ``cadence run --execute`` runs each run through it
    (it took no turn, and measured beside another benchmark: review 2026-12-07)."""
    from benchrun import submit as sub
    from benchrun.liveness import start_heartbeat, stop_heartbeat
    from benchrun.progress_display import ProgressDisplay
    from benchrun.rundir import RunDir
    from benchrun.runlock import TurnRefused, benchmark_turn

    # Dagster flags its Pipes internals as preview on every launch; the terminal is for results.
    warnings.filterwarnings("ignore", message=r".*is currently in (preview|beta)")
    rd = RunDir.for_run(prepared.run_id)
    try:
        start_heartbeat(rd.home, rd.run_id)  # a kill -9 from here on is found and marked Failed
    except OSError as exc:  # a full disk: the run cannot be watched, so it does not start
        reason = f"its liveness claim could not be written ({exc.strerror or exc}); nothing was run"
        _settle_failed(rd, reason)  # (if even that fails, the next reap finds it unclaimed)
        raise BenchrunError(f"run {rd.run_id} failed: {reason}") from None
    try:
        instance = sub.get_instance()
        reap(console, instance)
        from benchrun.report import worker

        # The last run's report figures may still be drawing: a benchmark must not share the machine with
        # them, so the turn waits for them before it asks Dagster for a run in progress (a run its daemon
        # started meanwhile is then seen). This command draws its own after the status is final.
        with benchmark_turn(rd.home, rd.run_id, wait=not no_wait, instance=instance,
                            on_wait=lambda m: console.print(m, markup=False),
                            settle=lambda: worker.wait_for_workers(rd.home)):
            from benchrun.envcapture import open_background_window

            # Our turn: the before-run load sample covers the start-up from here (ours left out).
            open_background_window("before", rd.run_id)
            display = ProgressDisplay(prepared.run_dir / "progress" / "run_progress.json", interval_s=interval_s)
            from benchrun.gcpolicy import freeze_long_lived

            # What start-up imported and built lives to the end: later collections skip it.
            freeze_long_lived()
            # Only this command's run draws figures in the background: the setting is restored
            # afterwards, so a process that goes on (a test, an embedding program) is not switched.
            with display, _env_default(worker.ENV, "background"):
                result = sub.execute(prepared, instance=instance)
        if not result.success and _interrupted(result):
            _settle_canceled(console, rd)
        elif not result.success and _only_the_verdict_check_failed(result):
            pass  # the benchmark's own failure, recorded and reported below; the check only turns the Dagster run red
        elif not result.success:
            reason = _failure_reason(result)
            _settle_failed(rd, reason)
            console.print("[red]orchestration failed:[/] ", end="")
            console.print(reason, markup=False)
    except KeyboardInterrupt:  # Ctrl-C outside a step (waiting for the turn, between steps)
        result = None
        _settle_canceled(console, rd)
    except TurnRefused as exc:
        # --no-wait and another benchmark holds the turn: this run never started, so it leaves
        # nothing behind (no Failed run in `benchrun runs`; the content-addressed spec pin stays).
        stop_heartbeat(rd.home, rd.run_id)
        _discard_unstarted(rd)
        raise TurnRefused(f"{exc} ({prepared.run_dir}, printed above, is removed: nothing ran)") from None
    except BenchrunError as exc:
        # A storage error: the run ends Failed with benchrun's message.
        _settle_failed(rd, str(exc))
        raise
    except Exception as exc:
        from benchrun.storage_errors import describe_storage_error

        message = describe_storage_error(exc)
        if message is None:
            raise
        _settle_failed(rd, message)
        raise BenchrunError(f"run {rd.run_id} failed: {message}") from exc
    finally:
        stop_heartbeat(rd.home, rd.run_id)
    if (result is None or not result.success) and (rd.path / "reports" / f"{rd.run_id}_report.html").is_file():
        from benchrun.report.html import write_report

        try:  # the report must not keep saying Analyzing
            write_report(rd.path)
        except BenchrunError as exc:
            console.print(f"report not rewritten: {exc}", markup=False)
    if not print_headline(console, rd.path, rd.run_id):
        print_summary(console, rd.path, rd.run_id)
    st = rd.read_status()
    for c in st.get("conditions", []):
        if _worth_saying(c):
            console.print(f"  {c['type']}={c['status']} ({c['reason']}) {c['message']}", markup=False)
    report = rd.path / "reports" / f"{rd.run_id}_report.html"
    if report.is_file():
        from benchrun.report import worker

        later = " (its figures follow in a few seconds)" if worker.pending(rd.home, rd.run_id) else ""
        console.print(f"report {report}{later}")
    console.print(f"phase [bold]{_esc(st['phase'])}[/], outcome {_esc(st.get('outcome'))}; run directory {_esc(rd.path)}")
    hint = baseline_hint(rd.path, rd.run_id, st)
    if hint:
        console.print(hint, markup=False)
    return st


def baseline_hint(run_dir: Path, run_id: str, status: dict[str, Any]) -> str | None:
    """How to give later runs a baseline, when this Succeeded run was compared with none
    because the alias its spec names is not set yet (every first run of a spec)."""
    from benchrun.spec.refs import ALIAS_REF
    from benchrun.stats.load import _get, alias_path, load_run

    if status.get("phase") != "Succeeded" or (run_dir / "structured" / f"{run_id}_comparison.json").is_file():
        return None
    try:
        spec = load_run(run_dir).spec
    except BenchrunError:
        return None
    ref = str(_get(spec, "spec", "comparison", "baseline", "artifactRef", default="") or "")
    m = ALIAS_REF.match(ref.strip())
    if not m:
        return None
    if alias_path(run_dir.parent.parent, m.group("alias")).is_file():
        from benchrun.stats.load import resolve_run

        try:  # set, but pointing at a run that is gone: say why nothing was compared
            resolve_run(ref, home=run_dir.parent.parent, paths=False)
        except BenchrunError as exc:
            return f"not compared with a baseline: {exc}"
        return None
    alias = m.group("alias")
    flag = "" if alias == "current" else f" --alias {alias}"
    return (f"no baseline yet: this spec compares with {ref}, which is not set. To make this run the baseline of "
            f"the next ones: benchrun promote {run_id}{flag}")


def finished_launches(run_dir: Path, run_id: str) -> str:
    """``gemm r1-r3 ok, membw r1 failed``: the launches recorded so far, for a canceled run."""
    path = run_dir / "structured" / f"{run_id}_launches.json"
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return "none"
    per: dict[tuple[str, str], list[int]] = {}
    for r in rows if isinstance(rows, list) else []:
        per.setdefault((str(r.get("suite")), str(r.get("status"))), []).append(int(r.get("replicate", 0)))
    from benchrun.execute import replicate_span

    return ", ".join(f"{suite} {replicate_span(reps)} {status}" for (suite, status), reps in per.items()) or "none"


def _settle_canceled(console: Any, rd: Any) -> None:
    """Ctrl-C: phase Canceled, the finished launches named and their results kept."""
    from benchrun.runend import cancel_run

    done = finished_launches(rd.path, rd.run_id)
    reason = f"interrupted; launches finished before it: {done} (their results are kept in {rd.path})"
    try:
        changed = cancel_run(rd.home, rd.run_id, reason)
    except OSError as exc:
        print(f"error: run {rd.run_id}: cannot record phase Canceled ({exc.strerror or exc})", file=sys.stderr)
        changed = True
    phase = rd.read_status().get("phase") if not changed else "Canceled"
    if phase != "Canceled":
        # the interrupt came after the run's final phase (its report, warehouse or signing steps): it keeps
        # that phase, and saying "canceled" was wrong (found in review)
        console.print(f"[yellow]interrupted after the run ended {_esc(phase)}:[/] its later steps did not all run; "
                      f"`benchrun report {rd.run_id}` completes its report and final signature")
        return
    console.print("[yellow]canceled:[/] ", end="")
    console.print(reason, markup=False)


def _discard_unstarted(rd: Any) -> None:
    """Remove the run directory of a run that was refused before anything ran in it."""
    import shutil

    if rd.read_status().get("started_utc") is None:
        shutil.rmtree(rd.path, ignore_errors=True)


def _settle_failed(rd: Any, reason: str) -> None:
    """Mark the run Failed; when even that cannot be written (a full disk), say so and leave it
    to the next CLI start, which finds the process gone and marks it then."""
    import sys

    from benchrun.runend import fail_run

    try:
        fail_run(rd.home, rd.run_id, reason)
    except OSError as exc:
        print(f"error: run {rd.run_id}: cannot record phase Failed ({exc.strerror or exc}); "
              "the next benchrun command marks it Failed", file=sys.stderr)


def submit(spec: Path = typer.Argument(..., help="BenchmarkRun YAML"), home: Optional[Path] = HomeOpt) -> None:
    """Validate, pin and register a run (materialize it from the UI); print its run_id."""
    from benchrun import submit as sub

    _use_home(home)
    try:
        prepared = sub.submit(spec)
    except BenchrunError as exc:
        _print_spec_errors(_err_console(), exc)
        raise typer.Exit(2) from None
    print(prepared.run_id)
    # stdout stays the run id alone (scripts read it); what to do next goes to stderr.
    home_opt = f" --home {home}" if home is not None else ""
    print(f"submitted {prepared.run_id} (phase Pending). Next: materialize its partition in the UI "
          f"(`make ui`, job benchmark_run_job, partition {prepared.run_id}); then "
          f"`benchrun show {prepared.run_id}{home_opt}` for its status and "
          f"`benchrun report {prepared.run_id}` for its report.", file=sys.stderr)


def runs(home: Optional[Path] = HomeOpt, as_json: bool = typer.Option(False, "--json")) -> None:
    """List runs with phase, outcome and times."""
    from rich.table import Table

    from benchrun.rundir import list_runs

    import sys

    from benchrun.liveness import reap_dead_runs
    from benchrun.paths import home_location

    if _read_home(home) is None:  # no home yet: nothing to list, and none is made
        print(f"no runs under {home_location()[0]} (no such home)", file=sys.stderr)
        if as_json:
            print("[]")
        return
    from benchrun.liveness import unclaimed_runs
    from benchrun.runctl import expire_pending

    # a run left unfinished without a claim (its process could not write one: a full disk) is
    # decided only with the Dagster instance, opened only when there is such a run
    instance = None
    if unclaimed_runs():
        from benchrun.submit import get_instance

        instance = get_instance()
    reap_dead_runs(None, instance)  # a run whose process died is shown Failed, not Running for ever
    expire_pending(None, instance)  # and one submitted but never started is not Pending for ever
    rows = []
    for rd in list_runs():
        try:
            st = rd.read_status()
        except BenchrunError as exc:
            # One damaged status.json affects only its own row; the message names the file.
            print(f"warning: {exc}", file=sys.stderr)
            st = {"run_id": rd.run_id, "phase": "Unknown", "outcome": f"status.json unreadable: {rd.status_path}"}
        rows.append({k: st.get(k) for k in ("run_id", "name", "phase", "outcome", "cadence", "created_utc",
                                            "finished_utc", "final_signature")})
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table(title=f"{len(rows)} run(s)")
    for col in ("run_id", "phase", "outcome", "cadence", "created_utc", "finished_utc"):
        table.add_column(col)
    for r in rows:
        if r.get("final_signature"):  # interrupted between its final phase and its final signing
            r = {**r, "phase": f"{r['phase']} (final signature {r['final_signature']}: benchrun report {r['run_id']})"}
        table.add_row(*[_esc(_fmt(r[c])) for c in ("run_id", "phase", "outcome", "cadence", "created_utc", "finished_utc")])
    _console().print(table)


def show(run_id: str = typer.Argument(...), home: Optional[Path] = HomeOpt,
         as_json: bool = typer.Option(False, "--json"),
         every: bool = typer.Option(False, "--all", help="Every metric, not only the headline.")) -> None:
    """A run's status, conditions, headline metrics and paths."""
    from rich.table import Table

    from benchrun.paths import home_location
    from benchrun.rundir import RunDir

    if _read_home(home) is None:
        raise BenchrunError(f"run {run_id}: no such run: there is no benchrun home at {home_location()[0]} yet")
    rd = RunDir.for_run(run_id)
    st = rd.read_status()
    if as_json:
        print(json.dumps({"status": st, "headline": summary_rows(rd.path, run_id)}, indent=2, default=str))
        return
    console = _console()
    console.print(f"[bold]{run_id}[/]  phase {_esc(st.get('phase'))}  outcome {_esc(st.get('outcome'))}")
    if st.get("final_signature"):  # interrupted between its final phase and its final signing
        console.print(f"  final signature {st['final_signature']}: not verified or promoted until "
                      f"`benchrun report {run_id}` signs it", markup=False)
    for key in ("name", "benchmark_class_requested", "benchmark_class_granted", "selected_scheduler_path",
                "spec_digest", "workload_spec_digest", "artifact_manifest_digest", "created_utc",
                "started_utc", "finished_utc", "run_directory", "pinned_spec"):
        console.print(f"  {key}: {_fmt(st.get(key))}", markup=False)
    if st.get("straggler_nodes"):
        console.print(f"  straggler_nodes: {', '.join(map(str, st['straggler_nodes']))} "
                      "(a rank there was a robust outlier in most replicates: see `benchrun playbook`)", markup=False)
    table = Table(title="conditions")
    for col in ("type", "status", "reason", "message", "lastTransitionTime"):
        table.add_column(col)
    for c in st.get("conditions", []):
        table.add_row(*[_esc(c.get(k, "")) for k in ("type", "status", "reason", "message", "lastTransitionTime")])
    console.print(table)
    if every or not print_headline(console, rd.path, run_id):
        print_summary(console, rd.path, run_id)


def cancel(run_id: str = typer.Argument(...), home: Optional[Path] = HomeOpt,
           grace_s: float = typer.Option(30.0, "--grace", help="Seconds the run gets to stop after the interrupt.")) -> None:
    """Cancel a run: its process is interrupted as by Ctrl-C (phase Canceled, what finished is kept)."""
    from benchrun import submit as sub
    from benchrun.errors import check_range
    from benchrun.paths import existing_home
    from benchrun.runctl import cancel_run

    _use_home(home)
    existing_home("cancel", home)  # a mistyped home is refused, never made
    check_range(grace_s, "--grace", 0, 86400)  # nan or inf: the wait for the run to stop never ended
    out = cancel_run(run_id, instance=sub.get_instance(), grace_s=grace_s)
    print(f"{out.run_id}: phase {out.phase} ({out.how})")


def delete(run_id: str = typer.Argument(...), home: Optional[Path] = HomeOpt) -> None:
    """Remove a finished run from the home (never a published baseline; the stored evidence stays)."""
    from benchrun import submit as sub
    from benchrun.paths import existing_home
    from benchrun.runctl import delete_run

    _use_home(home)
    existing_home("delete", home)  # a mistyped home is refused, never made
    out = delete_run(run_id, instance=sub.get_instance())
    print(f"deleted {out.run_id}:")
    for what in out.removed:
        print(f"  removed {what}")
    for what in out.kept:
        print(f"  kept {what}")


def register(app: typer.Typer) -> None:
    app.command("cancel")(cancel)
    app.command("delete")(delete)
    app.command("run")(run)
    app.command("submit")(submit)
    app.command("runs")(runs)
    app.command("show")(show)
