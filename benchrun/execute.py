"""Running a planned layer: launch every invocation in order, record launches and progress,
and summarise the replicates. The Dagster layer assets are thin wrappers over this."""

from __future__ import annotations

import json
import logging
import math
import statistics
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, Mapping

from benchrun.launch.base import Launcher, LaunchResult
from benchrun.launch.rerun import launch_with_reruns
from benchrun.plan import Invocation, LayerPlan
from benchrun.rundir import RunDir, utc_now
from benchrun.telemetry import flush_prometheus
from benchrun.fsio import atomic_write_json

log = logging.getLogger(__name__)

# Opens whatever must surround one launch (a Dagster Pipes session) and yields the extra
# environment the child needs; the local CLI path needs nothing.
SessionFactory = Callable[[Invocation], ContextManager[Mapping[str, str]]]


@dataclass
class LayerOutcome:
    """A layer's replicates and what they add up to."""

    layer: str
    status: str  # succeeded | partial | failed | skipped
    results: list[LaunchResult] = field(default_factory=list)
    skip_reason: str | None = None

    @property
    def n_ok(self) -> int:
        return sum(r.status == "ok" for r in self.results)

    @property
    def n_failed(self) -> int:
        """Failed replicates, by :func:`replicate_counts`' rule (an unavailable beside an ok one failed)."""
        return _total(self.results, "failed")

    def summary_rows(self) -> list[dict[str, Any]]:
        """Suite × case × metric: median, min, max over ok replicates; ok/failed counts."""
        return summarise(self.results)

    def to_json(self) -> dict[str, Any]:
        return {
            "layer": self.layer,
            "status": self.status,
            "skip_reason": self.skip_reason,
            "ok": self.n_ok,
            "failed": self.n_failed,  # ok + failed + unavailable = launches (replicate_counts)
            "unavailable": _total(self.results, "unavailable"),
            "launches": len(self.results),
            "failures": failure_reasons(self.results),
        }


def replicate_span(reps: list[int]) -> str:
    """``r1``, ``r1-r3`` or ``r1,r4``: replicate numbers as the CLI names them."""
    reps = sorted(reps)
    if len(reps) == 1:
        return f"r{reps[0]}"
    if reps == list(range(reps[0], reps[-1] + 1)):
        return f"r{reps[0]}-r{reps[-1]}"
    return ",".join(f"r{k}" for k in reps)


FAILURES_SAID = 3  # groups of failed launches a layer's status names (the rest are counted)


def failure_reasons(results: list[LaunchResult]) -> list[str]:
    """Why a layer's launches failed, one line per suite and reason: ``gemm r1-r3: timed out after 1s;
    process group killed``. The counts alone ("0 ok, 3 failed") sent a user with a wrong repoCommand
    or too short a timeout to launches.json and the logs to find out (review 2026-12-07)."""
    groups: dict[tuple[str, str], list[int]] = {}
    for r in results:
        if r.status == "failed":
            why = (str(r.reason or "").strip().splitlines() or [f"exit code {r.exit_code}"])[0]
            groups.setdefault((r.suite, why[:200] + ("..." if len(why) > 200 else "")), []).append(r.replicate)
    said = [f"{suite} {replicate_span(reps)}: {why}" for (suite, why), reps in groups.items()]
    if len(said) > FAILURES_SAID:
        said = [*said[:FAILURES_SAID], f"{len(said) - FAILURES_SAID} more (structured/<run>_launches.json)"]
    return said


