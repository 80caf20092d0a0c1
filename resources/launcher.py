"""The launcher resource: runs a planned layer, each launch inside a Dagster Pipes session.

``kind: local`` (the embedded default) runs suites as subprocesses here; ``kind: kubernetes``
runs each replicate as a ``batch/v1`` Job admitted by Kueue (the run's LocalQueue by its
cadence or granted class, ``queues``; admission fails when it does not exist) through
dagster-k8s, with the suite's Pipes messages and log lines read live from the pod log
(``PipesK8sPodLogsMessageReader``; ``pipes_messages: s3`` uses dagster-aws's
``PipesS3MessageReader`` instead). The settings are ``benchrun.launch.settings.LauncherSettings``
(``LauncherResource.from_env()`` reads them as ``benchrun render`` does).
"""

import os
from contextlib import contextmanager
from typing import Any, Iterator, Mapping, Optional

import dagster as dg

from benchrun.execute import LayerOutcome, run_layer
from benchrun.launch.base import Launcher, LaunchResult
from benchrun.launch.local import LocalLauncher
from benchrun.launch.placement import SLINKY_JOB_PREFIX
from benchrun.launch.settings import DEFAULT_NAMESPACE, DEFAULT_PRIORITY_CLASSES, DEFAULT_QUEUES, LauncherSettings
from benchrun.plan import Invocation, LayerPlan
from benchrun.rundir import RunDir


