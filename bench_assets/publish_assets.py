"""The publishing assets of a run: hot metrics to Prometheus and the signed provenance attestation."""

from collections.abc import Iterable

import dagster as dg

from bench_assets import tables
from bench_assets.partitions import benchmark_run_partitions
from benchrun import hotmetrics, lifecycle
from benchrun.provenance import sign_run
from benchrun.rundir import RunDir

GROUP = "publish"


def publish_hot_metrics(rd: RunDir, log) -> tuple:
    """:func:`benchrun.hotpublish.publish_hot_metrics`, warning in the Dagster log."""
    from benchrun.hotpublish import publish_hot_metrics as publish

    return publish(rd, log.warning)


CARDINALITY_CHECK = dg.AssetCheckSpec(
    "cardinality_within_budget", asset="hot_metrics",
    description="Every series of the run was published within sinks.hotMetrics.cardinalityBudget (warns when some "
                "were dropped, naming how many and the budget), and no label that CONTRACT.md §3 forbids "
                "(request_id, trace_id, prompt_hash) or the spec's dropDimensions name is in the published series "
                "(fails).")


def cardinality_result(hm: hotmetrics.HotMetrics, text: str,
                       drop_dimensions: Iterable[str] = ()) -> dg.AssetCheckResult:
    """The budget's verdict on a run's hot series, and the labels that must never be published, read
    from the exposition text as written (before, a drop was only a log line and a metadata count)."""
    from prometheus_client.parser import text_string_to_metric_families

    # run_id is the push group: render keeps it although dropDimensions lists it
    banned = hotmetrics.FORBIDDEN_LABELS | ({hotmetrics.label_name(d) for d in drop_dimensions} - {"run_id"})
    carrying = [s for fam in text_string_to_metric_families(text) for s in fam.samples if banned & set(s.labels)]
    found = sorted({k for s in carrying for k in s.labels if k in banned})
    allowed = max(0, hm.max_active_series - hm.existing_series)
    budget = (f"maxActiveSeries {hm.max_active_series}, {hm.existing_series} held by other runs: "
              f"{allowed} allowed for this run")
    said = [f"forbidden label(s) {', '.join(found)} in {len(carrying)} published series (CONTRACT.md §3 and "
            "the spec's dropDimensions: never a label)"] if found else []
    if hm.series_dropped:
        said.append(f"{hm.series_dropped} of {hm.series_total} series over the cardinality budget not published "
                    f"({budget}; dropped by priority {dict(hm.dropped_by_budget)})")
    return dg.AssetCheckResult(
        check_name=CARDINALITY_CHECK.name, passed=not said,
        severity=dg.AssetCheckSeverity.ERROR if found else dg.AssetCheckSeverity.WARN,
        description="; ".join(said) or f"{hm.series_count} series within the budget ({budget}); no forbidden label",
        metadata={"series": hm.series_count, "series_dropped": hm.series_dropped,
                  "max_active_series": hm.max_active_series, "series_held_elsewhere": hm.existing_series,
                  "series_allowed": allowed, "forbidden_labels_found": dg.MetadataValue.json(found),
                  "series_with_forbidden_labels": len(carrying)},
    )


@dg.asset(partitions_def=benchmark_run_partitions, deps=["run_evidence"], group_name=GROUP,
          kinds={"prometheus"}, check_specs=[CARDINALITY_CHECK])
def hot_metrics(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    """The run's headline medians as Prometheus gauges, within the spec's cardinality budget."""
    rd = RunDir.for_run(context.partition_key)
    lifecycle.pull_sealed_if_absent(rd)  # a re-execution in a fresh run-worker pod
    hm, pub = publish_hot_metrics(rd, context.log)
    if hm.series_dropped:
        context.log.warning(f"{hm.series_dropped} series over the cardinality budget were not published: "
                            f"{dict(hm.dropped_by_budget)}")
    checks = []
    if CARDINALITY_CHECK.key in context.selected_asset_check_keys:
        drop = lifecycle.load_pinned(rd).run.spec.sinks.hot_metrics.cardinality_budget.drop_dimensions
        checks.append(cardinality_result(hm, hm.text, drop))  # the text the textfile and the push were written from
    return dg.MaterializeResult(
        metadata={
            "series": hm.series_count,
            "series_dropped": hm.series_dropped,
            "dropped_by_priority": dg.MetadataValue.json(dict(hm.dropped_by_budget)),
            "max_active_series": hm.max_active_series,
            "series_held_elsewhere": hm.existing_series,
            "labels_removed": ", ".join(hm.labels_removed) or "none",
            "pushed_to": pub.pushed_to or "not pushed",
            "textfile": tables.path(pub.textfile),
            "note": "; ".join([pub.note, *hm.notes]),
        },
        check_results=checks,
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
            "envelope": tables.path(result.path),
        }
    )


publish_assets = [hot_metrics, provenance_attestation]
