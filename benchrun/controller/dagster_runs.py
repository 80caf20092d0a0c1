"""Dagster runs for BenchmarkRun objects, through the instance: found by the object's uid and
generation, created queued for the daemon to launch, cancelled when the object is deleted (and
said so only once the run's worker is known to have stopped).

A run is created exactly as the Dagster sensor daemon creates one from a ``RunRequest``
(``instance.create_run`` with the job's snapshot, execution plan and origins from the code
location that ``workspace.yaml`` names, then ``instance.submit_run``), with the run key
``cr:<namespace>/<name>:<uid>:<generation>`` and tags ``benchrun/cr-uid`` and
``benchrun/cr-generation``. Before creating, the instance is asked for a run with those tags:
a retried event, a relist or a second operator replica finds it and never mints another; and
the run id is derived from the uid and generation, so two processes that both found none
insert it once (the storage refuses the second insert, which then takes the first's run).

The job's origin carries the image and container context the run worker starts from, as the
code server's does on the runs the daemon creates: ``dagster code-server start`` takes them from
``$DAGSTER_CURRENT_IMAGE`` (the Helm chart sets it to the code location's image) and
``$DAGSTER_CONTAINER_CONTEXT`` (JSON), and so does this module (deploy/kustomize/base/operator.yaml
sets the image). K8sRunLauncher takes the run worker's image from the origin; without one, and
with no ``job_image`` of its own, the Job would be refused, so such a run is never created.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchrun.controller.resources import TAG_GENERATION, TAG_NAME, TAG_UID, cancel_deleted_run
from benchrun.controller.status import ResourceRef
from benchrun.errors import BenchrunError

log = logging.getLogger(__name__)

ENV_LOCATION = "BENCHRUN_CODE_LOCATION"
# What `dagster code-server start` reads into the origin of the runs it serves (dagster/_cli/code_server.py).
ENV_IMAGE, ENV_CONTAINER_CONTEXT = "DAGSTER_CURRENT_IMAGE", "DAGSTER_CONTAINER_CONTEXT"
RUN_KEY_TAG = "dagster/run_key"
PARTITION_TAG = "dagster/partition"
TRIGGER_TAG, TRIGGER = "benchrun/trigger", "benchmarkrun-operator"  # the runs this module creates


def location_name() -> str:
    """The code location's name in the daemon's workspace, which launches the queued run:
    ``$BENCHRUN_CODE_LOCATION`` (on Kubernetes the Helm chart's user deployment, ``benchrun``),
    else what Dagster names workspace.yaml's entry (its module name)."""
    from benchrun.submit import code_location_target

    return os.environ.get(ENV_LOCATION, "").strip() or code_location_target()[0]


def container_origin() -> tuple[str | None, dict[str, Any] | None]:
    """The image and container context for the origin of the runs this module creates:
    ``$DAGSTER_CURRENT_IMAGE`` and ``$DAGSTER_CONTAINER_CONTEXT`` (a JSON object), as the code
    server reads them; None where unset."""
    image = os.environ.get(ENV_IMAGE, "").strip() or None
    raw = os.environ.get(ENV_CONTAINER_CONTEXT, "").strip()
    if not raw:
        return image, None
    try:
        context = json.loads(raw)
    except ValueError as exc:
        raise BenchrunError(f"{ENV_CONTAINER_CONTEXT} is not JSON: {exc}") from None
    if not isinstance(context, dict):
        raise BenchrunError(f"{ENV_CONTAINER_CONTEXT} must be a JSON object, not {type(context).__name__}")
    return image, context


class DagsterRuns:
    """Find, start and cancel the Dagster runs of BenchmarkRun objects on one instance."""

    def __init__(self, instance: Any, *, target: tuple[str, str] | None = None) -> None:
        self.instance = instance
        self._target = target
        self._remote_job: Any = None
        self._code_location: Any = None
        self._lock = threading.Lock()  # create-if-absent is one step per process
        self._stopped: set[str] = set()  # run ids this process saw stopped (still CANCELING, maybe)
        from dagster._core.run_coordinator import QueuedRunCoordinator

        if not isinstance(instance.run_coordinator, QueuedRunCoordinator):
            raise BenchrunError(
                f"the Dagster instance's run coordinator is {type(instance.run_coordinator).__name__}: the operator "
                "queues runs for the daemon, set run_coordinator to QueuedRunCoordinator in dagster.yaml "
                "(the Helm chart's default)")

    def _job(self) -> tuple[Any, Any]:
        """The code location (loaded in this process once) and its benchmark job."""
        if self._remote_job is None:
            from dagster._core.remote_origin import InProcessCodeLocationOrigin
            from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

            from benchrun.submit import JOB_NAME, code_location_target

            module, attribute = self._target or code_location_target()
            image, context = container_origin()
            self._check_image(image)
            origin = InProcessCodeLocationOrigin(
                LoadableTargetOrigin(executable_path=sys.executable, module_name=module, attribute=attribute),
                location_name=location_name(), container_image=image, container_context=context)
            self._code_location = origin.create_location(self.instance)
            for repo in self._code_location.get_repositories().values():
                if repo.has_job(JOB_NAME):
                    self._remote_job = repo.get_full_job(JOB_NAME)
                    break
            else:
                raise BenchrunError(f"the code location {module}:{attribute} has no job {JOB_NAME}; "
                                    "check workspace.yaml")
        return self._code_location, self._remote_job

    def _check_image(self, image: str | None) -> None:
        """Refuse to create runs that the instance's K8sRunLauncher could start from no image."""
        if image is not None:
            return
        try:
            from dagster_k8s import K8sRunLauncher
        except ImportError:  # no Kubernetes launcher here
            return
        launcher = self.instance.run_launcher
        if isinstance(launcher, K8sRunLauncher) and not launcher.job_image:
            raise BenchrunError(
                f"the instance's run launcher is K8sRunLauncher with no job_image, and {ENV_IMAGE} is not set: "
                "its run workers would have no image; set it to the code location's image (the operator "
                "Deployment in deploy/kustomize/base/operator.yaml does)")

    def find(self, ref: ResourceRef) -> Any | None:
        """The Dagster run already made for this (uid, generation), if any; one this module created
        but never submitted is submitted now (:meth:`submit_created`)."""
        records = self.instance.get_run_records(
            filters=_filter(tags={TAG_UID: ref.uid, TAG_GENERATION: str(ref.generation)}), limit=1)
        return self.submit_created(records[0].dagster_run) if records else None

    def latest_generation(self, uid: str) -> int | None:
        """The latest ``benchrun/cr-generation`` any Dagster run of the BenchmarkRun with ``uid`` was
        started for (None: none readable): the generation that superseded the earlier ones, for a
        process that did not see it start (a restarted operator)."""
        seen = [_generation(r.dagster_run) for r in self.instance.get_run_records(filters=_filter(tags={TAG_UID: uid}))]
        return max((g for g in seen if g is not None), default=None)

    def submit_created(self, run: Any) -> Any:
        """``run``, queued for the daemon if this module created it and it still waits NOT_STARTED:
        ``start`` creates, then submits, and a submit that raised (the storage busy) or a process
        that died between the two left a run nothing else would ever launch, and which
        ``runctl.expire_pending`` counts as live. Runs of the fallback sensor are the daemon's."""
        import dagster as dg

        if run.status != dg.DagsterRunStatus.NOT_STARTED or run.tags.get(TRIGGER_TAG) != TRIGGER:
            return run
        log.info("run %s (%s) was created but never submitted; submitting it", run.run_id, run.tags.get(TAG_NAME))
        return self.instance.submit_run(run.run_id, None)  # type: ignore[arg-type]

    def start(self, ref: ResourceRef, run_id: str, *,
              before_create: Callable[[], None] | None = None) -> tuple[Any, bool]:
        """The run of ``ref`` (partition ``run_id``): the existing one, else a new queued one.
        Returns (run, created).

        The Dagster run id is :func:`dagster_run_id` of the object's uid and generation, so of two
        processes that both found no run (two replicas across a Lease hand-over) only one inserts
        it: the other's insert is refused and it takes that run. ``before_create`` is called
        just before the insert (the operator checks that it still holds the Lease there)."""
        from dagster._core.errors import DagsterRunAlreadyExists

        from benchrun.submit import register_partition

        with self._lock:
            existing = self.find(ref)
            if existing is not None:
                return existing, False
            location, job = self._job()
            register_partition(self.instance, run_id)
            tags = {**(job.run_tags or {}), TRIGGER_TAG: TRIGGER, TAG_UID: ref.uid,
                    TAG_NAME: f"{ref.namespace}/{ref.name}"[:63], TAG_GENERATION: str(ref.generation),
                    RUN_KEY_TAG: ref.run_key, PARTITION_TAG: run_id}
            plan = location.get_execution_plan(job, {}, step_keys_to_execute=None, known_state=None,
                                               instance=self.instance)
            if before_create is not None:
                before_create()
            dagster_id = dagster_run_id(ref)
            try:
                run = self._create(location, job, plan, tags, dagster_id)
            except DagsterRunAlreadyExists:
                log.info("%s/%s generation %s: run %s was created by another process; taking it",
                         ref.namespace, ref.name, ref.generation, dagster_id)
                return self.instance.get_run_by_id(dagster_id), False
            # A queued coordinator only records the run as QUEUED: the daemon launches it.
            run = self.instance.submit_run(run.run_id, None)  # type: ignore[arg-type]
            return run, True

    def _create(self, location: Any, job: Any, plan: Any, tags: dict[str, str], dagster_id: str) -> Any:
        return self.instance.create_run(
            job_name=job.name, run_id=dagster_id, run_config={}, resolved_op_selection=job.resolved_op_selection,
            step_keys_to_execute=None, status=_status("NOT_STARTED"), op_selection=None, root_run_id=None,
            parent_run_id=None, tags=tags, job_snapshot=job.job_snapshot,
            execution_plan_snapshot=plan.execution_plan_snapshot, parent_job_snapshot=job.parent_job_snapshot,
            remote_job_origin=job.get_remote_origin(), job_code_origin=job.get_python_origin(),
            asset_selection=None, asset_check_selection=None,
            asset_graph=location.get_repository(job.repository_handle.repository_name).asset_graph)

    def cancel(self, ref: ResourceRef, reason: str) -> Stopping:
        """Stop every in-flight run of the object (any generation): what stopped and what is still
        waited for. A run this process saw stopped but still CANCELING (its worker reports CANCELED on
        its way down) is not terminated again."""
        return stop_in_flight(self.instance, ref.uid, reason, confirmed=self._stopped)

    def supersede(self, ref: ResourceRef, pending: dict[str, str | None], *, home: Any = None,
                  warn: Callable[[str], Any] | None = None) -> tuple[dict[str, str | None] | None, dict[str, str]]:
        """:func:`stop_superseded` for ``ref``, skipping the runs this process saw stopped."""
        return stop_superseded(self.instance, ref, pending, home=home, warn=warn, confirmed=self._stopped)


@dataclass(frozen=True)
class Stopping:
    """What stopping a BenchmarkRun's in-flight Dagster runs achieved."""

    stopped: tuple[str, ...]  # run ids stopped by this call: cancelled where they waited, or terminated
    waiting: dict[str, str]  # run id -> why it is not known to have stopped (tried again later)
    run_dirs: dict[str, str] = field(default_factory=dict)  # run id -> its run directory, each run acted on


_WAITED = ("QUEUED", "NOT_STARTED")  # never launched: cancelled where they wait
# CANCELING is in flight too: K8sRunLauncher.terminate reports it *before* deleting the Job, and a
# delete that failed (403, API server away, the Job not created yet) leaves the run there.
_LAUNCHED = ("STARTING", "STARTED", "CANCELING")


def stop_in_flight(instance: Any, uid: str, reason: str, *, confirmed: set[str] | None = None,
                   before_generation: int | None = None) -> Stopping:
    """Stop every in-flight Dagster run of the BenchmarkRun with ``uid`` (any generation, any trigger:
    the operator's and the fallback sensor's); with ``before_generation``, only the runs whose
    ``benchrun/cr-generation`` tag is below it (a run without a readable one is left alone).

    A run counts as stopped only when it is known to be: cancelled in the queue, terminated by the
    run coordinator (whose answer is read, not discarded: dagster-k8s's ``K8sRunLauncher.terminate``
    swallows every exception and returns None or False), or found finished or gone afterwards. Any
    other run is returned in ``waiting`` with the reason. ``confirmed`` (run ids already stopped,
    updated here) are skipped."""
    confirmed = set() if confirmed is None else confirmed
    stopped: list[str] = []
    waiting: dict[str, str] = {}
    run_dirs: dict[str, str] = {}
    statuses = [_status(name) for name in (*_WAITED, *_LAUNCHED)]
    for record in instance.get_run_records(filters=_filter(tags={TAG_UID: uid}, statuses=statuses)):
        run = record.dagster_run
        if run.run_id in confirmed or not _earlier(run, before_generation):
            continue
        run_dirs[run.run_id] = run.tags.get(PARTITION_TAG, "")
        if run.status.value in _WAITED:
            instance.report_run_canceling(run, message=reason)
            instance.report_run_canceled(run, message=reason)
            why = None
        else:
            why = _terminate(instance, run)
        if why is None:
            confirmed.add(run.run_id)
            stopped.append(run.run_id)
        else:
            waiting[run.run_id] = why
    return Stopping(tuple(stopped), waiting, run_dirs)


def _earlier(run: Any, bound: int | None) -> bool:
    if bound is None:
        return True
    generation = _generation(run)
    return generation is not None and generation < bound


def _generation(run: Any) -> int | None:
    try:
        return int(run.tags.get(TAG_GENERATION, ""))
    except ValueError:
        return None


def stop_superseded(instance: Any, ref: ResourceRef, pending: dict[str, str | None], *, home: Any = None,
                    warn: Callable[[str], Any] | None = None, confirmed: set[str] | None = None,
                    ) -> tuple[dict[str, str | None] | None, dict[str, str]]:
    """An edit supersedes the object's earlier generations: stop their in-flight runs (those tagged
    below ``ref.generation``; its own run and a later one are never touched) and mark each stopped
    run's directory Canceled (:func:`cancel_deleted_run`: pulled first, a finished run is not).

    ``pending`` is what the previous call left (Dagster run id -> run directory still to mark, None
    once marked). Returns what is left, None when nothing is, and the runs not confirmed stopped with
    why: the caller tries again later, and never holds the new generation's run back for them."""
    reason = (f"superseded by generation {ref.generation} of BenchmarkRun {ref.namespace}/{ref.name} "
              "(its spec was edited)")
    confirmed = set() if confirmed is None else confirmed
    confirmed.update(run_id for run_id, run_dir in pending.items() if run_dir is None)
    stopping = stop_in_flight(instance, ref.uid, reason, confirmed=confirmed, before_generation=ref.generation)
    left: dict[str, str | None] = {**pending, **stopping.run_dirs}
    for run_id, run_dir in sorted(left.items()):
        if run_dir is None or run_id in stopping.waiting:
            continue  # marked already; still running: its directory is marked once it stopped
        try:
            if run_dir:
                cancel_deleted_run(home, run_dir, reason, warn=warn)
            left[run_id] = None
        except BenchrunError as exc:  # the pull failed: tried again
            (warn or log.warning)(f"run {run_dir}: not marked Canceled yet: {exc}")
    unfinished = stopping.waiting or any(run_dir is not None for run_dir in left.values())
    return (left if unfinished else None), stopping.waiting


def _terminate(instance: Any, run: Any) -> str | None:
    """Terminate a launched run through the run coordinator; None when its worker is known to have
    stopped, else why it is not."""
    try:
        answer, error = instance.run_coordinator.cancel_run(run.run_id), ""
    except Exception as exc:  # noqa: BLE001 - a launcher that raises did not stop it: tried again
        answer, error = False, f" ({exc!r})"[:300]
    if answer:
        return None
    fresh = instance.get_run_by_id(run.run_id)
    if fresh is None or fresh.is_finished:  # it ended meanwhile (its worker reported it) or was deleted
        return None
    return (f"{fresh.status.value}: the run launcher did not confirm that it stopped the run worker"
            f" (terminate returned {answer!r}){error}")


def cancel_in_flight(instance: Any, uid: str, reason: str) -> list[str]:
    """Cancel every in-flight Dagster run of the BenchmarkRun with ``uid``; returns the ids of the
    runs acted on, stopped or not (the fallback sensor, which holds no finalizer, logs them)."""
    result = stop_in_flight(instance, uid, reason)
    for run_id, why in result.waiting.items():
        log.warning("run %s of deleted BenchmarkRun %s not confirmed stopped: %s", run_id, uid, why)
    return [*result.stopped, *result.waiting]


RUN_ID_NAMESPACE = uuid.UUID("5b0c2f4e-8a51-4a8e-9a4f-0f3c1b6d2e71")  # benchrun's, for uuid5


def dagster_run_id(ref: ResourceRef) -> str:
    """The one Dagster run id of a BenchmarkRun generation: uuid5 of ``<uid>:<generation>``."""
    return str(uuid.uuid5(RUN_ID_NAMESPACE, f"{ref.uid}:{ref.generation}"))


def _filter(**kwargs: Any) -> Any:
    import dagster as dg

    return dg.RunsFilter(**kwargs)


def _status(name: str) -> Any:
    import dagster as dg

    return getattr(dg.DagsterRunStatus, name)
