"""The run-level assets: the pinned spec, the three layers in order, the evidence, the status."""


import dagster as dg

from bench_assets import tables
from bench_assets.partitions import benchmark_run_partitions
from benchrun import lifecycle
from benchrun.execute import LayerOutcome
from benchrun.rundir import RunDir
from resources.launcher import LauncherResource
from resources.store import ArtifactStoreResource

GROUP = "benchmark_run"


def _refuse_a_second_request(context: dg.AssetExecutionContext) -> None:
    """Two triggers can request one benchmark run (the canary and spec-commit sensors see the same
    commit, evaluated at once on sensor threads: each found no Dagster run yet). The later request runs
    nothing: it is tagged a duplicate (the failure sensor then leaves the run alone) and fails here,
    before it pulls or admits the run (found in review: both executed one run id against one prefix)."""
    from benchrun.automation.failures import DUPLICATE_TAG, earlier_request

    records = context.instance.get_run_records(filters=dg.RunsFilter(
        job_name=context.run.job_name, tags={"dagster/partition": context.partition_key}))
    runs = [(r.dagster_run.run_id, r.create_timestamp.timestamp(), dict(r.dagster_run.tags)) for r in records]
    first = earlier_request(runs, context.run.run_id)
    if first is not None:
        context.instance.add_run_tags(context.run.run_id, {DUPLICATE_TAG: first})
        raise dg.Failure(f"run {context.partition_key} was requested first by Dagster run {first}: this second "
                         "request (another trigger saw the same spec at once) runs nothing")


@dg.asset(partitions_def=benchmark_run_partitions, group_name=GROUP, kinds={"python", "yaml"})
def pinned_spec(context: dg.AssetExecutionContext, launcher: LauncherResource) -> dg.MaterializeResult:
    """The run's spec, pinned by digest, admitted with the class the launcher can honour."""
    from benchrun.paths import benchrun_home
    from benchrun.sharedstate import pull_run

    _refuse_a_second_request(context)
    # The run worker may be a fresh pod: the run (and the warehouse history) from shared state.
    pull_run(context.partition_key, benchrun_home(), warehouse=True)
    rd = RunDir.for_run(context.partition_key)
    loaded = lifecycle.load_pinned(rd)
    # a run canceled after this Dagster run was made (it was starting) is refused, not run
    record = context.instance.get_run_record_by_id(context.run.run_id)
    created = record.create_timestamp.timestamp() if record is not None else None
    status = lifecycle.admit(rd, loaded, dagster_run_id=context.run.run_id, offer=launcher.admission_offer(loaded),
                             dagster_run_created=created)
    plans = lifecycle.plans_for(rd, loaded)
    rows = [{"layer": p.name, "enabled": p.enabled, "suites": ", ".join(p.suites), "launches": len(p.invocations)}
            for p in plans.values()]
    return dg.MaterializeResult(
        metadata={
            "run_id": rd.run_id,
            "spec_digest": loaded.spec_digest,
            "workload_spec_digest": loaded.workload_spec_digest,
            "benchmark_class_requested": status["benchmark_class_requested"],
            "benchmark_class_granted": status["benchmark_class_granted"],
            "run_directory": tables.path(rd.path),
            "plan": tables.table(rows, ["layer", "enabled", "suites", "launches"]),
        },
        data_version=dg.DataVersion(loaded.spec_digest),
    )


LAYER_CHECK = "layer_succeeded"


def _layer_check(outcome: LayerOutcome) -> dg.AssetCheckResult:
    """The layer's verdict as a check: its materialization stays a success (the replicates, failed
    ones too, are its output), so without one a layer whose every replicate failed showed green."""
    meta = {"status": outcome.status, "replicates_ok": outcome.n_ok, "replicates_failed": outcome.n_failed}
    if outcome.status == "skipped":
        return dg.AssetCheckResult(check_name=LAYER_CHECK, passed=True, metadata=meta,
                                   description=f"skipped: {outcome.skip_reason or 'not run'}")
    return dg.AssetCheckResult(
        check_name=LAYER_CHECK, passed=outcome.status == "succeeded", metadata=meta,
        severity=dg.AssetCheckSeverity.ERROR if outcome.status == "failed" else dg.AssetCheckSeverity.WARN,
        description={"succeeded": "every replicate succeeded",
                     "failed": f"every replicate failed ({outcome.n_failed})"}.get(
            outcome.status, f"{outcome.n_failed} of {len(outcome.results)} replicates failed"),
    )


