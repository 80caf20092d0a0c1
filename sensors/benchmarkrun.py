"""benchmarkrun_resource_sensor: applied BenchmarkRun resources become runs; their status is written back.

The fallback for clusters without the BenchmarkRun operator (``benchrun operator``,
deploy/kustomize/base/operator.yaml), which watches instead of listing, holds a finalizer and
a Lease and writes status with resourceVersion preconditions; never switch both on.
"""

from __future__ import annotations

import datetime as dt

import dagster as dg

from bench_assets.partitions import benchmark_run_partitions
from benchrun.automation.settings import JOB_NAME
from benchrun.automation.ticks import prepare_register
from benchrun.controller import kube
from benchrun.controller.dagster_runs import cancel_in_flight, stop_superseded
from benchrun.controller.resources import ENV_MAX_NEW, MAX_NEW_PER_TICK, Tick, cancel_deleted_run, controller_tick, max_new_per_tick
from benchrun.errors import BenchrunError
from sensors._requests import default_status, has_runs


@dg.sensor(
    name="benchmarkrun_resource_sensor",
    job_name=JOB_NAME,
    minimum_interval_seconds=30,
    # Off until switched on (BENCHRUN_AUTOMATION_ON): on a laptop there is no cluster to watch,
    # and on a cluster the operator is the controller; only a cluster without it switches this on.
    default_status=default_status("benchmarkrun_resource_sensor", on=False),
    description="Fallback for clusters without the BenchmarkRun operator (benchrun operator). "
    "Lists BenchmarkRun resources (BENCHRUN_CR_NAMESPACE, default all namespaces); "
    f"submits each new (uid, generation), at most {MAX_NEW_PER_TICK} a tick ({ENV_MAX_NEW}; the rest wait for the "
    "next), rejects "
    "invalid ones in their status, cancels the run of a deleted one (gone, or with a deletionTimestamp) "
    "and the runs of the earlier generations an edit superseded, "
    "and catches their status up with the runs.",
)
def benchmarkrun_resource_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
    """Run key ``cr:<namespace>/<name>:<uid>:<generation>``; cursor = uid → last generation handled."""
    cap = max_new_per_tick()  # a bad setting fails the tick (a skip would go unseen), the cursor kept
    try:
        api = kube.custom_objects_api()
        namespace = kube.watched_namespace()
        objs = kube.list_benchmarkruns(api, namespace)
    except BenchrunError as exc:
        return dg.SensorResult(skip_reason=str(exc), cursor=context.cursor)
    except Exception as exc:  # noqa: BLE001 - the API server's answer, whatever it is, goes to the tick log
        # a failed tick, not a skipped one (a 403 from RBAC or an API server down read "skipped" on every tick,
        # and no alert fires on skips); the cursor is not moved by a failed tick, so nothing is lost
        raise BenchrunError(f"cannot list BenchmarkRuns: {_short(exc)}") from exc
    tick = controller_tick(objs, context.cursor, prepare_register(None), dt.datetime.now(dt.timezone.utc),
                           namespace=namespace, max_new=cap)
    _write_statuses(context, api, tick)
    _cancel_deleted(context, tick)
    _stop_superseded(context, tick)
    _report_finalizers(context, api, tick)
    fresh = [s for s in tick.submitted if not has_runs(context.instance, s.run_id)]
    for note in tick.notes:
        context.log.info(note)
    if not fresh:
        return dg.SensorResult(skip_reason=_summary(tick), cursor=tick.cursor)
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=s.ref.run_key, partition_key=s.run_id, tags=s.tags()) for s in fresh],
        dynamic_partitions_requests=[benchmark_run_partitions.build_add_request([s.run_id for s in fresh])],
        cursor=tick.cursor,
    )


