"""The Kubernetes launcher: each replicate is one ``batch/v1`` Job (a multi-node gang one JobSet),
admitted by Kueue, watched to its end; this module is the protocol, its rooms are beside it.

One Job per replicate (``podspec.job_manifest``), named from the run id, suite and replicate,
created suspended with the Kueue labels; a gang is one JobSet (``jobset.jobset_manifest``); a
publication-grade layer is one Job for the whole layer (``launch_layer``). Where each concern lives:

* ``k8s_objects``: building them (a Job is checked as a ``V1Job`` model before anything is
  created; the pod's environment; the API's coordinates);
* ``k8s_submit``: creating them through dagster-k8s's ``DagsterKubernetesClient``, adopting one of
  the same name (a retried step, a restarted orchestrator) instead of duplicating it;
* ``k8s_wait``: the one wait loop over Job or JobSet, its pods and its Kueue Workload, ending a
  replicate with benchrun's own reasons (preempted, unpullable, never scheduled, timed out, lost);
  while the pod runs, ``log_follower`` (dagster-k8s's ``PipesK8sPodLogsMessageReader``) streams
  its log into the Dagster run;
* ``k8s_failures``: why a replicate failed (OOMKilled, Evicted, exit code and signal, no result);
* ``k8s_status``: times and the scheduler timeline (``raw/<run_id>_<suite>_r<k>_pod.json``);
* ``k8s_collect``: the pod's log copied to ``raw/<run_id>_<suite>_r<k>.log``, the result line
  checked and written to ``structured/``, the declared outputs checked in the run volume;
* ``k8s_cleanup``: the Job deleted with its pods at the end (``delete_finished=False`` keeps it
  for a person), a run's objects deleted on cancellation, ``sweep`` for runs that ended.

**Files.** Through the artifact store (``Placement.outputs_uri``): the pod runs the suite under
``podout``, which uploads what it wrote and its complete log; ``k8s_outputs.fetch_outputs`` reads
them back by key for the pod followed (so a rotated pod log loses nothing). Or a shared volume
(``Placement.run_volume_claim``): the pod mounts its run's directory at the path the orchestrator
uses. A replicate whose declared outputs did not arrive is failed. What an earlier launch of the
replicate left in the run directory is set aside first (``rerun.set_aside_earlier``, as the local
launcher does), except on a run volume where a still-running Job of its name is adopted.

**Timing.** ``wall_s`` is the orchestrator's view (create -> Job finished, including queueing).
``timeout_s`` counts from the container's start (the kubelet enforces it as the pod's
``activeDeadlineSeconds``); waiting to be admitted and scheduled is bounded by
``pending_timeout_s``.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from kubernetes.client.exceptions import ApiException

from benchrun.fsio import atomic_write_json
from benchrun.launch.base import LaunchResult, prepare_outputs
from benchrun.launch.k8s_cleanup import delete_job, delete_jobset, delete_run_jobs, finished_here, sweep
from benchrun.launch.k8s_collect import RESULT_KEY, copy_log, missing_outputs, scan_log, write_note
from benchrun.launch.k8s_failures import failed_node, layer_end, verdict
from benchrun.launch.k8s_objects import job_model, pod_env
from benchrun.launch.k8s_status import epoch, job_timeline, node_keys, pod_timeline
from benchrun.launch.k8s_submit import api_error, create_or_adopt_job, create_or_adopt_jobset, live_job, live_jobset
from benchrun.launch.k8s_wait import LogFollower, wait
from benchrun.launch.k8s_watches import job_watch, jobset_watch
from benchrun.launch.loadjob import launch_load, refuse_in_layer_job
from benchrun.launch.podspec import Placement
from benchrun.launch.rerun import set_aside_earlier
from benchrun.plan import Invocation
from benchrun.suites.result import raw_path

log = logging.getLogger(__name__)

# The launcher's public names: the class, the result line's key, and the run-level cleanup
# the Dagster resource calls (their homes are k8s_collect and k8s_cleanup).
__all__ = ["KubernetesLauncher", "RESULT_KEY", "delete_run_jobs", "finished_here", "sweep"]


class KubernetesLauncher:
    """Runs invocations as Kueue-admitted Jobs through dagster-k8s's ``DagsterKubernetesClient``."""

    def __init__(
        self,
        batch_api: Any,
        core_api: Any,
        namespace: str,
        placement: Placement,
        poll_s: float = 2.0,
        *,
        custom_api: Any = None,
        run_labels: Mapping[str, str] | None = None,
        delete_finished: bool = True,
        owner: Mapping[str, Any] | None = None,
        log_follower: LogFollower | None = None,
        sleep: Callable[[float], None] = time.sleep,
        gang: Any = None,
    ) -> None:
        from dagster_k8s.client import DagsterKubernetesClient

        self.batch_api = batch_api
        self.core_api = core_api
        self.custom_api = custom_api
        self.namespace = namespace
        self.placement = placement
        self.poll_s = poll_s
        self.run_labels = dict(run_labels or {})
        self.pending_timeout_s = placement.pending_timeout_s
        self.delete_finished = delete_finished
        self.owner = dict(owner) if owner else None
        self.log_follower = log_follower
        self.gang = gang  # jobset.GangOptions (the launcher's rdma_resource, ...); None: the defaults
        self._sleep = sleep
        self.client = DagsterKubernetesClient(batch_api, core_api, log, sleep, time.time)
        self.s3_client: Any = None  # boto3's, from the environment, unless given (outputs_uri)
        self.output_notes: dict[tuple[str, int], str] = {}
        self.attempts: list[dict[str, Any]] = []
        # During ``launch``: called when an ended Job (JobSet) of the replicate's name is deleted to
        # be made anew (``k8s_submit.create_or_adopt_job``); None for a layer Job.
        self._before_recreate: Callable[[], Any] | None = None

    def manifest(self, inv: Invocation, extra_env: Mapping[str, str] | None = None) -> dict[str, Any]:
        from benchrun.launch.jobset import GangOptions, launch_manifest

        return launch_manifest(inv, namespace=self.namespace, placement=self.placement, run_labels=self.run_labels,
                               extra_env=pod_env(extra_env), owner=self.owner, options=self.gang or GangOptions())

    def runs_as_layer(self, invocations: Iterable[Invocation]) -> bool:
        """Whether a layer runs as ONE Job (``launch_layer``): publication grade and no gang in it
        (a layer with a gang runs each replicate as its own Job or JobSet)."""
        invs = list(invocations)
        return bool(invs) and self.placement.publication_grade and not any(inv.is_gang for inv in invs)

    def layer_manifest(self, invocations: Iterable[Invocation], extra_env: Mapping[str, str] | None = None,
                       contended_reruns: int = 0) -> dict[str, Any]:
        """The one Job of a publication-grade layer (``podspec.layer_job_manifest``)."""
        from benchrun.launch.podspec import layer_job_manifest

        invs = list(invocations)
        refuse_in_layer_job(invs)
        return layer_job_manifest(invs, namespace=self.namespace, placement=self.placement,
                                  run_labels=self.run_labels, extra_env=pod_env(extra_env), owner=self.owner,
                                  contended_reruns=contended_reruns)

    def manifests(self, invocations: Iterable[Invocation], contended_reruns: int = 0) -> list[dict[str, Any]]:
        """Every object one layer of ``invocations`` creates, in launch order: its layer Job
        (``runs_as_layer``), else a Job or JobSet per replicate."""
        invs = list(invocations)
        if self.runs_as_layer(invs):
            return [self.layer_manifest(invs, contended_reruns=contended_reruns)]
        return [self.manifest(inv) for inv in invs]

    def preflight(self, invocations: Iterable[Invocation], contended_reruns: int = 0) -> None:
        """Build (and model-check) every object of a layer without creating any, as the run will
        (``manifests``): a spec error raises BenchrunError before the first Job of the run starts,
        not halfway through it."""
        for manifest in self.manifests(invocations, contended_reruns):
            if manifest["kind"] == "Job":
                self._model(manifest)

    _model = staticmethod(job_model)

    # -- the protocol -------------------------------------------------------------------
    def launch(
        self, inv: Invocation, run_dir: Path, *, extra_env: Mapping[str, str] | None = None
    ) -> LaunchResult:
        t_request = time.time()
        t0 = time.perf_counter()
        manifest = self.manifest(inv, extra_env)
        # What an earlier launch of this replicate left here is kept aside, not overwritten or taken
        # for this one's, as the local launcher does; found in review: only the result document was
        # removed, and a relaunch that failed had the earlier launch's telemetry curated and sealed as
        # its own, or one whose samples never arrived found the earlier launch's and read ok.
        if self._no_live_pod(manifest):
            set_aside_earlier(run_dir, inv)
        log_path, result_path = prepare_outputs(inv, run_dir)
        # A Job (JobSet) live when asked may have ended by the time it is created or adopted (and
        # ``_create_with_retries`` may ride out the API server for minutes in between): one that has
        # is deleted and made anew, and what its pod left is set aside once it is gone, before the
        # new pod runs; found in review: the new pod ran with the earlier launch's raw files and
        # figures at the replicate's own names. Also for a load Job (``launch_load``).
        self._before_recreate = lambda: set_aside_earlier(run_dir, inv)
        try:
            return self._launch_one(inv, run_dir, manifest, log_path, result_path, t_request, t0)
        finally:
            self._before_recreate = None

    def _launch_one(self, inv: Invocation, run_dir: Path, manifest: dict[str, Any], log_path: Path,
                    result_path: Path, t_request: float, t0: float) -> LaunchResult:
        name = manifest["metadata"]["name"]
        if manifest["kind"] == "JobSet":
            return self._launch_gang(inv, run_dir, manifest, log_path, result_path, t_request, t0)
        if manifest["spec"].get("completionMode") == "Indexed":
            return launch_load(self, inv, run_dir, manifest, log_path, result_path, t_request, t0)
        try:
            job = self._create_or_adopt(name, self._model(manifest))
        except ApiException as exc:
            return self._not_created(inv, f"cannot create Job {name}: {api_error(exc)}", log_path, t_request, t0)
        log.info("%s r%d: Job %s/%s created", inv.suite, inv.replicate, self.namespace, name)
        try:
            job, workload, pods, ended = self._wait_job(inv, name, job, t0)
            pod = pods.get(0)
            log_note = self._copy_log(pod.metadata.name if pod is not None else None, log_path)
            log_note = self._fetch(inv, pod, run_dir, log_path, log_note)
        except BaseException:
            # Cancelled (KeyboardInterrupt, a Dagster run terminated) or a bug: the Job
            # must not outlive the launch that owns it.
            self._delete(name)
            raise
        timeline = job_timeline(job, workload, pod)
        # the replicate's history: every attempt before this one, why it ended, whether it had started
        timeline.update(attempt=len(self.attempts) + 1, attempts=list(self.attempts))
        deleted = self._delete(name) if ended is not None or self.delete_finished else False
        atomic_write_json(raw_path(run_dir, inv.run_id, inv.suite, inv.replicate, "pod", "json"), timeline)
        try:
            from benchrun.launch.podenv import record_pod_environment

            record_pod_environment(run_dir, inv, timeline)
        except Exception as exc:  # the replicate's verdict does not depend on it
            log.warning("%s r%d: could not record the pod's environment: %s", inv.suite, inv.replicate, exc)
        return self._settle(inv, run_dir, pod, timeline, ended, deleted, log_note, log_path, result_path,
                            t_request, t0, missing_hint=self._missing_hint(inv))

    def _no_live_pod(self, manifest: dict[str, Any]) -> bool:
        """Whether no pod of this replicate can be writing into the run directory now, so what an
        earlier launch left there may be set aside. Through the artifact store the pod's files arrive
        only when the launcher fetches them, after it ends (in an emptyDir, never): always. On a run
        volume, a Job (JobSet) of the replicate's name still running is adopted, its pod writing
        there (a restarted orchestrator retrying the step): its files stay where it writes them.
        Asked before the Job is created or adopted, so a pod made by this launch cannot have written
        yet."""
        if self.placement.outputs_uri or not self.placement.run_volume_claim:
            return True
        name = manifest["metadata"]["name"]
        if manifest["kind"] == "JobSet":
            return not live_jobset(self.custom_api, self.core_api, self.namespace, name, manifest)
        return not live_job(self.client, self.batch_api, self.namespace, name, manifest)

    def _missing_hint(self, inv: Invocation) -> str:
        if self.placement.outputs_uri:
            note = self.output_notes.get((inv.suite, inv.replicate))
            return f" ({note})" if note else f" (not in the pod's upload to {self.placement.outputs_uri})"
        return (" (the pods' run directory is an emptyDir: set launcher outputs_uri to bring the files back through "
                "the artifact store, or run_volume_claim to share a volume)"
                if not self.placement.run_volume_claim else " (is the run volume shared with the pods?)")

    def _fetch(self, inv: Invocation, pod: Any, run_dir: Path, log_path: Path, log_note: str | None) -> str | None:
        """With ``outputs_uri``: the pod's files and its complete log from the artifact store (the pod
        log the API serves may have been rotated); the API's copy stays when the pod uploaded nothing."""
        if not self.placement.outputs_uri or pod is None:
            return log_note
        from benchrun.launch.k8s_outputs import fetch_outputs

        note = fetch_outputs(self.placement.outputs_uri, inv.run_id, pod.metadata.uid, run_dir, log_path,
                             client=self.s3_client)
        if note is not None:
            log.warning("%s r%d: %s", inv.suite, inv.replicate, note)
            self.output_notes[(inv.suite, inv.replicate)] = note
            return log_note or note
        self.output_notes.pop((inv.suite, inv.replicate), None)  # a rerun's fetch that came whole
        return None

    def _settle(self, inv: Invocation, run_dir: Path, pod: Any, timeline: dict[str, Any], ended: str | None,
                deleted: bool, log_note: str | None, log_path: Path, result_path: Path, t_request: float,
                t0: float, missing_hint: str = "") -> LaunchResult:
        """The replicate's result from its log, its pod (node 0's for a gang) and the wait's end."""
        doc, doc_error, messages = scan_log(inv, log_path, result_path)
        # Prometheus over the pod's window on its node (BENCHRUN_PROMETHEUS_URL), in the background while
        # more of the layer follows; at every replicate's end, a result or not, as the earlier replicates'
        # collections are written there (and waited for at the layer's last). Never raises.
        from benchrun.telemetry.hook import pod_prometheus

        pod_prometheus(inv, run_dir, timeline)
        status, reason, code = verdict(inv, pod, ended, deleted, doc, doc_error, log_note)
        from benchrun.launch.k8s_outputs import INCOMPLETE

        fetched = self.output_notes.get((inv.suite, inv.replicate)) if self.placement.outputs_uri else None
        if status != "failed" and fetched is not None and fetched.startswith(INCOMPLETE):
            status, reason = "failed", fetched
        if status != "failed" and doc is not None:
            missing = missing_outputs(run_dir, doc)
            if missing:
                status, reason = "failed", ("declared outputs did not arrive in the run directory: "
                                            + ", ".join(missing) + missing_hint)
        if status == "failed":
            log.warning("%s r%d failed: %s (log: %s)", inv.suite, inv.replicate, reason, log_path)
        t_spawned = epoch(timeline.get("container_started_utc")) or t_request
        res = self._result(
            inv, status, reason, code, time.perf_counter() - t0, t_request, t_spawned, log_path,
            result_path if doc is not None else None,
            doc.get("metrics", []) if doc and status == "ok" else [],
            [timeline, *messages],
        )
        return replace(res, **node_keys(timeline))

    # -- publication grade: one Job per layer ------------------------------------------
    def launch_layer(
        self, invocations: Iterable[Invocation], run_dir: Path, *, extra_env: Mapping[str, str] | None = None,
        on_result: Callable[[LaunchResult], None] | None = None, contended_reruns: int = 0,
    ) -> list[LaunchResult]:
        """Run a whole layer in ONE Job (``podspec.layer_job_manifest``, ``benchrun.launch.inpod``):
        one admission, one dedicated node, the replicates back to back in the planned order.
        ``on_result`` sees each replicate as the pod reports it (the results file on the run
        volume); a replicate the pod never reached is failed with the Job's reason; the pod launches
        a contended replicate again up to ``contended_reruns`` times (``benchrun.launch.rerun``)."""
        from benchrun.launch.inpod import results_relpath
        from benchrun.launch.podspec import layer_deadline_s

        invs = list(invocations)
        first = invs[0]
        manifest = self.layer_manifest(invs, extra_env, contended_reruns)
        name = manifest["metadata"]["name"]
        layer_log = run_dir / "raw" / f"{first.run_id}_{first.layer}_layer.log"
        layer_log.parent.mkdir(parents=True, exist_ok=True)
        results_file = run_dir / results_relpath(first.run_id, first.layer)
        results_file.unlink(missing_ok=True)  # a stale file from an earlier attempt is not this one's
        if self.placement.outputs_uri:
            # The pod sets aside only what is in its own (empty) run directory, and its files come back
            # at the replicates' own names: what an earlier materialization of the layer left here, its
            # contended attempts included (they would count as this launch's reruns), goes aside first,
            # as the in-pod launcher does on a run volume (benchrun.launch.inpod). Found in review.
            for inv in invs:
                set_aside_earlier(run_dir, inv, with_contended=True)
        t_request, t0 = time.time(), time.perf_counter()
        reported: list[LaunchResult] = []

        def poll() -> None:
            try:
                rows = json.loads(results_file.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                return
            for row in rows[len(reported):]:
                res = LaunchResult(**row)
                reported.append(res)
                if on_result is not None:
                    on_result(res)

        try:
            if self.placement.outputs_uri:  # no run volume: the pod fetches the pinned plan from the store
                from benchrun.launch.k8s_outputs import put_inputs
                from benchrun.launch.podspec import layer_inputs

                try:
                    put_inputs(self.placement.outputs_uri, first.run_id, run_dir, [layer_inputs(first.run_id)],
                               client=self.s3_client)
                except Exception as exc:  # botocore's errors: the layer cannot start without its plan
                    reason = f"cannot upload the layer's plan to {self.placement.outputs_uri}: {type(exc).__name__}: {exc}"
                    return [self._unreached(inv, run_dir, reason, t_request, t0) for inv in invs]
            job = self._create_or_adopt(name, self._model(manifest))
        except ApiException as exc:
            reason = f"cannot create the layer Job {name}: {api_error(exc)}"
            return [self._unreached(inv, run_dir, reason, t_request, t0) for inv in invs]
        orig_sleep = self._sleep
        self._sleep = lambda s: (poll(), orig_sleep(s))[-1]
        whole = replace(first, timeout_s=layer_deadline_s(invs, contended_reruns))
        try:
            job, workload, pods, ended = self._wait_job(whole, name, job, t0)
            pod = pods.get(0)
            self._fetch(first, pod, run_dir, layer_log,
                        self._copy_log(pod.metadata.name if pod is not None else None, layer_log))
        except BaseException:
            self._delete(name)
            raise
        finally:
            self._sleep = orig_sleep
        timeline = job_timeline(job, workload, pod)
        if ended is not None or self.delete_finished:
            self._delete(name)
        atomic_write_json(run_dir / "raw" / f"{first.run_id}_{first.layer}_layer_pod.json", timeline)
        poll()
        keys = node_keys(timeline)
        done = {(r.suite, r.replicate): replace(r, messages=[timeline, *r.messages], **keys) for r in reported}
        why = layer_end(pod, ended)
        out = []
        for inv in invs:
            res = done.get((inv.suite, inv.replicate))
            if res is None:
                res = replace(self._unreached(inv, run_dir, f"the layer Job ended before this replicate ran ({why})",
                                              t_request, t0), **keys)
                if on_result is not None:
                    on_result(res)
            out.append(res)
        return out

    def _unreached(self, inv: Invocation, run_dir: Path, reason: str, t_request: float, t0: float) -> LaunchResult:
        log_path, _result = prepare_outputs(inv, run_dir)
        return self._not_created(inv, reason, log_path, t_request, t0)

    def _not_created(self, inv: Invocation, reason: str, log_path: Path, t_request: float, t0: float) -> LaunchResult:
        write_note(log_path, reason)
        return self._result(inv, "failed", reason, None, time.perf_counter() - t0, t_request, t_request,
                            log_path, None, [], [])

    # -- multi-node gangs: one JobSet ---------------------------------------------------
    def _launch_gang(self, inv: Invocation, run_dir: Path, manifest: dict[str, Any], log_path: Path,
                     result_path: Path, t_request: float, t0: float) -> LaunchResult:
        """A gang replicate as one JobSet (benchrun.launch.jobset): every node's log copied to
        its own file, node 0's result read, the first failing node named in the reason."""
        name = manifest["metadata"]["name"]
        try:
            create_or_adopt_jobset(self.custom_api, self.core_api, self.namespace, name, manifest,
                                   before_recreate=self._before_recreate)
        except ApiException as exc:
            return self._not_created(inv, f"cannot create JobSet {name}: {api_error(exc)}", log_path, t_request, t0)
        watch = jobset_watch(self.core_api, self.custom_api, self.namespace, name, inv.nodes,
                             eviction_retries=self.placement.eviction_retries)
        return self._many_pods(inv, run_dir, watch, None, "nodes", "node_rank", lambda: self._delete_jobset(name),
                               log_path, result_path, t_request, t0)

    _POD_FIELDS = ("pod_name", "pod_uid", "node_name", "phase", "exit_code", "termination_reason")

    def _many_pods(self, inv: Invocation, run_dir: Path, watch: Any, obj: Any, key: str, index: str,
                   delete: Callable[[], bool], log_path: Path, result_path: Path, t_request: float, t0: float,
                   *, extra_fields: tuple[str, ...] = (), word: str = "node") -> LaunchResult:
        """One replicate on several pods (a gang's JobSet, a load Job): the one wait loop, every
        pod's files and log back by its index (pod k's log at ``node_log_relpath(k)``), pod 0's
        result read, the timeline with each pod under ``key``, the first failing pod named."""
        try:
            obj, workload, pods, ended = self._wait(watch, obj, inv.timeout_s, t0)
            notes = {k: self._fetch(inv, pod, run_dir, run_dir / inv.node_log_relpath(k),
                                    self._copy_log(pod.metadata.name, run_dir / inv.node_log_relpath(k)))
                     for k, pod in pods.items()}
            if 0 not in pods:
                notes[0] = self._copy_log(None, log_path)
        except BaseException:
            delete()
            raise
        pod0 = pods.get(0)
        timeline = job_timeline(obj, workload, pod0)
        timeline[key] = [{index: k, **{f: pod_timeline(p).get(f) for f in self._POD_FIELDS + extra_fields}}
                         for k, p in sorted(pods.items())]
        # the attempts Kueue ended before this one (a gang preempted and admitted again), as a Job's
        timeline.update(attempt=len(watch.history) + 1, attempts=list(watch.history))
        deleted = delete() if ended is not None or self.delete_finished else False
        atomic_write_json(raw_path(run_dir, inv.run_id, inv.suite, inv.replicate, "pod", "json"), timeline)
        if ended is None:
            gone = {r: p for r, p in watch.gone.items() if p.metadata.uid not in watch.evicted}  # not Kueue's
            ended = failed_node(inv, pods, deleted, gone=gone)
            if ended is not None and word != "node":
                ended = ended.replace("node ", f"{word} ", 1)
        return self._settle(inv, run_dir, pod0, timeline, ended, deleted, notes.get(0), log_path, result_path,
                            t_request, t0, missing_hint=self._missing_hint(inv))

    # -- steps --------------------------------------------------------------------------
    def _create_or_adopt(self, name: str, body: Any) -> Any:
        return create_or_adopt_job(self.client, self.batch_api, self.namespace, name, body, self.poll_s,
                                   before_recreate=self._before_recreate)

    def _wait_job(self, inv: Invocation, name: str, job: Any, t0: float) -> tuple[Any, Any, dict[int, Any], str | None]:
        watch = job_watch(self.client, self.batch_api, self.custom_api, self.namespace, name,
                          eviction_retries=self.placement.eviction_retries)
        self.attempts = watch.history  # the attempts evicted or preempted before the last (its timeline)
        return self._wait(watch, job, inv.timeout_s, t0)

    def _wait(self, watch: Any, obj: Any, timeout_s: float, t0: float) -> tuple[Any, Any, dict[int, Any], str | None]:
        # self._sleep is looked up at each poll: launch_layer (and a test) replace it.
        return wait(watch, obj, t0, timeout_s=timeout_s, pending_timeout_s=self.pending_timeout_s,
                    poll_s=self.poll_s, sleep=lambda s: self._sleep(s), log_follower=self.log_follower,
                    pull_allowance_s=self.placement.pull_allowance_s)

    def _copy_log(self, pod_name: str | None, log_path: Path) -> str | None:
        return copy_log(self.core_api, self.namespace, pod_name, log_path)

    def _delete(self, name: str) -> bool:
        return delete_job(self.batch_api, self.namespace, name)

    def _delete_jobset(self, name: str) -> bool:
        return delete_jobset(self.custom_api, self.namespace, name)

    def _result(
        self, inv: Invocation, status: str, reason: str | None, code: int | None, wall: float,
        t_request: float, t_spawned: float, log_path: Path, result_path: Path | None,
        metrics: list[dict[str, Any]], messages: list[dict[str, Any]],
    ) -> LaunchResult:
        run_dir = log_path.parent.parent
        return LaunchResult(
            run_id=inv.run_id, layer=inv.layer, suite=inv.suite, replicate=inv.replicate,
            benchmark_case_id=inv.benchmark_case_id, status=status, reason=reason, exit_code=code,
            wall_s=round(wall, 6), t_request=t_request, t_spawned=t_spawned, t_finished=time.time(),
            log=log_path.relative_to(run_dir).as_posix(),
            result=result_path.relative_to(run_dir).as_posix() if result_path else None,
            metrics=list(metrics), messages=list(messages),
        )
