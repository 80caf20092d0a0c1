"""The publishing assets of a run: hot metrics to Prometheus and the signed provenance attestation."""

import dagster as dg

from bench_assets.partitions import benchmark_run_partitions
from benchrun import hotmetrics, lifecycle
from benchrun.provenance import sign_run
from benchrun.rundir import RunDir

GROUP = "publish"


def _primary_metrics(spec) -> list[str]:
    out: list[str] = []
    for family in (spec.metrics.training, spec.metrics.inference):
        if family is not None and family.enabled:
            out.extend(family.primary)
    return out


def publish_hot_metrics(rd: RunDir, log) -> tuple:
    """Render the run's hot metrics from its status now, write and push them (a push replaces the
    run's group), and record where and how; the hot_metrics asset, and run_status once the phase is
    final (the phase gauge pushed while Analyzing was never replaced: an alert on Failed never fired)."""
    spec = lifecycle.load_pinned(rd).run.spec
    hot = spec.sinks.hot_metrics
    hm, pub = hotmetrics.publish_run(rd.path, rd.read_status(), hot.cardinality_budget,
                                     primary=_primary_metrics(spec), home=rd.home, retention_days=hot.retention_days)
    rd.update_status(hot_metrics_ref=pub.pushed_to or str(pub.textfile))
    if pub.push_error is not None:  # the Pushgateway's outage is said, never the run's failure
        log.warning(pub.note)
        rd.set_condition("HotMetricsPushed", False, "PushgatewayUnavailable", pub.note)
    elif pub.pushed_to is not None:
        rd.set_condition("HotMetricsPushed", True, "Pushed", pub.note)
    return hm, pub


@dg.asset(partitions_def=benchmark_run_partitions, deps=["run_evidence"], group_name=GROUP,
          kinds={"prometheus"})
def hot_metrics(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    """The run's headline medians as Prometheus gauges, within the spec's cardinality budget."""
    rd = RunDir.for_run(context.partition_key)
    lifecycle.pull_sealed_if_absent(rd)  # a re-execution in a fresh run-worker pod
    hm, pub = publish_hot_metrics(rd, context.log)
    if hm.series_dropped:
        context.log.warning(f"{hm.series_dropped} series over the cardinality budget were not published: "
                            f"{dict(hm.dropped_by_budget)}")
    return dg.MaterializeResult(
        metadata={
            "series": hm.series_count,
            "series_dropped": hm.series_dropped,
            "dropped_by_priority": dg.MetadataValue.json(dict(hm.dropped_by_budget)),
            "max_active_series": hm.max_active_series,
            "series_held_elsewhere": hm.existing_series,
            "labels_removed": ", ".join(hm.labels_removed) or "none",
            "pushed_to": pub.pushed_to or "not pushed",
            "textfile": dg.MetadataValue.path(str(pub.textfile)),
            "note": "; ".join([pub.note, *hm.notes]),
        }
    )


@dg.asset(partitions_def=benchmark_run_partitions, deps=["run_evidence"], group_name=GROUP,
          kinds={"json"})
def provenance_attestation(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    """The run's evidence as a signed in-toto Statement (DSSE), naming the backend that really signed.

    Materialized again over a run that is already signed, it signs again only through
    ``lifecycle.resign_checked`` (the current signature verifies, nothing signed changed, nothing
    added), and fails saying why otherwise: signing whatever the run directory holds now would
    launder an edit."""
    from benchrun.errors import BenchrunError
    from benchrun.provenance import envelope_path

    rd = RunDir.for_run(context.partition_key)
    lifecycle.pull_sealed_if_absent(rd)  # a re-execution in a fresh run-worker pod
    signing = lifecycle.load_pinned(rd).run.spec.provenance.signing
    if envelope_path(rd.path).is_file():
        why, result = lifecycle.resign_checked(rd.path, rd.home)
        if why is not None or result is None:
            raise BenchrunError(f"provenance_attestation: run {rd.run_id} is already signed; "
                                f"{why or 'not signed again: its envelope is gone'}")
    else:
        result = sign_run(rd.path, rd.home, backend_requested=signing.backend,
                          attestation_format=signing.attestation_format)
        ok, reason, message = result.condition()
        rd.set_condition("Signed", ok, reason, message)
    rd.update_status(provenance_ref=str(result.path))
    from benchrun.sharedstate import push_run

    push_run(rd.path, rd.home, merge=rd.merge_shared_status)  # the signed seal, for a step re-executed elsewhere
    return dg.MaterializeResult(
        metadata={
            "keyid": result.keyid,
            "backend_requested": result.backend_requested or "none",
            "backend_used": result.backend_used,
            "satisfied_request": result.satisfied_request,
            "signing_required": bool(signing.required),
            "subjects": result.subjects,
            "envelope": dg.MetadataValue.path(str(result.path)),
        }
    )


publish_assets = [hot_metrics, provenance_attestation]