def _write_statuses(context: dg.SensorEvaluationContext, api: object, tick: Tick) -> None:
    from benchrun.controller.status import write

    writes = [(s.ref, s.status) for s in tick.submitted] + tick.rejected + tick.patches
    for ref, status in writes:
        try:
            if write(api, ref, status):  # only what was written: False is gone, newer or already there
                context.log.info(f"{ref.namespace}/{ref.name} generation {ref.generation}: status {status['phase']}")
        except Exception as exc:  # noqa: BLE001 - retried by the next tick's catch-up
            context.log.warning(f"{ref.namespace}/{ref.name}: status not written: {_short(exc)}")


def _cancel_deleted(context: dg.SensorEvaluationContext, tick: Tick) -> None:
    """As the operator's finalizer does (benchrun.controller.operator): the object's in-flight
    runs cancelled, then its run marked Canceled unless its pulled status says it finished; a
    pull that fails keeps the object in the cursor, and the next tick tries again."""
    for ref, run_id in tick.deleted:
        reason = f"BenchmarkRun {ref.namespace}/{ref.name} was deleted"
        for dagster_run_id in cancel_in_flight(context.instance, ref.uid, reason):
            context.log.info(f"{reason}: cancelled Dagster run {dagster_run_id}")
        if run_id:
            try:
                cancel_deleted_run(None, run_id, reason, warn=context.log.warning)
            except BenchrunError as exc:
                tick.keep_deleted(ref, run_id)
                context.log.warning(f"run {run_id}: {exc}; tried again next tick")


def _stop_superseded(context: dg.SensorEvaluationContext, tick: Tick) -> None:
    """As the operator does: an edit's new generation supersedes the earlier ones, whose in-flight
    runs are stopped and run directories marked Canceled. The new generation's run is requested
    all the same; a stop not confirmed, or a directory not marked, stays in the cursor and is
    tried again next tick, until it is confirmed or the run has ended."""
    for ref, pending in tick.superseding:
        try:
            left, waiting = stop_superseded(context.instance, ref, pending, warn=context.log.warning)
        except Exception as exc:  # noqa: BLE001 - the storage's error: the tick's run requests go on, tried next tick
            context.log.warning(f"{ref.namespace}/{ref.name}: superseded runs not stopped: {_short(exc)}; "
                                "tried again next tick")
            continue
        for dagster_run_id, why in sorted(waiting.items()):
            context.log.warning(f"{ref.namespace}/{ref.name}: superseded Dagster run {dagster_run_id} not "
                                f"confirmed stopped: {why}; tried again next tick")
        tick.superseded(ref, left)


def _report_finalizers(context: dg.SensorEvaluationContext, api: object, tick: Tick) -> None:
    """A deleted object held by the operator's leftover finalizer: this sensor's account may patch
    only status (deploy/kustomize/base/rbac.yaml), so the object says how to remove it by hand."""
    from benchrun.controller.status import note

    cancelled = {ref.uid for ref, _ in tick.deleted}
    for obj, message in tick.finalizer_left:
        meta = obj["metadata"]
        name = f"{meta.get('namespace')}/{meta.get('name')}"
        try:
            if meta.get("uid") in cancelled:  # the cancel just wrote its status: the listed version is stale
                obj = kube.get_benchmarkrun(api, str(meta.get("namespace")), str(meta.get("name"))) or obj
            if note(api, obj, message):  # False: the object already says so, or is gone
                context.log.warning(f"{name}: {message}")
        except Exception as exc:  # noqa: BLE001 - said in the log instead; tried again next tick
            context.log.warning(f"{name}: {message} (status not written: {_short(exc)})")


def _summary(tick: Tick) -> str:
    parts = [f"{len(tick.rejected)} rejected"] if tick.rejected else []
    parts += [f"{len(tick.deleted)} deleted"] if tick.deleted else []
    parts += [f"{len(tick.patches)} status update(s)"] if tick.patches else []
    parts += [f"{tick.waiting} waiting for the next tick"] if tick.waiting else []
    return "no new BenchmarkRun generation" + (f" ({', '.join(parts)})" if parts else "")


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:500]
