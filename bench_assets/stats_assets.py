"""Statistics assets and checks: trial statistics, baseline comparison, change points, run report."""

import functools
import math
from typing import Any, Callable

import dagster as dg

from bench_assets import tables
from bench_assets.partitions import benchmark_run_partitions
from benchrun import checks
from benchrun.errors import BenchrunError
from benchrun.paths import benchrun_home, validate_run_id
from benchrun.report.content import gating_regressions
from benchrun.stats import analysis, changepoint, lineage
from benchrun.stats.compare import ConfirmHook
from benchrun.stats.load import alias_of, alias_path, delta_pct, load_run, replicate_table, resolve_run
from resources.launcher import LauncherResource

GROUP = "statistics"


class ConfirmRoundResource(dg.ConfigurableResource):
    """Supplies the confirmation round: fresh, interleaved replicates of both arms.

    A suspected gating regression re-runs the suites behind it from both runs' pinned specs
    (``benchrun.confirm``), baseline and candidate alternating, before ``RegressionDetected``
    may turn True. ``enabled: false`` turns the round off; a suspected regression then stays
    ``RegressionDetected=Unknown`` rather than alerting unconfirmed. The round's replicates run on
    the run's own ``launcher`` resource (Jobs on Kubernetes, subprocesses here), as configured for the
    run (run config included), where its layers ran.
    """

    enabled: bool = True

    def hook(self, context: dg.AssetExecutionContext, baseline_run: str, candidate_run: str,
             launcher: LauncherResource) -> ConfirmHook | None:
        if not self.enabled:
            return None
        from benchrun.confirm import confirmation_hook

        import time

        from benchrun.rundir import RunDir

        launches = [0]

        def on_launch(res) -> None:  # noqa: ANN001 - a LaunchResult
            context.log.info(f"confirmation {res.suite} r{res.replicate} ({res.run_id}): {res.status}"
                             + (f" ({res.reason})" if res.reason else ""))
            launches[0] += 1  # `benchrun run`'s progress display shows the round (status.json is not sealed)
            RunDir.for_run(candidate_run).update_status(confirmation_progress={
                "launches": launches[0], "last": f"{res.suite} r{res.replicate} {res.status}",
                "since_epoch": time.time()})

        # the run's configured launcher, not one built again from the environment: a run whose resources
        # say kind kubernetes (run config) ran its layers as Jobs and its round as local subprocesses
        # in the run-worker pod (found in review)
        made = _OnFirstLaunch(lambda: launcher.confirmation_launcher(RunDir.for_run(candidate_run)))
        return confirmation_hook(benchrun_home(), baseline_run, candidate_run, launcher=made, on_launch=on_launch)


class _OnFirstLaunch:
    """The confirmation round's launcher, made when the round first launches: most comparisons suspect
    nothing, and on Kubernetes making one reads the cluster (an API error there failed every comparison)."""

    def __init__(self, make: "Callable[[], Any]") -> None:
        self._make, self._launcher = make, None

    @property
    def launcher(self) -> Any:
        if self._launcher is None:
            self._launcher = self._make()
        return self._launcher

    def launch(self, *args: Any, **kwargs: Any) -> Any:
        return self.launcher.launch(*args, **kwargs)


def _md(rows: list[dict], cols: list[str]) -> str:
    def fmt(v: object) -> str:
        if isinstance(v, float):
            return "–" if math.isnan(v) else f"{v:.4g}"
        return "" if v is None else str(v)

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    return "\n".join(lines + ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows])


def _run_dir(run_id: str):
    """The run's directory, pulled from the shared state first when this home does not hold it: a
    step re-executed from a failure on Kubernetes runs in a fresh run-worker pod, whose home is empty
    (before, only the run's own steps pulled it: a re-executed analysis step found no run; found in review)."""
    from benchrun.lifecycle import pull_sealed_if_absent
    from benchrun.rundir import RunDir

    path = benchrun_home() / "runs" / validate_run_id(run_id)
    pull_sealed_if_absent(RunDir.for_run(run_id))
    return path