def replicate_counts(results: list[LaunchResult]) -> dict[str, dict[str, int]]:
    """suite → its ``ok``, ``failed`` and ``unavailable`` replicates, by the one rule of what failed:
    a replicate unavailable where others of its suite measured (ok) lost the device part-way, and
    counts as failed, as the comparison counts it (benchrun.stats.load.replicate_table); a suite
    unavailable throughout (no GPU here) is no failure, its replicates stay unavailable. The
    headline rows, a layer's status and counts and so the run's outcome all count by it."""
    per_suite: dict[str, dict[str, int]] = {}
    for r in results:
        c = per_suite.setdefault(r.suite, {"ok": 0, "failed": 0, "unavailable": 0})
        c[r.status] = c.get(r.status, 0) + 1
    for c in per_suite.values():
        if c["ok"]:
            c["failed"], c["unavailable"] = c["failed"] + c["unavailable"], 0
    return per_suite


def _total(results: list[LaunchResult], key: str) -> int:
    return sum(c.get(key, 0) for c in replicate_counts(results).values())


def summarise(results: list[LaunchResult]) -> list[dict[str, Any]]:
    """Headline rows (suite, case, metric, unit, median, min, max, n_ok, n_failed) over the ok
    replicates: each replicate's one value first (the median of its per-rank/node/GPU rows,
    :func:`benchrun.stats.perlaunch.launch_value`, as the trial statistics take it), then the
    median, min and max of those — never of the pooled rank values. ``n_ok``: the ok replicates that
    gave this metric a value (a metric only some replicates report — a contended replicate's telemetry —
    read the suite's ok count, 5, beside one replicate's value: review 2026-12-07)."""
    from benchrun.stats.perlaunch import launch_values

    per_suite = replicate_counts(results)
    rows_in: list[tuple[tuple[str, str, str, str], int, float]] = []
    for r in results:
        if r.status != "ok":  # a launch the launcher failed is no replicate of the median
            continue
        for m in r.metrics:
            value = m.get("value")
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                rows_in.append(((r.suite, str(m.get("case") or ""), m["name"], m.get("unit", "")), r.replicate, value))
    rows = []
    for (suite, case, name, unit), per_rep in launch_values(rows_in).items():
        vals = [v for v in per_rep.values() if not math.isnan(v)]
        if not vals:
            continue
        c = per_suite[suite]
        rows.append({"suite": suite, "case": case, "metric": name, "unit": unit,
                     "median": statistics.median(vals), "min": min(vals), "max": max(vals),
                     "n_ok": len(vals), "n_failed": c["failed"]})
    for suite, c in per_suite.items():
        if not any(row["suite"] == suite for row in rows):
            rows.append({"suite": suite, "case": "", "metric": "(no metrics)", "unit": "",
                         "median": None, "min": None, "max": None, "n_ok": c["ok"], "n_failed": c["failed"]})
    return rows


def layer_status(results: list[LaunchResult]) -> str:
    """succeeded (no failure), failed (every replicate failed), else partial; failed as
    :func:`replicate_counts` counts it (an unavailable replicate beside an ok one of its suite)."""
    if not results:
        return "succeeded"
    failed = _total(results, "failed")
    if failed == 0:
        return "succeeded"
    return "failed" if failed == len(results) else "partial"