def _layer_asset(layer: str, upstream: str) -> dg.AssetsDefinition:
    check = dg.AssetCheckSpec(LAYER_CHECK, asset=f"{layer}_layer", description=(
        f"The {layer} layer's replicates succeeded: fails (ERROR) when every replicate failed, warns when "
        "some did; a skipped layer passes."))

    @dg.asset(
        name=f"{layer}_layer",
        partitions_def=benchmark_run_partitions,
        deps=[upstream],
        group_name=GROUP,
        kinds={"python"},
        description=f"The {layer} layer's suites, every replicate, run one after another.",
        check_specs=[check],
    )
    def _asset(context: dg.AssetExecutionContext, launcher: LauncherResource) -> dg.MaterializeResult:
        rd = RunDir.for_run(context.partition_key)
        lifecycle.pull_if_absent(rd)  # a re-execution in a fresh run-worker pod
        lifecycle.resume_attempt(rd, context.run.run_id)  # a re-execution from a failure starts here
        plan = lifecycle.plans_for(rd, lifecycle.load_pinned(rd))[layer]
        outcome = launcher.run_layer(context, plan, rd)
        from benchrun.sharedstate import push_run

        # the layer's files to the shared state now (no-op without one): a worker that dies later
        # leaves them for the re-execution, which before found only the status it had pushed
        push_run(rd.path, rd.home, merge=rd.merge_shared_status)
        checks = [_layer_check(outcome)] if check.key in context.selected_asset_check_keys else []
        if outcome.status == "skipped":
            return dg.MaterializeResult(metadata={"status": "skipped", "reason": outcome.skip_reason or ""},
                                        check_results=checks)
        table = tables.table(outcome.summary_rows(),
                             ["suite", "case", "metric", "unit", "median", "min", "max", "n_ok", "n_failed"],
                             {"median": "median over ok replicates", "n_ok": "ok replicates that measured it"})
        return dg.MaterializeResult(
            metadata={
                "status": outcome.status,
                "replicates_ok": outcome.n_ok,
                "replicates_failed": outcome.n_failed,
                "headline": table,
            },
            check_results=checks,
        )

    return _asset


micro_layer = _layer_asset("micro", "pinned_spec")
component_layer = _layer_asset("component", "micro_layer")
end_to_end_layer = _layer_asset("end_to_end", "component_layer")


@dg.asset(partitions_def=benchmark_run_partitions, deps=[end_to_end_layer], group_name=GROUP,
          kinds={"json", "s3"})
def run_evidence(context: dg.AssetExecutionContext, artifact_store: ArtifactStoreResource) -> dg.MaterializeResult:
    """The run directory hashed into manifest.json and stored write-once (raw evidence)."""
    rd = RunDir.for_run(context.partition_key)
    lifecycle.pull_if_absent(rd)  # a re-execution in a fresh run-worker pod
    lifecycle.resume_attempt(rd, context.run.run_id)  # a re-execution from a failure may start here
    ev = lifecycle.record_evidence(rd, lifecycle.load_pinned(rd), open_store_for=artifact_store.open)
    # the sealed run to the shared state: a step after this one re-executed in a fresh run-worker pod pulls
    # the run as sealed (before, the prefix held it as after its last layer, without manifest.json)
    from benchrun.sharedstate import push_run

    push_run(rd.path, rd.home, merge=rd.merge_shared_status)
    return dg.MaterializeResult(
        metadata={
            "outcome": ev["outcome"],
            "issues": dg.MetadataValue.json(ev["issues"]),
            "file_count": ev["manifest"]["summary"]["file_count"],
            "artifact_manifest_digest": ev["stored"].digest,
            "manifest": tables.path(rd.path / "manifest.json"),
        }
    )