@dg.asset(partitions_def=benchmark_run_partitions, deps=[dg.AssetKey("run_evidence")], group_name=GROUP,
          kinds={"python", "json"})
def trial_statistics(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    """Per-metric replicate statistics, MAD outlier flags and intervals of one run."""
    rd = _run_dir(context.partition_key)
    st = analysis.trial_statistics_for_run(rd)
    path = analysis.write_trial_statistics(st, rd)
    head = st.summary.assign(
        metric_id=st.summary["suite"] + "/" + st.summary["metric"] + st.summary["case"].map(lambda c: f"[{c}]" if c else ""),
        interval=[f"[{lo:.4g}, {hi:.4g}] ({cov:.1%})" for lo, hi, cov in
                  zip(st.summary["median_ci_low"], st.summary["median_ci_high"], st.summary["median_ci_coverage"])],
    ) if not st.summary.empty else st.summary
    return dg.MaterializeResult(metadata={
        "headline": tables.table(head.to_dict(orient="records"),
                                 ["metric_id", "unit", "n", "median", "interval", "cv", "n_outliers"]),
        "metrics": len(st.summary), "replicate_rows": len(st.replicates),
        "outliers": int(st.replicates["outlier"].sum()) if len(st.replicates) else 0,
        "confidence_level": st.confidence, "statistics": tables.path(path),
    })


def _stats(run_id: str) -> analysis.TrialStatistics:
    """The run's trial statistics, read once per version of the file: the checks (and the report,
    in the same process) each read and parsed the same JSON."""
    path = _run_dir(run_id) / "structured" / f"{run_id}_trial_statistics.json"
    try:
        st = path.stat()
    except FileNotFoundError:
        return analysis.read_trial_statistics(_run_dir(run_id))  # computed afresh, not cached
    return _stats_cached(str(path.parent.parent), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=4)
def _stats_cached(run_dir: str, mtime_ns: int, size: int) -> analysis.TrialStatistics:
    return analysis.read_trial_statistics(run_dir)


def _enough_replicates(run_id: str) -> dg.AssetCheckResult:
    st = _stats(run_id)
    rd = _run_dir(run_id)
    suites = checks.suite_replicates(replicate_table(rd, include_failed=True))
    short = checks.short_of_replicates(st.summary, suites, checks.primary_metrics(load_run(rd).spec),
                                       st.min_replicates)
    return dg.AssetCheckResult(
        passed=bool(len(st.summary)) and not short, severity=dg.AssetCheckSeverity.ERROR,
        description=checks.describe_short(short, st.min_replicates) if len(st.summary) else "no metric was measured",
        metadata={"min_replicates": st.min_replicates, "metrics": len(st.summary), "suites": len(suites),
                  "short": dg.MetadataValue.md(_md(short, ["what", "suite", "case", "metric", "n", "failed"])),
                  "telemetry_short_not_judged": checks.telemetry_short(st.summary, st.min_replicates)},
    )


def _no_outliers(run_id: str) -> dg.AssetCheckResult:
    st = _stats(run_id)
    primary = checks.primary_metrics(load_run(_run_dir(run_id)).spec)
    out = st.replicates[st.replicates["outlier"]] if len(st.replicates) else st.replicates
    gating = out[checks.gating_rows(out, primary)] if len(out) else out
    unmeasured = checks.unmeasured_primaries(st.summary, primary)  # no replicate to judge: not cleared
    return dg.AssetCheckResult(
        passed=gating.empty and not unmeasured, severity=dg.AssetCheckSeverity.WARN,
        description=f"{len(gating)} outlier replicate(s) in primary metrics, {len(out) - len(gating)} in others"
                    + (f"; primary {', '.join(unmeasured)} has no ok replicate to judge" if unmeasured else ""),
        metadata={"outliers_primary": len(gating), "outliers_other": len(out) - len(gating),
                  "unmeasured_primaries": dg.MetadataValue.json(unmeasured),
                  "mad_degenerate": int(st.summary["mad_degenerate"].sum()) if len(st.summary) else 0,
                  "flagged": tables.table(out.to_dict(orient="records"),
                                          ["suite", "case", "metric", "replicate", "value", "robust_z"])},
    )


def _interval_width_within_budget(run_id: str) -> dg.AssetCheckResult:
    st = _stats(run_id)
    spec = load_run(_run_dir(run_id)).spec
    primary = checks.primary_metrics(spec)
    gating, other = checks.split_by_gating(st.summary, primary)
    wide = checks.interval_widths(gating, lambda m: delta_pct(spec, m))
    wide_other = checks.interval_widths(other, lambda m: delta_pct(spec, m))
    unmeasured = checks.unmeasured_primaries(st.summary, primary)  # no interval: cannot tell a δ change
    cols = ["suite", "case", "metric", "n", "width_pct", "budget_pct"]
    return dg.AssetCheckResult(
        passed=not wide and not unmeasured, severity=dg.AssetCheckSeverity.WARN,
        description=f"{len(wide)} of {len(gating)} primary metrics wider than 2δ ({len(wide_other)} of "
                    f"{len(other)} other metrics)" + (f"; no interval for primary {', '.join(unmeasured)} "
                                                      "(no ok replicate)" if unmeasured else ""),
        metadata={"too_wide": len(wide), "primary_metrics": len(gating), "too_wide_other": len(wide_other),
                  "unmeasured_primaries": dg.MetadataValue.json(unmeasured),
                  "wide": tables.table(wide, cols), "wide_other": tables.table(wide_other, cols)},
    )


def _p99_has_enough_requests(run_id: str) -> dg.AssetCheckResult:
    from benchrun.stats.load import confidence_level
    from benchrun.stats.tails import requests_needed

    spec = load_run(_run_dir(run_id)).spec
    need = requests_needed(0.99, confidence_level(spec))
    points = checks.p99_primary_points(_stats(run_id).tails, checks.primary_metrics(spec), need,
                                       keep=checks.compared_replicates(_run_dir(run_id)))
    if not points:
        return dg.AssetCheckResult(passed=True, severity=dg.AssetCheckSeverity.WARN,
                                   description="not applicable: no primary metric is the p99 of a measured serving "
                                   "point", metadata={"applies": False})
    short = [p for p in points if not p["enough"]]
    said = "; ".join(f"{p['suite']} {p['point']}: {p['pooled_requests']} requests" for p in short[:5])
    return dg.AssetCheckResult(
        passed=not short, severity=dg.AssetCheckSeverity.WARN,
        description=(f"every p99 primary's point has at least {need} requests over the replicates" if not short else
                     f"not gateable in a comparison: {said} (needs {need}); run more requests per point or more "
                     "replicates (`benchrun plan SPEC`)"),
        metadata={"applies": True, "points": len(points), "too_few": len(short), "required": need,
                  "short": tables.table(short[:50], ["suite", "point", "metric", "replicates", "pooled_requests"])},
    )


def _lineage_complete(run_id: str) -> dg.AssetCheckResult:
    st = _stats(run_id)
    gaps = lineage.lineage_gaps(_run_dir(run_id), st.replicates)
    return dg.AssetCheckResult(passed=not gaps, severity=dg.AssetCheckSeverity.ERROR,
                               metadata={"gaps": len(gaps), "first_gaps": dg.MetadataValue.json(gaps[:20])})


# The five checks of trial_statistics run as one step: each a step of its own cost Dagster a step's
# events, context and storage writes (~5 steps of ~0.2 s a run) for a few milliseconds of work each.
TRIAL_STATISTICS_CHECKS = {
    "enough_replicates": _enough_replicates, "no_outliers": _no_outliers,
    "interval_width_within_budget": _interval_width_within_budget,
    "p99_has_enough_requests": _p99_has_enough_requests, "lineage_complete": _lineage_complete,
}


@dg.multi_asset_check(specs=[
    dg.AssetCheckSpec("enough_replicates", asset=trial_statistics, description="Every metric, every suite that ran and "
                     "every declared primary has at least trials.minReplicates ok replicates (a suite that failed "
                     "every replicate, or a primary no ok replicate measured, has none)."),
    dg.AssetCheckSpec("no_outliers", asset=trial_statistics, description="No replicate of a primary (gating) metric is a MAD outlier (|robust z| > 3.5); "
                            "outliers are kept. A primary with no ok replicate is not cleared. Outliers of "
                            "other metrics are counted, not failed."),
    dg.AssetCheckSpec("interval_width_within_budget", asset=trial_statistics, description="Each primary (gating) metric's median interval is no wider than the ±δ no-change "
                            "band (2δ of the median, δ from comparison.deltaPct): this run alone can tell a δ "
                            "change; a primary with no ok replicate has no interval and fails too. Other "
                            "metrics are listed, not failed."),
    dg.AssetCheckSpec("p99_has_enough_requests", asset=trial_statistics, description="Where a primary metric is the p99 of a serving point (p99_latency_ms), each such "
                            "point's successful requests over the replicates reach the count a comparison needs to gate on its p99 "
                            "(368 at 95 %), over the replicates a comparison pools (ok ones, contended ones left out as it leaves them); without "
                            "such a primary the rule does not apply."),
    dg.AssetCheckSpec("lineage_complete", asset=trial_statistics, description="Every published number walks back to its digests and hashed raw files."),
], can_subset=True, name="trial_statistics_checks")
def trial_statistics_checks(context: dg.AssetCheckExecutionContext):  # noqa: ANN201 - yields AssetCheckResult
    """Each selected check's result; one that raises does not keep the others from reporting (the
    step then fails with its error, as its own step did)."""
    failed: list[tuple[str, Exception]] = []
    for key in sorted(context.selected_asset_check_keys, key=lambda k: list(TRIAL_STATISTICS_CHECKS).index(k.name)):
        try:
            result = TRIAL_STATISTICS_CHECKS[key.name](context.partition_key)
        except Exception as exc:  # noqa: BLE001 - re-raised below, after the other checks reported
            context.log.error(f"check {key.name} failed: {type(exc).__name__}: {exc}")
            failed.append((key.name, exc))
            continue
        yield dg.AssetCheckResult(check_name=key.name, asset_key=key.asset_key, passed=result.passed,
                                  severity=result.severity, description=result.description,
                                  metadata=result.metadata)
    if failed:
        raise failed[0][1]


def _pull_baseline(ref: str) -> None:
    """With shared state, a run worker's fresh home holds neither the alias nor the baseline run:
    both are pulled first (a ref that does not parse is left to resolve_run to refuse)."""
    from benchrun.paths import validate_run_id
    from benchrun.sharedstate import pull_baseline
    from benchrun.spec.refs import baseline_ref_problem, fill_site_placeholder

    if baseline_ref_problem(str(ref).strip()):
        return
    alias = alias_of(ref)
    run_id = None
    if alias is None:
        try:
            run_id = validate_run_id(fill_site_placeholder(str(ref).strip()).rsplit("/", 1)[-1])
        except BenchrunError:
            return
    pull_baseline(benchrun_home(), alias, run_id)


@dg.asset(partitions_def=benchmark_run_partitions, deps=[trial_statistics], group_name=GROUP, kinds={"python", "json"})
def baseline_comparison(context: dg.AssetExecutionContext, confirm_round: ConfirmRoundResource,
                        launcher: LauncherResource) -> dg.MaterializeResult:
    """The run against its baseline, behind the one-variable gate; RegressionDetected in status.json."""
    from benchrun.rundir import RunDir

    run_id = context.partition_key
    rd = _run_dir(run_id)
    comparison = (load_run(rd).spec.get("spec") or {}).get("comparison") or {}
    ref = (comparison.get("baseline") or {}).get("artifactRef")
    allow = tuple(str(a) for a in comparison.get("allowDifferences") or ())  # recorded in the comparison
    if ref:
        _pull_baseline(ref)
    try:
        base_dir = resolve_run(ref, paths=False) if ref else None
    except BenchrunError as exc:  # no alias yet, or a missing run: say so, compare nothing
        context.log.warning(f"no baseline: {exc}")
        base_dir = None
        alias = alias_of(ref) if ref else None
        if alias is None or alias_path(_run_dir(run_id).parent.parent, alias).is_file():
            # a baseline was named (a run, or an alias that is set) but is gone: nothing shows this run
            # did not regress, so not "False" (no_gating_regression fails on it); an alias never set is
            # a first run, with nothing to compare yet
            RunDir.for_run(run_id).set_condition("RegressionDetected", "Unknown", "BaselineMissing", str(exc))
            return dg.MaterializeResult(metadata={"compared": False, "baseline_missing": True, "reason": str(exc)})
    if base_dir is None or base_dir.name == run_id:
        return dg.MaterializeResult(metadata={"compared": False, "reason": f"no baseline resolved from {ref!r}"})
    try:
        confirm = confirm_round.hook(context, base_dir.name, run_id, launcher)
        gate, res = analysis.compare_runs(base_dir, rd, confirm=confirm, candidate_in_progress=True,
                                          baseline_alias=alias_of(ref), allow_differences=allow,
                                          allowed_by="comparison.allowDifferences")
    finally:  # a round that ran is over: the progress display stops saying "confirming"
        RunDir.for_run(run_id).drop_status_fields("confirmation_progress")
    path = analysis.write_comparison(gate, res, base_dir.name, rd)
    meta = {"compared": res is not None, "comparable": not gate.not_comparable, "baseline": base_dir.name,
            "gate": gate.message(), "comparison": tables.path(path)}
    cond = res.condition() if res is not None else analysis.gate_condition(gate)  # refused: Unknown, never False
    RunDir.for_run(run_id).set_condition(cond["type"], cond["status"], cond["reason"], cond["message"])
    meta["regression_detected"] = cond["status"]
    if res is not None:
        meta["verdicts"] = dg.MetadataValue.md(_md(res.records(), ["metric", "gating", "ratio", "ci_low", "ci_high",
                                                                   "p_value", "verdict", "confirmation"]))
    return dg.MaterializeResult(metadata=meta)


@dg.asset_check(asset=baseline_comparison, description="No gating (primary) metric regressed, confirmed. A "
                "named baseline that is missing fails it (nothing judged); a first run, whose alias is not set "
                "yet, passes.")
def no_gating_regression(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
    import json

    from benchrun.rundir import RunDir

    run_dir = _run_dir(context.partition_key)  # pulled first: a check run on its own in a fresh pod has no run
    rd = RunDir.for_run(context.partition_key)
    conds = (rd.read_status().get("conditions") or []) if rd.exists() else []
    cond = next((c for c in conds if c.get("type") == "RegressionDetected"), {})
    if cond.get("reason") == "BaselineMissing":  # set by the latest comparison: a comparison file is older
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.ERROR,
                                   description=f"no baseline to compare with: {cond.get('message')}",
                                   metadata={"compared": False, "regression_detected": "Unknown",
                                             "reason": "BaselineMissing"})
    path = run_dir / "structured" / f"{context.partition_key}_comparison.json"
    if not path.is_file():  # no baseline named, or an alias not set yet (a first run)
        return dg.AssetCheckResult(passed=True, metadata={"compared": False})
    doc = json.loads(path.read_text(encoding="utf-8"))
    if doc["gate"].get("comparable") is False:  # fail closed: nothing judged is nothing cleared
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.ERROR,
                                   description=doc["gate"]["message"],
                                   metadata={"compared": False, "comparable": False, "regression_detected": "Unknown",
                                             "refusals": dg.MetadataValue.json(doc["gate"].get("refusals") or [])})
    if not doc["gate"]["passed"]:
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN,
                                   description=doc["gate"]["message"], metadata={"compared": False})
    cond = doc.get("condition") or {}
    confirmed, unconfirmed = gating_regressions(doc.get("metrics", []))
    bad = confirmed + unconfirmed
    return dg.AssetCheckResult(
        passed=cond.get("status") == "False", severity=dg.AssetCheckSeverity.ERROR,
        description=cond.get("message"),
        metadata={"regression_detected": cond.get("status"), "gating_regressions": len(confirmed),
                  "suspected_not_confirmed": len(unconfirmed),
                  "metrics": dg.MetadataValue.md(_md(bad, ["metric", "ratio", "ci_low", "ci_high", "p_adjusted",
                                                           "confirmation"]))},
    )