class Progress:
    """``progress/run_progress.json``: what runs now, what is done, and an ETA.

    State lives in the file so that the per-layer assets (separate steps) share it and a
    person (or `benchrun run`'s live display) can read it at any time.
    """

    def __init__(self, run_dir: RunDir) -> None:
        self.run_dir = run_dir

    def begin_run(self, plans: list[LayerPlan]) -> None:
        total = sum(len(p.invocations) for p in plans)
        planned: dict[str, int] = {}
        for p in plans:
            for inv in p.invocations:
                planned[f"{inv.layer}/{inv.suite}"] = planned.get(f"{inv.layer}/{inv.suite}", 0) + 1
        self.run_dir.write_progress({"total": total, "done": 0, "failed": 0, "started_epoch": time.time(),
                                     "planned": planned, "walls": {}, "current": None,
                                     "layers": {p.name: len(p.invocations) for p in plans}})

    def start(self, inv: Invocation) -> None:
        p = self.run_dir.read_progress()
        p["current"] = {"layer": inv.layer, "suite": inv.suite, "replicate": inv.replicate, "since_epoch": time.time()}
        self._write(p)

    def finish(self, res: LaunchResult) -> None:
        p = self.run_dir.read_progress()
        # keyed by launch: a layer run again (a retry, re-execution from a failure) replaces its launches'
        # entries instead of adding to them (a layer showed 8 of 5 done, and the sealed copy kept it)
        ended = p.setdefault("ended", {})
        ended[f"{res.layer}/{res.suite}/{res.replicate}"] = [res.status, res.wall_s]
        p["done"] = len(ended)
        p["failed"] = sum(status == "failed" for status, _wall in ended.values())
        walls: dict[str, list[float]] = {}
        for key, (_status, wall) in ended.items():
            walls.setdefault(key.rsplit("/", 1)[0], []).append(wall)
        p["walls"] = walls
        p["current"] = None
        self._write(p)

    def _write(self, p: dict[str, Any]) -> None:
        started = p.get("started_epoch", time.time())
        p["elapsed_s"] = round(time.time() - started, 3)
        p["eta_s"] = self.eta(p)
        self.run_dir.write_progress(p)

    @staticmethod
    def eta(p: dict[str, Any]) -> float | None:
        """Seconds left: each remaining replicate at its own suite's mean wall so far (the
        mean over all suites for a suite not yet seen); None before anything finished."""
        walls: dict[str, list[float]] = p.get("walls", {})
        seen = [w for ws in walls.values() for w in ws]
        if not seen:
            return None
        overall = statistics.fmean(seen)
        left = 0.0
        for key, n in p.get("planned", {}).items():
            done = len(walls.get(key, []))
            left += max(n - done, 0) * (statistics.fmean(walls[key]) if walls.get(key) else overall)
        return round(left, 1)