def run_status_asset(extra_deps: list[dg.AssetKey]) -> dg.AssetsDefinition:
    """``run_status`` runs last: after the evidence and whatever analysis is installed."""

    @dg.asset(name="run_status", partitions_def=benchmark_run_partitions, deps=[run_evidence, *extra_deps],
              group_name=GROUP, kinds={"json"})
    def _run_status(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        """The run's final phase and conditions in status.json."""
        from benchrun.warehouse import curate_run

        rd = RunDir.for_run(context.partition_key)
        lifecycle.pull_sealed_if_absent(rd)  # a re-execution in a fresh run-worker pod
        st = lifecycle.finalize(rd)
        if st.get("hot_metrics_ref"):  # pushed while Analyzing: the phase gauge now says the final phase
            from bench_assets.publish_assets import publish_hot_metrics

            try:
                publish_hot_metrics(rd, context.log)
            except Exception as exc:  # noqa: BLE001 - hot metrics never decide a run's phase
                context.log.warning(f"hot metrics not published again with the final phase: {exc}")
            st = rd.read_status()
        report = rd.path / "reports" / f"{rd.run_id}_report.html"
        try:
            if report.is_file():  # written while Analyzing: write it again with the final phase
                from benchrun.report.html import write_report

                write_report(rd.path)
            # The run fact and the run-window telemetry were curated while the run was Analyzing;
            # record its final phase and finish time (before signing: the statement hashes the
            # run's warehouse partitions).
            from benchrun.warehouse.curate import FINAL_STATUS_TABLES

            curate_run(rd.path, rd.home, tables=list(FINAL_STATUS_TABLES))
            lifecycle.sign_publication(rd)  # the signature covers the final report too
            from benchrun.sharedstate import push_run

            # the finished run and its warehouse partitions (when shared)
            push_run(rd.path, rd.home, merge=rd.merge_shared_status)
        except Exception as exc:
            # the phase was set above; a run whose report, curation, signature or push failed is
            # not Succeeded (the CLI's exit code and the failure sensor both read the phase)
            from benchrun.runend import fail_run

            # (its warehouse facts and hot metrics follow: they said Succeeded, an alert on Failed never fired)
            fail_run(rd.home, rd.run_id, f"run_status: publishing the finished run failed: "
                     f"{type(exc).__name__}: {exc}", over_succeeded=True)
            raise
        from benchrun.report import worker

        if report.is_file() and worker.background():  # `benchrun run`: figures after the final status
            pid = worker.start(rd.path, rd.home)
            context.log.info(f"report figures are being drawn by pid {pid}; the report is written again after")
        conds = [{"type": c["type"], "status": c["status"], "reason": c["reason"]} for c in st["conditions"]]
        return dg.MaterializeResult(
            metadata={
                "phase": st["phase"],
                "outcome": st.get("outcome") or "",
                "conditions": tables.table(conds, ["type", "status", "reason"]),
                "status_json": tables.path(rd.status_path),
            }
        )

    return _run_status


@dg.asset_check(asset=dg.AssetKey("run_status"), blocking=True, description=(
    "The run ended Succeeded with every replicate ok (what `benchrun run` exits 0 for). A run whose phase is "
    "not Succeeded fails it with ERROR, and so fails its Dagster run (a blocking check), after every asset "
    "and its evidence were kept; a Succeeded run some of whose replicates failed (outcome partial) warns, "
    "unless every replicate of a layer failed: then nothing that layer measures was measured, and it fails."))
def run_succeeded(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
    rd = RunDir.for_run(context.partition_key)
    lifecycle.pull_sealed_if_absent(rd)  # a check run on its own in a fresh run-worker pod
    return run_succeeded_result(rd.read_status())


def run_succeeded_result(st: dict) -> dg.AssetCheckResult:
    """run_status's phase and outcome as a check: run_status itself materializes whatever the phase
    (it records it), so a Failed benchmark was a green asset in a successful Dagster run."""
    phase, outcome = st.get("phase") or "", st.get("outcome") or ""
    conds = {c.get("type"): c for c in st.get("conditions") or []}
    reason = (st.get("message") or (conds.get("Failed") or {}).get("message")
              or "; ".join(st.get("issues") or []) or (conds.get("Complete") or {}).get("message") or "")
    passed = phase == "Succeeded" and outcome == "succeeded"
    # A layer none of whose replicates succeeded measured nothing (the last layer's failure is only
    # partial to run_outcome, as no later layer builds on it): an ERROR, which fails the Dagster run.
    # Found in review: the canary's gating primaries all live in end_to_end; 5 of 5 failed there read as
    # a green Dagster run, seen by no run-failure alerting.
    dead = sorted(name for name, layer in (st.get("layers") or {}).items()
                  if isinstance(layer, dict) and layer.get("status") == "failed")
    warn = phase == "Succeeded" and not passed and not dead
    said = f"phase {phase or 'unset'}, outcome {outcome or 'unset'}" + (f": {reason}" if reason else "")
    if dead and phase == "Succeeded":
        said += f"; every replicate of {', '.join(dead)} failed: nothing {'they measure' if len(dead) > 1 else 'it measures'} was measured"
    return dg.AssetCheckResult(
        passed=passed,
        severity=dg.AssetCheckSeverity.WARN if warn else dg.AssetCheckSeverity.ERROR,
        description=said,
        metadata={"phase": phase, "outcome": outcome, "reason": reason, "layers_failed": dead},
    )