@dg.asset(deps=[trial_statistics], group_name=GROUP, kinds={"python", "parquet"})
def change_points(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    """Change points in the nightly history, per workload × hardware × metric (change_point_fact):
    a sequential detector, so a longer history reports the same change points plus any later.

    With shared state (Kubernetes: a fresh run-worker pod, its home empty) the history is the runs the
    shared prefix holds, and the fact is pulled from it first (the last pass's: each change announced
    once) and pushed back after, where the next pass and the views of any pod read it."""
    from benchrun.sharedstate import CHANGE_POINTS, pull_paths, push_paths, shared_state

    home = benchrun_home()
    shared = shared_state()
    pull_paths(home, CHANGE_POINTS)
    hist = changepoint.gather_history(home)
    fact = changepoint.change_points(hist, previous=changepoint.read_change_point_fact(home))
    path = changepoint.write_change_point_fact(fact, home)
    push_paths(home, CHANGE_POINTS)
    new = fact[fact["new"].astype(bool)] if len(fact) else fact
    return dg.MaterializeResult(metadata={
        "history_from": shared.uri if shared is not None else str(home),
        "runs": int(hist["run_id"].nunique()) if len(hist) else 0, "change_points": len(fact),
        "new_change_points": len(new),
        "series": int(hist.groupby(changepoint.SERIES).ngroups) if len(hist) else 0,
        "new": dg.MetadataValue.md(_md(new.to_dict(orient="records")[:50], [
            "metric", "case", "run_id", "alarm_run_id", "before_mean", "after_mean", "magnitude_pct", "floor_pct",
            "kind"])),
        # the sequential detector's parameters (each row's `detector` adds its floor)
        "detector": dg.MetadataValue.text(changepoint.DETECTOR.describe(changepoint.DEFAULT_DELTA_PCT)),
        "path": tables.path(path),
        **({"shared_fact": f"{shared.uri}{CHANGE_POINTS}"} if shared is not None else {}),
    })


@dg.asset(partitions_def=benchmark_run_partitions, deps=[baseline_comparison, dg.AssetKey("scenario_playbooks")],
          group_name=GROUP, kinds={"html"})
def run_report(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    """The self-contained HTML report of one run, figures embedded and saved under figures/."""
    from benchrun.report import worker
    from benchrun.report.html import build_report, write_report

    if worker.background():  # `benchrun run`: the text now, the figures once the status is final
        path = write_report(_run_dir(context.partition_key), figures_pending=True)
    else:
        path = build_report(_run_dir(context.partition_key))
    return dg.MaterializeResult(metadata={"report": tables.path(path),
                                          "bytes": path.stat().st_size})


stats_assets = [trial_statistics, baseline_comparison, change_points, run_report]
stats_checks = [trial_statistics_checks, no_gating_regression]
stats_resources = {"confirm_round": ConfirmRoundResource()}