def _launch_record(run_dir: RunDir | Path) -> tuple[Path, list[dict[str, Any]]]:
    """``structured/<run_id>_launches.json`` and its rows ([] when absent or unreadable)."""
    path = (run_dir.file("structured", "launches", "", "json") if isinstance(run_dir, RunDir)
            else Path(run_dir) / "structured" / f"{Path(run_dir).name}_launches.json")
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        rows = []
    return path, [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def record_launches(run_dir: RunDir | Path, layer: str, results: list[LaunchResult]) -> None:
    """Replace this layer's rows in ``structured/<run_id>_launches.json`` (re-runs stay exact);
    ``run_dir`` a run's RunDir or an output directory named by its run id (a confirmation arm)."""
    path, rows = _launch_record(run_dir)
    rows = [r for r in rows if r.get("layer") != layer] + [r.to_json() for r in results]
    atomic_write_json(path, rows)


def run_layer(
    plan: LayerPlan,
    run_dir: RunDir,
    launcher: Launcher,
    *,
    session: SessionFactory | None = None,
    on_result: Callable[[LaunchResult], None] | None = None,
) -> LayerOutcome:
    """Launch a layer's invocations one after another (benchmarks never share the machine
    with themselves), keep going after failures, and record everything."""
    if not plan.enabled:
        outcome = LayerOutcome(plan.name, "skipped", [], plan.skip_reason)
        _record_layer(run_dir, outcome)
        return outcome
    progress = Progress(run_dir)
    results: list[LaunchResult] = []
    try:
        for inv in plan.invocations:
            progress.start(inv)

            def once(attempt: Invocation) -> LaunchResult:
                with (session(attempt) if session else nullcontext({})) as extra_env:
                    return launcher.launch(attempt, run_dir.path, extra_env=extra_env)

            res = launch_with_reruns(once, run_dir.path, inv, plan.contended_reruns)
            results.append(res)
            progress.finish(res)
            if on_result:
                on_result(res)
    except BaseException as exc:
        # Interrupted (Ctrl-C, a canceled Dagster run) or a launcher error: the launches that
        # finished keep their records, so the run's summary shows them and nothing is lost.
        flush_prometheus(exc)
        if results:
            record_launches(run_dir, plan.name, results)
        _set_aside_unrecorded(run_dir, plan, results)
        raise
    flush_prometheus()  # the layer's replicates' Prometheus records, before they are recorded and read
    from benchrun.envcapture import open_background_window

    open_background_window("after", run_dir.run_id)  # the after-run load sample covers the time from here
    record_launches(run_dir, plan.name, results)
    outcome = LayerOutcome(plan.name, layer_status(results), results)
    _record_layer(run_dir, outcome)
    return outcome


def _set_aside_unrecorded(run_dir: RunDir, plan: LayerPlan, results: list[LaunchResult]) -> None:
    """The files of the launch the interruption cut short (its suite may have written an ok result just
    before) set aside as an earlier launch's (:func:`benchrun.launch.rerun.set_aside_earlier`): kept,
    never read as the run's. Its ok document, absent from the launch record, was counted by the report's
    statistics while ``show`` and the record said the launch never finished (review 2026-12-08)."""
    from benchrun.launch.rerun import set_aside_earlier

    if len(results) >= len(plan.invocations):
        return
    inv = plan.invocations[len(results)]  # launched one after another: the one in progress
    if any((r.get("suite"), r.get("replicate")) == (inv.suite, inv.replicate) for r in _launch_record(run_dir)[1]):
        return  # an earlier materialization's launch the record still holds (nothing of this one was recorded)
    try:
        moved = set_aside_earlier(run_dir.path, inv)
    except OSError as exc:  # the interruption's own reason must still reach the caller
        log.warning("%s r%d: the interrupted launch's files could not be set aside (%s)", inv.suite, inv.replicate, exc)
        return
    if moved:
        log.warning("%s r%d: its launch was interrupted before it was recorded; its files are kept as %s, not read "
                    "as the run's", inv.suite, inv.replicate, ", ".join(moved))


def finish_layer(plan: LayerPlan, run_dir: RunDir, results: list[LaunchResult]) -> LayerOutcome:
    """Record a layer whose replicates ran elsewhere in one go (a publication-grade layer Job)."""
    record_launches(run_dir, plan.name, results)
    outcome = LayerOutcome(plan.name, layer_status(results), results)
    _record_layer(run_dir, outcome)
    return outcome


def _record_layer(run_dir: RunDir, outcome: LayerOutcome) -> None:
    layers = run_dir.read_status().get("layers", {})
    layers[outcome.layer] = {**outcome.to_json(), "finished_utc": utc_now()}
    run_dir.update_status(layers=layers)


def run_outcome(layer_states: Mapping[str, Mapping[str, Any]]) -> tuple[str, list[str]]:
    """The run's overall status (succeeded | partial | failed) and the issues behind it.

    failed: every launch failed, or an enabled layer that later enabled layers build on
    failed entirely; partial: some replicate failed; succeeded otherwise.
    """
    order = ("micro", "component", "end_to_end")
    enabled = [n for n in order if layer_states.get(n, {}).get("status") not in (None, "skipped")]
    issues: list[str] = []
    any_failed = False
    fatal = False
    total = sum(int(layer_states[n].get("launches", 0)) for n in enabled)
    failed_total = sum(int(layer_states[n].get("failed", 0)) for n in enabled)
    for i, name in enumerate(enabled):
        st = layer_states[name]
        if int(st.get("failed", 0)):
            any_failed = True
            issues.append(f"{name}: {st['failed']} of {st.get('launches', 0)} replicates failed")
        if st.get("status") == "failed" and i < len(enabled) - 1:
            fatal = True
            issues.append(f"{name}: every replicate failed and later layers build on it")
    if total and failed_total == total:
        fatal = True
    if fatal:
        return "failed", issues
    return ("partial" if any_failed else "succeeded"), issues