class LauncherResource(dg.ConfigurableResource):
    """Where suites run, and (for Jobs) how they are queued, placed and sized.

    The fields are ``LauncherSettings``'s (see its module for the environment variables)."""

    kind: str = "local"
    namespace: str = DEFAULT_NAMESPACE
    image: str = "benchrun:latest"
    queue_name: Optional[str] = None
    priority_class: Optional[str] = None
    queues: dict[str, str] = dict(DEFAULT_QUEUES)
    priority_classes: dict[str, str] = dict(DEFAULT_PRIORITY_CLASSES)
    gpus: int = 0
    cpu: Optional[str] = None
    memory: Optional[str] = None
    shm_size: str = "1Gi"
    node_selector: dict[str, str] = {}
    tolerations: list[dict[str, Any]] = []
    service_account: Optional[str] = None
    image_pull_secrets: list[str] = []
    scheduler_name: Optional[str] = None
    slinky_scheduler_name: Optional[str] = None
    slurm_partition: Optional[str] = None
    slurm_constraints: Optional[str] = None
    slurm_reservation: Optional[str] = None
    slurm_qos: Optional[str] = None
    slinky_annotation_prefix: str = SLINKY_JOB_PREFIX
    gpu_resource: str = "nvidia.com/gpu"
    rdma_resource: str = "rdma/ib"
    rdma_per_pod: int = 1
    topology_label: Optional[str] = None
    topology_values: list[str] = []
    run_volume_claim: Optional[str] = None
    run_home: Optional[str] = None
    outputs_uri: Optional[str] = None
    pending_timeout_s: float = 1800.0
    pull_allowance_s: float = 600.0
    eviction_retries: int = 2
    ttl_seconds_after_finished: int = 3600
    poll_s: float = 2.0
    delete_finished: bool = True
    pipes_messages: str = "pod_logs"
    pipes_s3_bucket: Optional[str] = None
    env_secret: Optional[str] = None
    allowed_images: list[str] = []  # image prefixes suites may run (empty: any)
    pod_security: str = "restricted"  # benchrun.launch.podsecurity: restricted | none
    run_as_user: int = 10001

    @classmethod
    def from_env(cls) -> "LauncherResource":
        return cls(**LauncherSettings.from_env().model_dump())

    def settings(self) -> LauncherSettings:
        from benchrun.errors import BenchrunError

        try:
            return LauncherSettings.model_validate({k: getattr(self, k) for k in LauncherSettings.model_fields})
        except Exception as exc:
            raise dg.Failure(f"launcher resource: {exc}") from None
        except BenchrunError as exc:  # pragma: no cover
            raise dg.Failure(str(exc)) from None

    def admission_offer(self, loaded: Any) -> tuple[str, bool, str]:
        """(scheduler path, can honour publication grade, why): what lifecycle.admit asks.

        On Kubernetes the scheduler path is the one the run's ``intent.schedulerPath`` asks for
        (``LauncherSettings.scheduler_path_for``: ``kueue``, or ``kueue+slinky`` through slurm-bridge): a
        run asking for slinky on a launcher that does not declare slurm-bridge fails here, naming the
        field and the setting, instead of running as plain Kueue. The LocalQueue of the class the run
        will be granted (``lifecycle.class_granted``: publication grade only when the launcher can honour
        it and the signature it asks for can be made; else its cadence's) must exist: a run whose queue
        does not fails here, naming it and the fix, instead of waiting pending_timeout_s for an admission
        that never comes. Locally the path is ``local`` (schedulerPath has no meaning on this machine)."""
        from benchrun.lifecycle import LOCAL_SCHEDULER_PATH, class_granted

        suites = [s for layer in loaded.run.spec.layers if layer.enabled for s in layer.suites]
        settings = self.settings()
        ok, why = settings.publication_offer_for(suites)
        if self.kind != "kubernetes":
            return LOCAL_SCHEDULER_PATH, ok, why
        from benchrun.errors import BenchrunError
        from benchrun.launch.queues import check_queue

        intent = loaded.run.spec.intent
        try:
            path = settings.scheduler_path_for(intent.scheduler_path)
            queue, _priority = settings.queue_for(intent.cadence, class_granted(loaded.run.spec, ok))
            check_queue(self._apis()[2], settings.namespace, queue)
        except BenchrunError as exc:
            raise dg.Failure(f"admission: {exc}") from None
        return path, ok, why

    def _scheduler_path(self, settings: LauncherSettings, run_dir: RunDir) -> str:
        """The scheduler path the run's Jobs are placed through: the one its spec asks for on this launcher
        (as admission recorded it); a launcher reconfigured since without slurm-bridge fails the layer,
        naming the setting, instead of placing a slinky run through plain Kueue."""
        from benchrun.errors import BenchrunError

        requested = run_dir.read_status().get("scheduler_path_requested")
        if requested is None:
            from benchrun.lifecycle import load_pinned

            requested = load_pinned(run_dir).run.spec.intent.scheduler_path
        try:
            return settings.scheduler_path_for(requested)
        except BenchrunError as exc:
            raise dg.Failure(f"launcher: {exc}") from None

    def _apis(self) -> tuple[Any, Any, Any, bool]:
        from kubernetes import client, config

        in_cluster = False
        try:
            config.load_incluster_config()
            api = client.ApiClient()
            in_cluster = True
        except config.ConfigException:
            try:
                # KUBECONFIG read now (the client reads it once, at import)
                api = config.new_client_from_config(config_file=os.environ.get("KUBECONFIG") or None)
            except (config.ConfigException, OSError) as exc:
                raise dg.Failure(f"launcher kind 'kubernetes': no cluster credentials ({exc}); "
                                 "run in-cluster or set KUBECONFIG") from None
        return client.BatchV1Api(api), client.CoreV1Api(api), client.CustomObjectsApi(api), in_cluster

    def _owner(self, core: Any, in_cluster: bool) -> Optional[dict[str, Any]]:
        """The Dagster run worker's pod as the Jobs' owner, when we run in one (same namespace)."""
        name = os.environ.get("HOSTNAME")
        if not in_cluster or not name:
            return None
        try:
            pod = core.read_namespaced_pod(name, self.namespace)
        except Exception:
            return None  # the run worker lives in another namespace: TTL, deadline and sweep cover it
        return {"apiVersion": "v1", "kind": "Pod", "name": pod.metadata.name, "uid": pod.metadata.uid,
                "blockOwnerDeletion": False}

    def run_layer(self, context: dg.AssetExecutionContext, plan: LayerPlan, run_dir: RunDir) -> LayerOutcome:
        """Launch the layer; suites' Pipes logs and messages reach the Dagster run log."""
        granted = run_dir.read_status().get("benchmark_class_granted")
        settings = self.settings()

        def on_result(res: LaunchResult) -> None:
            level = context.log.info if res.status != "failed" else context.log.warning
            level(f"{res.layer}/{res.suite} r{res.replicate}: {res.status}"
                  + (f" ({res.reason})" if res.reason else "") + f" in {res.wall_s:.2f}s; log {res.log}")

        if settings.kind == "local":
            @contextmanager
            def local_session(inv: Invocation) -> Iterator[Mapping[str, str]]:
                with dg.open_pipes_session(
                    context=context,
                    context_injector=dg.PipesEnvContextInjector(),
                    message_reader=dg.PipesTempFileMessageReader(),
                    extras={"suite": inv.suite, "replicate": inv.replicate, "layer": inv.layer},
                ) as session:
                    yield session.get_bootstrap_env_vars()

            return run_layer(plan, run_dir, LocalLauncher(), session=local_session, on_result=on_result)
        return self._run_layer_k8s(context, plan, run_dir, settings, granted == "publication_grade", on_result)

    def _k8s_launcher(self, settings: LauncherSettings, run_dir: RunDir, publication: bool) -> Any:
        from benchrun.launch.kubernetes import KubernetesLauncher

        path = self._scheduler_path(settings, run_dir)
        batch, core, custom, in_cluster = self._apis()
        return KubernetesLauncher(
            batch, core, settings.namespace,
            settings.placement(publication, run_home=str(run_dir.home), cadence=run_dir.read_status().get("cadence"),
                               scheduler_path=path),
            settings.poll_s, custom_api=custom, delete_finished=settings.delete_finished,
            owner=self._owner(core, in_cluster), gang=settings.gang_options(),
        )

    def confirmation_launcher(self, candidate: RunDir) -> Launcher:
        """Where a confirmation round's fresh replicates run: where the run's own suites ran, placed
        as the candidate was (its cadence's queue; a dedicated node when it was granted publication
        grade). Before, the round always ran them as subprocesses of the orchestrator's pod: on
        Kubernetes no GPU, no Kueue, and a GPU regression "confirmed" or not on a CPU (found in review)."""
        settings = self.settings()
        if settings.kind == "local":
            return LocalLauncher()
        granted = candidate.read_status().get("benchmark_class_granted")
        return self._k8s_launcher(settings, candidate, granted == "publication_grade")

    def _run_layer_k8s(self, context: dg.AssetExecutionContext, plan: LayerPlan, run_dir: RunDir,
                       settings: LauncherSettings, publication: bool, on_result: Any) -> LayerOutcome:
        from dagster_k8s.pipes import PipesK8sPodLogsMessageReader

        from benchrun.launch.kubernetes import delete_run_jobs

        launcher = self._k8s_launcher(settings, run_dir, publication)
        batch, core, custom = launcher.batch_api, launcher.core_api, launcher.custom_api
        if plan.enabled:
            launcher.preflight(plan.invocations, plan.contended_reruns)  # every Job must build before any starts
            try:  # Jobs left by finished runs of this home (an orchestrator that died) go first
                from benchrun.launch.kubernetes import finished_here, sweep

                swept = sweep(batch, settings.namespace, finished_here(run_dir.home), custom)
                if swept:
                    context.log.info(f"deleted {len(swept)} Job(s) of finished runs: {', '.join(swept)}")
            except Exception as exc:  # the sweep never stops a layer
                context.log.warning(f"sweep of finished runs' Jobs failed: {exc}")

        @contextmanager
        def pipes_session(inv: Invocation) -> Iterator[Mapping[str, str]]:
            if settings.pipes_messages == "s3":
                import boto3
                from dagster_aws.pipes import PipesS3MessageReader

                if not settings.pipes_s3_bucket:
                    raise dg.Failure("launcher pipes_messages 's3' needs pipes_s3_bucket")
                reader: Any = PipesS3MessageReader(
                    bucket=settings.pipes_s3_bucket, interval=1.0,
                    client=boto3.client("s3", endpoint_url=os.environ.get("BENCHRUN_S3_ENDPOINT_URL") or None))
            else:
                reader = PipesK8sPodLogsMessageReader()
            with dg.open_pipes_session(
                context=context,
                context_injector=dg.PipesEnvContextInjector(),
                message_reader=reader,
                extras={"suite": inv.suite, "replicate": inv.replicate, "layer": inv.layer},
            ) as session:
                if isinstance(reader, PipesK8sPodLogsMessageReader):
                    launcher.log_follower = lambda pod: reader.async_consume_pod_logs(
                        context, core, pod, settings.namespace)
                try:
                    yield session.get_bootstrap_env_vars()
                finally:
                    launcher.log_follower = None

        try:
            if plan.enabled and launcher.runs_as_layer(plan.invocations):
                # Publication grade: the whole layer in one Job on one dedicated node.
                from benchrun.execute import Progress, finish_layer

                progress = Progress(run_dir)

                def reported(res: LaunchResult) -> None:
                    progress.finish(res)
                    on_result(res)

                with pipes_session(plan.invocations[0]) as env:
                    results = launcher.launch_layer(plan.invocations, run_dir.path, extra_env=env, on_result=reported,
                                                    contended_reruns=plan.contended_reruns)
                return finish_layer(plan, run_dir, results)
            return run_layer(plan, run_dir, launcher, session=pipes_session, on_result=on_result)
        except BaseException:
            # A cancelled Dagster run (or a crash): no Job of this run keeps its GPUs.
            try:
                delete_run_jobs(batch, settings.namespace, run_dir.run_id, custom)
            except Exception as exc:  # the sweep catches what this could not delete
                context.log.warning(f"could not delete the run's Jobs: {exc}")
            raise
