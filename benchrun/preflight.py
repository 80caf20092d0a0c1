"""``benchrun preflight [SPEC]``: whether a run of SPEC could start on the current kube context, each piece ok or missing with its fix.

Against the cluster of ``$KUBECONFIG`` (or the pod's service account) and the launcher
settings (``BENCHRUN_LAUNCHER_*``, as the Dagster definitions read them), it checks: the APIs
(the BenchmarkRun CRD, Kueue's v1beta2 LocalQueues and Workloads, JobSet when the spec has a
multi-node suite) by discovery; the LocalQueue (in the runs' namespace) and WorkloadPriorityClass
the spec's run would use (every lane's, without SPEC); a node with the allocatable
GPUs a pod of the spec asks for (the launcher's ``gpu_resource``, ``nvidia.com/gpu`` by default; as many
such nodes as its largest gang); and,
by ``SubjectAccessReview``, every call the launcher makes as the run workers' account
(``LAUNCHER_ACCESS``, the calls tests/test_rbac_harness.py records). The image (a node pulls
it), the artifact store (``BENCHRUN_SHARED_STATE``: its bucket answers ``HeadBucket``) and how the
suites' files come back (the outputs bucket and the pods' credentials Secret, or a volume) are
reported too; an image is not pulled from here and says ``unchecked``. Exit 0 only when no
check is missing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError
from benchrun.urlsafe import has_credentials, redact, redact_in

RUN_WORKER_ACCOUNT = "benchrun-run"  # deploy/kustomize/base/rbac.yaml
# (verb, API group, resource, subresource) the launcher calls as the run worker, in its namespace
# (the Role benchrun-run-worker grants exactly these; tests keep the two equal).
LAUNCHER_ACCESS: tuple[tuple[str, str, str, str], ...] = (
    ("create", "batch", "jobs", ""), ("get", "batch", "jobs", ""), ("list", "batch", "jobs", ""),
    ("delete", "batch", "jobs", ""), ("get", "batch", "jobs", "status"),
    ("create", "jobset.x-k8s.io", "jobsets", ""), ("get", "jobset.x-k8s.io", "jobsets", ""),
    ("list", "jobset.x-k8s.io", "jobsets", ""), ("delete", "jobset.x-k8s.io", "jobsets", ""),
    ("get", "", "pods", ""), ("list", "", "pods", ""), ("get", "", "pods", "log"), ("list", "", "events", ""),
    ("list", "kueue.x-k8s.io", "workloads", ""), ("get", "kueue.x-k8s.io", "localqueues", ""),
)
CONTROL_NAMESPACE = "benchrun"  # deploy/kustomize/base: the operator, Dagster and the sensor run here
# The other accounts of the deployment and their calls, (verb, group, resource, subresource,
# namespace: None for the runs namespace, "" for cluster-wide, name or ""), as
# tests/test_rbac_harness.py records them: the operator (operator.yaml), Dagster's daemon and
# run launcher (K8sRunLauncher: run workers and their monitoring), the sensor (cancelling a
# deleted BenchmarkRun's run), and the run workers' status write.
OTHER_ACCESS: tuple[tuple[str, str, tuple[tuple[str, str, str, str, str | None, str], ...]], ...] = (
    ("benchrun-operator", "deploy/kustomize/base/operator.yaml (ClusterRole benchrun-operator, Role "
     "benchrun-operator-lease) and rbac.yaml (Role benchrun-run-terminator)", (
        ("list", "benchmarking.aisp.dev", "benchmarkruns", "", "", ""),
        ("watch", "benchmarking.aisp.dev", "benchmarkruns", "", "", ""),
        ("get", "benchmarking.aisp.dev", "benchmarkruns", "", "", ""),
        ("patch", "benchmarking.aisp.dev", "benchmarkruns", "", "", ""),
        ("patch", "benchmarking.aisp.dev", "benchmarkruns", "status", "", ""),
        ("create", "coordination.k8s.io", "leases", "", CONTROL_NAMESPACE, ""),
        ("get", "coordination.k8s.io", "leases", "", CONTROL_NAMESPACE, "benchrun-operator"),
        ("update", "coordination.k8s.io", "leases", "", CONTROL_NAMESPACE, "benchrun-operator"),
        ("delete", "batch", "jobs", "", None, ""), ("delete", "", "pods", "", None, ""))),
    ("benchrun-dagster", "deploy/kustomize/base/rbac.yaml (Role benchrun-run-launcher)", (
        ("create", "batch", "jobs", "", None, ""), ("list", "batch", "jobs", "", None, ""),
        ("delete", "batch", "jobs", "", None, ""), ("get", "batch", "jobs", "status", None, ""),
        ("list", "", "pods", "", None, ""), ("delete", "", "pods", "", None, ""),
        ("get", "", "pods", "log", None, ""), ("list", "", "events", "", None, ""))),
    ("benchrun", "deploy/kustomize/base/rbac.yaml (ClusterRole benchrun-benchmarkrun-status, Role "
     "benchrun-run-terminator)", (
        ("list", "benchmarking.aisp.dev", "benchmarkruns", "", "", ""),
        ("patch", "benchmarking.aisp.dev", "benchmarkruns", "status", "", ""),
        ("delete", "batch", "jobs", "", None, ""), ("list", "", "pods", "", None, ""),
        ("delete", "", "pods", "", None, ""))),
)
APIS = (
    ("benchmarking.aisp.dev", "v1alpha1", "benchmarkruns", "the BenchmarkRun CRD",
     "kubectl apply -k deploy/kustomize/base"),
    ("kueue.x-k8s.io", "v1beta2", "localqueues", "Kueue (v1beta2 LocalQueues)",
     "install Kueue with the v1beta2 API (https://kueue.sigs.k8s.io)"),
    ("kueue.x-k8s.io", "v1beta2", "workloads", "Kueue (v1beta2 Workloads)",
     "install Kueue with the v1beta2 API (https://kueue.sigs.k8s.io)"),
    ("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet (v1alpha2)",
     "install JobSet (https://jobset.sigs.k8s.io) for multi-node suites"),
)


@dataclass
class Check:
    """One line of the report: ok (True), missing (False) or unchecked (None), and the fix."""

    name: str
    ok: bool | None
    detail: str
    fix: str = ""

    def line(self) -> str:
        word = {True: "ok", False: "missing", None: "unchecked"}[self.ok]
        return f"{word:<9} {self.name}: {self.detail}" + (f" -> fix: {self.fix}" if self.ok is False and self.fix else "")


def _api_client() -> Any:
    from kubernetes import config

    try:
        config.load_incluster_config()
        from kubernetes import client

        return client.ApiClient()
    except config.ConfigException:
        try:
            return config.new_client_from_config(config_file=os.environ.get("KUBECONFIG") or None)
        except (config.ConfigException, OSError) as exc:
            raise BenchrunError(f"preflight: no Kubernetes credentials ({exc}); set KUBECONFIG or run in a pod") from None


def _served(api: Any, group: str, version: str) -> set[str]:
    from kubernetes.client.exceptions import ApiException

    try:
        doc = api.call_api(f"/apis/{group}/{version}", "GET", response_type="object",
                           _return_http_data_only=True, auth_settings=["BearerToken"])
    except ApiException as exc:
        if exc.status == 404:
            return set()
        raise
    return {r.get("name") for r in (doc or {}).get("resources") or []}


def _spec_needs(spec: Path, gpu_resource: str) -> tuple[Any, int, int, list[dict[str, Any]], str | None]:
    """The loaded run, the most GPUs (``gpu_resource``, the launcher's) one pod asks for, its largest gang,
    the objects it would create and the benchmark class it would be granted (``benchrun render``'s)."""
    from benchrun.launch.render import render_run
    from benchrun.spec import load_spec

    loaded = load_spec(spec)
    rendered = render_run(spec, launcher="kubernetes")
    gpus, gang = 0, 1
    for obj in rendered.objects:
        if obj["kind"] == "Job":
            specs = [obj["spec"]["template"]["spec"]]
        else:
            specs = [rj["template"]["spec"]["template"]["spec"] for rj in obj["spec"]["replicatedJobs"]]
            gang = max(gang, int(obj["metadata"]["labels"].get("benchrun.dev/nodes", "1")))
        for ps in specs:
            for c in ps["containers"]:
                gpus = max(gpus, int(((c.get("resources") or {}).get("limits") or {}).get(gpu_resource, 0)))
    return loaded, gpus, gang, rendered.objects, rendered.benchmark_class


def preflight(spec: Path | None = None, api: Any = None) -> list[Check]:
    """Every check, in order (see the module docstring)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from kubernetes.utils.quantity import parse_quantity

    from benchrun.launch.settings import LauncherSettings

    settings = LauncherSettings.from_env(kind="kubernetes")
    api = api if api is not None else _api_client()
    checks: list[Check] = []
    gpu = settings.gpu_resource  # the GPU device plugin's extended resource (nvidia.com/gpu, amd.com/gpu, ...)
    loaded, need_gpus, gang, objects, granted = (_spec_needs(spec, gpu) if spec is not None
                                                 else (None, 0, 1, [], None))
    ns = settings.namespace

    # the APIs
    for group, version, plural, what, fix in APIS:
        needed = plural != "jobsets" or gang > 1
        ok = plural in _served(api, group, version)
        checks.append(Check(what, ok if (ok or needed) else None,
                            f"{group}/{version} {plural} served" if ok else
                            f"{group}/{version} {plural} not served" + ("" if needed else " (no multi-node suite needs it)"),
                            fix))

    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)

    # the queue and priority class of the run (every lane's without a spec)
    if loaded is not None:
        intent = loaded.run.spec.intent
        lanes = [settings.queue_for(intent.cadence, granted)]  # the queue of the class admission would grant
    else:
        lanes = sorted({settings.queue_for(k if k != "publication_grade" else None, k) for k in settings.queues})
    for queue, priority in lanes:
        try:
            custom.get_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", ns, "localqueues", queue)
            checks.append(Check(f"LocalQueue {queue}", True, f"in {ns}"))
        except ApiException as exc:
            checks.append(Check(f"LocalQueue {queue}", False, f"not in {ns} ({exc.status} {exc.reason})",
                                f"apply deploy/kustomize/base (the namespace {ns} and kueue.yaml), or set "
                                "BENCHRUN_LAUNCHER_NAMESPACE / map the cadence in BENCHRUN_LAUNCHER_QUEUES"))
        if priority:
            try:
                custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "workloadpriorityclasses", priority)
                checks.append(Check(f"WorkloadPriorityClass {priority}", True, "exists"))
            except ApiException as exc:
                checks.append(Check(f"WorkloadPriorityClass {priority}", False, f"{exc.status} {exc.reason}",
                                    "apply deploy/kustomize/base (kueue.yaml) or set BENCHRUN_LAUNCHER_PRIORITY_CLASSES"))

    # GPU nodes
    nodes = core.list_node().items
    alloc = sorted(((int(parse_quantity((n.status.allocatable or {}).get(gpu, "0"))), n.metadata.name)
                    for n in nodes), reverse=True)
    with_gpus = [a for a in alloc if a[0] > 0]
    if need_gpus:
        fit = [a for a in alloc if a[0] >= need_gpus]
        ok = len(fit) >= gang
        checks.append(Check("GPU nodes", ok,
                            f"{len(fit)} node(s) with >= {need_gpus} allocatable {gpu}"
                            + (f" (the largest gang needs {gang})" if gang > 1 else "")
                            + ("" if ok else f"; largest: {alloc[0][0]} on {alloc[0][1]}" if alloc else "; no nodes"),
                            f"add GPU nodes with the device plugin of {gpu} (BENCHRUN_LAUNCHER_GPU_RESOURCE), or ask "
                            "for fewer GPUs (suites[].gpus)"))
    else:
        checks.append(Check("GPU nodes", True if loaded is not None else (bool(with_gpus) or None),
                            f"{len(with_gpus)} node(s) with allocatable {gpu}"
                            + (" (this spec asks for none)" if loaded is not None else "")))

    # what each account of the deployment calls, by SubjectAccessReview: the run workers' launcher
    # first, then the operator, Dagster's run launcher and the sensor
    auth = client.AuthorizationV1Api(api)
    run_worker = tuple((v, g, r, s, None, "") for v, g, r, s in LAUNCHER_ACCESS) + (
        ("patch", "benchmarking.aisp.dev", "benchmarkruns", "status", "", ""),)
    accounts = ((RUN_WORKER_ACCOUNT, ns, "deploy/kustomize/base/rbac.yaml (Role benchrun-run-worker, ClusterRole "
                 "benchrun-benchmarkrun-status)", run_worker),) + tuple(
        (name, CONTROL_NAMESPACE, fix, calls) for name, fix, calls in OTHER_ACCESS)
    for account, home_ns, fix, calls in accounts:
        checks.append(_access_check(auth, ApiException, account, home_ns, ns, calls, fix))

    # the image and the artifact store
    images = sorted({c["image"] for o in objects for ps in (
        [o["spec"]["template"]["spec"]] if o["kind"] == "Job" else
        [rj["template"]["spec"]["template"]["spec"] for rj in o["spec"]["replicatedJobs"]]) for c in ps["containers"]})
    checks.append(Check("image", None, ", ".join(images or [settings.image]) + " (pulled by the nodes, not from here)"))
    checks.append(_store_check())
    checks.append(_outputs_check(settings, core, ns))
    return checks


def _access_check(auth: Any, api_exception: Any, account: str, home_ns: str, runs_ns: str,
                  calls: tuple[tuple[str, str, str, str, str | None, str], ...], fix: str) -> Check:
    """One account's calls reviewed (SubjectAccessReview); each denied one named."""
    user = f"system:serviceaccount:{home_ns}:{account}"
    denied = []
    for verb, group, resource, sub, where, name in calls:
        namespace = runs_ns if where is None else where
        attrs = {"verb": verb, "group": group, "resource": resource, "subresource": sub, "namespace": namespace,
                 "name": name}
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {"user": user, "resourceAttributes": {k: v for k, v in attrs.items() if v}}}
        try:
            review = auth.create_subject_access_review(body)
        except api_exception as exc:
            return Check(f"access of {account}", None, f"cannot create SubjectAccessReviews ({exc.status} {exc.reason})")
        if not review.status.allowed:
            denied.append(f"{verb} {resource}{'/' + sub if sub else ''}{'.' + group if group else ''}"
                          + (f" {name}" if name else "") + (f" in {namespace}" if namespace else " (all namespaces)"))
    return Check(f"access of {account}", not denied,
                 f"all {len(calls)} calls allowed" if not denied else "not allowed: " + ", ".join(denied),
                 f"kubectl apply -k deploy/kustomize/base ({fix})")


def _outputs_check(settings: Any, core: Any, ns: str) -> Check:
    """How the suites' files come back: the outputs bucket reachable and the pods' credentials
    Secret present (outputs_uri), or a shared volume; neither is said (the files would be lost)."""
    if settings.run_volume_claim:
        return Check("suite outputs", None, f"through the shared volume {settings.run_volume_claim} (not checked)")
    if not settings.outputs_uri:
        return Check("suite outputs", None, "neither BENCHRUN_LAUNCHER_OUTPUTS_URI nor _RUN_VOLUME_CLAIM is set: a suite's "
                                            "sample files end with its pod (deploy/helm/values.yaml sets OUTPUTS_URI)")
    from kubernetes.client.exceptions import ApiException

    from benchrun.launch.podout import parse_uri

    if has_credentials(settings.outputs_uri):  # parse_uri's message would show them
        return Check("suite outputs", False, f"BENCHRUN_LAUNCHER_OUTPUTS_URI {redact(settings.outputs_uri)!r} carries "
                     "credentials (user:password@, or an '@' that may be part of them)",
                     "set BENCHRUN_LAUNCHER_OUTPUTS_URI=s3://bucket/prefix; the pods' S3 credentials go in their Secret")
    try:
        bucket, _prefix = parse_uri(settings.outputs_uri)
    except ValueError as exc:
        return Check("suite outputs", False, str(exc), "set BENCHRUN_LAUNCHER_OUTPUTS_URI=s3://bucket/prefix")
    import boto3

    client = boto3.client("s3", endpoint_url=os.environ.get("BENCHRUN_S3_ENDPOINT_URL") or None)
    # the Pipes messages' bucket where it is another (its messages are dropped unsaid when it is missing)
    pipes = settings.pipes_s3_bucket if settings.pipes_messages == "s3" else None
    for name, what, fix in ((bucket, "bucket", f"create the bucket or fix BENCHRUN_LAUNCHER_OUTPUTS_URI "
                                                f"({settings.outputs_uri})"),
                            *(((pipes, "Pipes messages' bucket", "create it (docs/kubernetes.md step 1) or fix "
                                                             "BENCHRUN_LAUNCHER_PIPES_S3_BUCKET"),)
                              if pipes and pipes != bucket else ())):
        try:
            client.head_bucket(Bucket=name)
        except Exception as exc:  # noqa: BLE001 - whatever the store answers is the detail
            detail = redact_in(" ".join(str(exc).split()), os.environ.get("BENCHRUN_S3_ENDPOINT_URL"))
            return Check("suite outputs", False, f"{what} {name}: {detail[:200]}", fix)
    if not settings.env_secret:
        return Check("suite outputs", False, f"bucket {bucket} reachable, but the pods get no S3 credentials",
                     "set BENCHRUN_LAUNCHER_ENV_SECRET=benchrun-s3-pods (the Secret of docs/kubernetes.md step 4)")
    try:
        core.read_namespaced_secret(settings.env_secret, ns)
    except ApiException as exc:
        if exc.status == 404:
            return Check("suite outputs", False, f"Secret {ns}/{settings.env_secret} (the pods' S3 credentials) is missing",
                         f"kubectl -n {ns} create secret generic {settings.env_secret} --from-literal=AWS_ACCESS_KEY_ID=... "
                         "--from-literal=AWS_SECRET_ACCESS_KEY=... (docs/kubernetes.md step 4)")
        return Check("suite outputs", None, f"bucket {bucket} reachable; Secret {ns}/{settings.env_secret} not "
                                            f"readable from here ({exc.status} {exc.reason})")
    return Check("suite outputs", True, f"pods upload to {settings.outputs_uri} with Secret {settings.env_secret}")


def _store_check() -> Check:
    url = os.environ.get("BENCHRUN_SHARED_STATE", "")
    if not url:
        return Check("artifact store", None, "BENCHRUN_SHARED_STATE is not set (runs stay in BENCHRUN_HOME)")
    if has_credentials(url):  # the bucket read from it would carry them into the messages below
        return Check("artifact store", False, f"BENCHRUN_SHARED_STATE {redact(url)!r} carries credentials "
                     "(user:password@, or an '@' that may be part of them)",
                     "set BENCHRUN_SHARED_STATE=s3://bucket/prefix; the S3 credentials go in AWS_* (the Secret benchrun-s3)")
    if not url.startswith("s3://"):
        return Check("artifact store", None, f"{url}: not an s3:// URL")
    bucket = url[len("s3://"):].split("/", 1)[0]
    try:
        import boto3

        boto3.client("s3", endpoint_url=os.environ.get("BENCHRUN_S3_ENDPOINT_URL") or None).head_bucket(Bucket=bucket)
        return Check("artifact store", True, f"bucket {bucket} reachable")
    except Exception as exc:  # noqa: BLE001 - whatever the store answers is the detail
        detail = redact_in(" ".join(str(exc).split()), os.environ.get("BENCHRUN_S3_ENDPOINT_URL"))
        return Check("artifact store", False, f"bucket {bucket}: {detail[:200]}",
                     "create the bucket, or fix the Secret benchrun-s3 (credentials, BENCHRUN_S3_ENDPOINT_URL)")


def register(app: Any) -> None:
    import typer

    @app.command("preflight")
    def preflight_cmd(
        spec: Path = typer.Argument(None, help="A BenchmarkRun spec file (default: check every lane)."),
    ) -> None:
        """Check that a run of SPEC could start on the current kube context; each piece ok or missing, with the fix.

        Exit 0 only when nothing is missing.
        """
        checks = preflight(spec)
        for check in checks:
            typer.echo(check.line())
        missing = [c for c in checks if c.ok is False]
        typer.echo(f"{len(missing)} missing" if missing else "ready: a run could start")
        raise typer.Exit(1 if missing else 0)
