"""deploy/: the kustomize base renders to objects that all validate, the CRD there is the
generated one, the Helm values and the Dockerfile agree with pyproject.toml."""

from __future__ import annotations

import copy
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from benchrun.spec.crd import crd, crd_yaml
from crdschemas import crd_validators

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "deploy/kustomize/base"
VALUES = ROOT / "deploy/helm/values.yaml"
DOCKERFILE = ROOT / "Dockerfile"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
LANES = ["canary", "nightly", "pre-release", "publication"]
CORE_GROUPS = {"v1", "rbac.authorization.k8s.io/v1", "apiextensions.k8s.io/v1", "batch/v1", "apps/v1"}


def pins() -> dict[str, str]:
    """name → exact version from pyproject's dependencies and extras."""
    deps = list(PYPROJECT["project"]["dependencies"])
    for extra in PYPROJECT["project"]["optional-dependencies"].values():
        deps += extra
    out = {}
    for dep in deps:
        name, _, version = dep.partition("==")
        out[re.sub(r"\[.*\]", "", name).lower()] = version
    return out


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (make installs it: Debian package kubectl)")
    out = subprocess.run([kubectl, "kustomize", str(BASE)], capture_output=True, text=True, check=True, timeout=60)
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert docs, "kustomize rendered nothing"
    return docs


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


# -- the CRD --------------------------------------------------------------------------------


def test_deploy_crd_is_the_generated_one(rendered: list[dict[str, Any]]) -> None:
    assert (BASE / "benchmarkrun-crd.yaml").read_text() == crd_yaml(), (
        "regenerate: benchrun crd --write")
    [doc] = by_kind(rendered, "CustomResourceDefinition").values()
    assert doc["spec"] == crd()["spec"]
    assert doc["metadata"]["name"] == crd()["metadata"]["name"]


# -- every object validates -----------------------------------------------------------------


def test_core_objects_pass_kubernetes_validate(rendered: list[dict[str, Any]]) -> None:
    version = kubernetes_validate.latest_version()
    core = [d for d in rendered if d["apiVersion"] in CORE_GROUPS]
    assert {d["kind"] for d in core} >= {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                                         "Role", "RoleBinding", "CustomResourceDefinition"}
    for doc in core:
        kubernetes_validate.validate(doc, version, strict=True)
    # the check has teeth: a misspelt field is refused
    broken = copy.deepcopy(by_kind(rendered, "Role")["benchrun-run-worker"])
    broken["rules"][0]["verb"] = ["get"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, version, strict=True)


def kueue_validators() -> dict[str, jsonschema.Draft4Validator]:
    return crd_validators("kueue.x-k8s.io_*.yaml", "v1beta2")


def test_kueue_objects_validate_against_the_published_crds(rendered: list[dict[str, Any]]) -> None:
    validators = kueue_validators()
    kueue = [d for d in rendered if d["apiVersion"].startswith("kueue.x-k8s.io/")]
    assert sorted({d["kind"] for d in kueue}) == ["ClusterQueue", "LocalQueue", "ResourceFlavor", "WorkloadPriorityClass"]
    for doc in kueue:
        assert doc["apiVersion"] == "kueue.x-k8s.io/v1beta2", doc["metadata"]["name"]
        validators[doc["kind"]].validate(doc)
    # teeth: the v1beta1 spelling `cohort` is not a v1beta2 field
    broken = copy.deepcopy(by_kind(rendered, "ClusterQueue")["benchrun-nightly"])
    broken["spec"]["cohort"] = broken["spec"].pop("cohortName")
    with pytest.raises(jsonschema.ValidationError):
        validators["ClusterQueue"].validate(broken)
    assert all(d["apiVersion"] in CORE_GROUPS or d["apiVersion"].startswith("kueue.") for d in rendered)


# -- what the objects mean ------------------------------------------------------------------


def test_one_queue_per_lane_and_publication_is_isolated(rendered: list[dict[str, Any]]) -> None:
    cqs = by_kind(rendered, "ClusterQueue")
    lqs = by_kind(rendered, "LocalQueue")
    wpcs = by_kind(rendered, "WorkloadPriorityClass")
    [flavor] = by_kind(rendered, "ResourceFlavor").values()
    assert sorted(lqs) == sorted(LANES)
    assert sorted(cqs) == sorted(f"benchrun-{lane}" for lane in LANES) == sorted(wpcs)
    runs_ns = by_kind(rendered, "Namespace")["benchrun-runs"]
    for lane in LANES:
        lq, cq = lqs[lane], cqs[f"benchrun-{lane}"]
        assert lq["metadata"]["namespace"] == "benchrun-runs" and lq["spec"]["clusterQueue"] == f"benchrun-{lane}"
        selector = cq["spec"]["namespaceSelector"]["matchLabels"]
        assert selector.items() <= runs_ns["metadata"]["labels"].items()
        for group in cq["spec"]["resourceGroups"]:
            assert {f["name"] for f in group["flavors"]} == {flavor["metadata"]["name"]}
            for f in group["flavors"]:
                assert [r["name"] for r in f["resources"]] == group["coveredResources"]
    publication = cqs["benchrun-publication"]["spec"]
    # neither lends nor borrows: in no cohort, no limits that only mean something in one
    assert "cohortName" not in publication
    for f in publication["resourceGroups"][0]["flavors"]:
        assert all(set(r) == {"name", "nominalQuota"} for r in f["resources"])
    # never preempted, never preempting: no policy anywhere may take its quota
    assert publication["preemption"] == {"withinClusterQueue": "Never", "reclaimWithinCohort": "Never",
                                         "borrowWithinCohort": {"policy": "Never"}}
    for lane in ("canary", "nightly", "pre-release"):
        assert cqs[f"benchrun-{lane}"]["spec"]["cohortName"] == "benchrun"
    values = [wpcs[f"benchrun-{lane}"]["value"] for lane in LANES]
    assert values == sorted(values) and len(set(values)) == 4  # publication highest
    assert flavor["spec"]["nodeLabels"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in flavor["spec"]["tolerations"]


def _rules(docs: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(g, r, v) for d in docs for rule in d["rules"] for g in rule["apiGroups"]
            for r in rule["resources"] for v in rule["verbs"]]


def test_rbac_is_least_privilege(rendered: list[dict[str, Any]]) -> None:
    roles = list(by_kind(rendered, "Role").values()) + list(by_kind(rendered, "ClusterRole").values())
    granted = _rules(roles)
    assert not [g for g in granted if "*" in g], "no wildcards"
    assert not [g for g in granted if g[1] in {"secrets", "configmaps", "nodes", "pods/exec"}]
    cluster = by_kind(rendered, "ClusterRole")
    assert set(_rules([cluster["benchrun-benchmarkrun-status"]])) == {
        ("benchmarking.aisp.dev", "benchmarkruns", v) for v in ("get", "list", "watch")
    } - {("benchmarking.aisp.dev", "benchmarkruns", "watch")} | {("benchmarking.aisp.dev", "benchmarkruns/status", "patch")}
    worker = set(_rules([by_kind(rendered, "Role")["benchrun-run-worker"]]))
    assert ("batch", "jobs", "create") in worker and ("jobset.x-k8s.io", "jobsets", "create") in worker
    assert ("", "pods/log", "get") in worker and ("kueue.x-k8s.io", "workloads", "list") in worker
    # the launcher polls read_namespaced_job_status; K8sRunLauncher monitors and terminates run
    # workers; the sensor terminates a deleted BenchmarkRun's run (tests/test_rbac_harness.py
    # proves each against the code)
    assert ("batch", "jobs/status", "get") in worker
    launcher = set(_rules([by_kind(rendered, "Role")["benchrun-run-launcher"]]))
    assert {("batch", "jobs/status", "get"), ("", "pods", "delete")} <= launcher
    terminator = set(_rules([by_kind(rendered, "Role")["benchrun-run-terminator"]]))
    assert terminator == {("batch", "jobs", "delete"), ("", "pods", "list"), ("", "pods", "delete")}
    assert not [g for g in worker if g[0] == "kueue.x-k8s.io" and g[2] not in {"get", "list", "watch"}]
    assert not [g for g in worker if g[1] in {"pods", "events"} and g[2] not in {"get", "list", "watch"}]
    # every binding names a role and service accounts that the base defines (or the chart's)
    sas = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in rendered if d["kind"] == "ServiceAccount"}
    sas.add(("benchrun", helm_values()["serviceAccount"]["name"]))
    for binding in [d for d in rendered if d["kind"] in {"RoleBinding", "ClusterRoleBinding"}]:
        kind = binding["roleRef"]["kind"]
        assert binding["roleRef"]["name"] in by_kind(rendered, kind)
        for subject in binding["subjects"]:
            assert (subject["namespace"], subject["name"]) in sas
    assert by_kind(rendered, "ServiceAccount")["benchrun-suite"]["automountServiceAccountToken"] is False


# -- Helm values ----------------------------------------------------------------------------


def helm_values() -> dict[str, Any]:
    return yaml.safe_load(VALUES.read_text())


def test_helm_values_match_the_dagster_pin() -> None:
    dagster = pins()["dagster"]
    text = VALUES.read_text()
    assert f"--version {dagster}" in text and f"chart, version {dagster}" in text
    values = helm_values()
    for component in ("dagsterWebserver", "dagsterDaemon"):
        assert values[component]["image"]["tag"] == dagster, component


def test_helm_values_wire_the_cluster_pieces(rendered: list[dict[str, Any]], monkeypatch) -> None:
    values = helm_values()
    launcher = values["runLauncher"]
    assert launcher["type"] == "K8sRunLauncher"
    k8s = launcher["config"]["k8sRunLauncher"]
    assert k8s["jobNamespace"] == "benchrun-runs" in by_kind(rendered, "Namespace")
    assert k8s["runK8sConfig"]["podSpecConfig"]["serviceAccountName"] in by_kind(rendered, "ServiceAccount")
    assert values["postgresql"]["enabled"] is False and values["postgresql"]["postgresqlPassword"] == ""
    assert values["global"]["postgresqlSecretName"] and values["generatePostgresqlPasswordSecret"] is False
    assert values["computeLogManager"]["type"] == "S3ComputeLogManager"
    assert values["computeLogManager"]["config"]["s3ComputeLogManager"]["bucket"]
    assert values["dagsterDaemon"]["runCoordinator"]["type"] == "QueuedRunCoordinator"
    # the code location (where the controller sensor runs) uses the service account bound to
    # the BenchmarkRun status role
    code_sa = values["dagster-user-deployments"]["serviceAccount"]
    assert code_sa["create"] is False
    binding = by_kind(rendered, "ClusterRoleBinding")["benchrun-benchmarkrun-status"]
    assert {"kind": "ServiceAccount", "name": code_sa["name"], "namespace": "benchrun"} in binding["subjects"]
    [code] = values["dagster-user-deployments"]["deployments"]
    workspace = yaml.safe_load((ROOT / "workspace.yaml").read_text())["load_from"][0]["python_module"]
    args = code["codeServerArgs"]
    assert args[args.index("--module-name") + 1] == workspace["module_name"]
    assert args[args.index("--attribute") + 1] == workspace["attribute"]
    env = {e["name"]: e["value"] for e in code["env"] if "value" in e}
    # one BenchmarkRun controller: deploy/ ships the operator, so the sensor (its fallback) is off;
    # both on would each start a run of the same resource
    operator = [d for d in rendered if d.get("kind") == "Deployment" and d["metadata"]["name"] == "benchrun-operator"]
    assert operator, "deploy/kustomize/base ships the operator Deployment"
    assert "benchmarkrun_resource_sensor" not in env["BENCHRUN_AUTOMATION_ON"].split(",")
    from benchrun.automation.settings import starts_on

    monkeypatch.setenv("BENCHRUN_AUTOMATION_ON", env["BENCHRUN_AUTOMATION_ON"])
    assert not starts_on("benchmarkrun_resource_sensor", False) and starts_on("run_liveness_sensor", True)
    # shared state in the same bucket as the compute logs; run workers get the location's env from
    # the run launcher, not through the location's container context (which would also move them
    # to its namespace and service account: tests/test_deploy_runworker.py)
    assert env["BENCHRUN_SHARED_STATE"].startswith(f"s3://{values['computeLogManager']['config']['s3ComputeLogManager']['bucket']}/")
    assert code["includeConfigInLaunchedRuns"]["enabled"] is False
    assert k8s["runK8sConfig"]["containerConfig"]["env"] == code["env"]
    assert k8s["envSecrets"] == code["envSecrets"]
    # the warehouse: Iceberg, its catalog in the chart's Postgres (host, user, database as the
    # postgresql section names them; the password from the Secret the chart reads), its files in
    # the shared bucket; lake accepts exactly these settings with the shared state on
    from sqlalchemy.engine import make_url

    from benchrun.warehouse import lake

    pg = values["postgresql"]
    url = make_url(env["BENCHRUN_CATALOG_URI"])
    assert env["BENCHRUN_WAREHOUSE_FORMAT"] == "iceberg"
    assert (url.drivername, url.host, url.username, url.database, url.port) == (
        pg["postgresqlScheme"], pg["postgresqlHost"], pg["postgresqlUsername"], pg["postgresqlDatabase"],
        pg["service"]["port"]) and url.password is None
    [password] = [e for e in code["env"] if e["name"] == "BENCHRUN_CATALOG_PASSWORD"]
    assert password["valueFrom"]["secretKeyRef"] == {"name": values["global"]["postgresqlSecretName"],
                                                     "key": "postgresql-password"}
    bucket = values["computeLogManager"]["config"]["s3ComputeLogManager"]["bucket"]
    assert env["BENCHRUN_WAREHOUSE_LOCATION"].startswith(f"s3://{bucket}/")
    for key in ("BENCHRUN_SHARED_STATE", "BENCHRUN_CATALOG_URI", "BENCHRUN_WAREHOUSE_LOCATION"):
        monkeypatch.setenv(key, env[key])
    monkeypatch.setenv("BENCHRUN_CATALOG_PASSWORD", "from-the-secret")
    assert make_url(lake.catalog_uri(Path("/var/lib/benchrun"))).password == "from-the-secret"
    assert lake.table_location(Path("/var/lib/benchrun")) == env["BENCHRUN_WAREHOUSE_LOCATION"]
    assert not list(_secret_values(values)), "secrets come from Secrets, never from values.yaml"


def test_every_long_running_pod_asks_for_cpu_and_memory_and_has_a_memory_limit(rendered: list[dict[str, Any]]) -> None:
    """The chart's webserver and daemon, the code location, the run workers and the operator:
    requests (else the pod is BestEffort, first evicted under node pressure) and a memory limit."""
    values = helm_values()
    [code] = values["dagster-user-deployments"]["deployments"]
    [operator] = [d for d in rendered if d["kind"] == "Deployment" and d["metadata"]["name"] == "benchrun-operator"]
    [op_container] = operator["spec"]["template"]["spec"]["containers"]
    pods = {
        "dagsterWebserver": values["dagsterWebserver"].get("resources"),
        "dagsterDaemon": values["dagsterDaemon"].get("resources"),
        "code location": code.get("resources"),
        "run workers": values["runLauncher"]["config"]["k8sRunLauncher"]["runK8sConfig"]["containerConfig"].get(
            "resources"),
        "operator": op_container.get("resources"),
    }
    for name, res in pods.items():
        assert res, f"{name} sets no resources: its pod would be BestEffort"
        assert {"cpu", "memory"} <= set(res.get("requests") or {}), (name, res)
        assert "memory" in (res.get("limits") or {}), (name, res)


def test_the_operator_gets_the_code_locations_s3_env(rendered: list[dict[str, Any]]) -> None:
    """The operator pins and pushes each run to the shared state (submit.prepare, push_run) as the
    code location's sensor does: the same bucket, and the same sources of S3 credentials."""
    values = helm_values()
    [code] = values["dagster-user-deployments"]["deployments"]
    [operator] = [d for d in rendered if d["kind"] == "Deployment" and d["metadata"]["name"] == "benchrun-operator"]
    [container] = operator["spec"]["template"]["spec"]["containers"]
    s3_keys = re.compile(r"BENCHRUN_SHARED_STATE|BENCHRUN_S3_|AWS_")
    code_env = {e["name"]: e for e in code["env"] if s3_keys.match(e["name"])}
    op_env = {e["name"]: e for e in container["env"] if s3_keys.match(e["name"])}
    assert "BENCHRUN_SHARED_STATE" in code_env and op_env == code_env
    secrets = [f["secretRef"]["name"] for f in container.get("envFrom") or [] if "secretRef" in f]
    assert secrets == [s["name"] for s in code["envSecrets"]], "the operator lacks the code location's S3 Secret"
    assert operator["metadata"]["namespace"] == "benchrun"  # where step 4 creates benchrun-s3 (with benchrun-runs)


def _secret_values(node: Any, path: str = "") -> Any:
    """Paths of non-empty values under keys that hold a secret."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, str) and value and re.search(r"(?i)password|secret_?access_?key|token", str(key)):
                yield f"{path}.{key}"
            yield from _secret_values(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _secret_values(value, f"{path}[{i}]")


# -- Dockerfile -----------------------------------------------------------------------------

INSTRUCTIONS = {"FROM", "ARG", "ENV", "LABEL", "RUN", "COPY", "ADD", "WORKDIR", "USER", "EXPOSE",
                "ENTRYPOINT", "CMD", "HEALTHCHECK", "SHELL", "VOLUME", "STOPSIGNAL", "ONBUILD"}


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per logical line: comments dropped, continuations joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.lstrip().startswith("#"):
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        word, _, rest = pending.strip().partition(" ")
        out.append((word, rest.strip()))
        pending = ""
    assert not pending, "Dockerfile ends inside a continued line"
    return out


def test_dockerfile_parses_and_matches_pyproject() -> None:
    instructions = dockerfile_instructions()
    unknown = [w for w, _ in instructions if w not in INSTRUCTIONS]
    assert not unknown, f"not Dockerfile instructions: {unknown}"
    args = dict(re.match(r"(\w+)=(\S+)", a).groups() for w, a in instructions if w == "ARG")  # type: ignore[union-attr]
    assert args["TORCH_VERSION"] == pins()["torch"]
    assert args["VARIANT"] == "cpu"
    # the base Python satisfies requires-python and is the version the tests run on
    assert PYPROJECT["project"]["requires-python"] == ">=3.11" and args["PYTHON_VERSION"] == "3.11"
    [(_, base)] = [(w, a) for w, a in instructions if w == "FROM"]
    assert base == "python:${PYTHON_VERSION}-slim-bookworm"
    runs = " ".join(a for w, a in instructions if w == "RUN")
    # every exact pin written in the Dockerfile is pyproject's; benchrun's own come from pyproject
    for name, version in re.findall(r'"([A-Za-z0-9_.\-]+)==([^"]+)"', runs):
        if version.startswith("${"):
            version = args[version[2:-1]]
        if name != "pip":
            assert pins()[name.lower()] == version, name
    assert 'pip install ".[torch]"' in runs and "pip check" in runs
    for variant in ("cpu", "cuda"):
        assert f'"${{VARIANT}}" = "{variant}"' in runs
    # COPY sources exist; every top-level package pyproject installs is copied
    copied = {Path(p.rstrip("/")).name for w, a in instructions if w == "COPY" for p in a.split()[:-1]}
    assert all((ROOT / name).exists() for name in copied), copied
    packages = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    assert {p.rstrip("*") for p in packages} <= copied
    [(_, user)] = [(w, a) for w, a in instructions if w == "USER"]
    assert user != "0" and user != "root"
    [(_, cmd)] = [(w, a) for w, a in instructions if w == "CMD"]
    argv = yaml.safe_load(cmd)  # exec form is a JSON array
    assert argv[:3] == ["dagster", "code-server", "start"]
    assert argv[argv.index("--module-name") + 1] == "bench_assets.definitions"
    assert shlex.join(argv)  # argv of strings


def test_the_shared_volume_overlay_renders_a_valid_rwx_claim_the_launcher_mounts(rendered, tmp_path, monkeypatch) -> None:
    """deploy/kustomize/shared-volume (the option to the artifact store): the base plus one
    ReadWriteMany claim in the runs namespace, valid; with the settings its comment names, a
    suite's Job mounts that claim at the run's directory and validates."""
    kubectl = shutil.which("kubectl")
    out = subprocess.run([kubectl, "kustomize", str(ROOT / "deploy/kustomize/shared-volume")],
                         capture_output=True, text=True, check=True, timeout=60)
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    base = {(d["kind"], d["metadata"]["name"]) for d in rendered}
    extra = [d for d in docs if (d["kind"], d["metadata"]["name"]) not in base]
    assert base <= {(d["kind"], d["metadata"]["name"]) for d in docs}
    [pvc] = extra
    assert pvc["kind"] == "PersistentVolumeClaim" and pvc["metadata"]["namespace"] == "benchrun-runs"
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    version = kubernetes_validate.latest_version()
    kubernetes_validate.validate(pvc, version, strict=True)
    comment = (ROOT / "deploy/kustomize/shared-volume/kustomization.yaml").read_text()
    claim = re.search(r"BENCHRUN_LAUNCHER_RUN_VOLUME_CLAIM=(\S+)", comment).group(1)
    run_home = re.search(r"BENCHRUN_LAUNCHER_RUN_HOME=(\S+)", comment).group(1)
    assert claim == pvc["metadata"]["name"]
    from benchrun.launch.podspec import job_manifest
    from benchrun.launch.settings import LauncherSettings
    from benchrun.plan import plan_run
    from benchrun.spec import load_spec

    monkeypatch.setenv("BENCHRUN_LAUNCHER_KIND", "kubernetes")
    monkeypatch.setenv("BENCHRUN_LAUNCHER_RUN_VOLUME_CLAIM", claim)
    monkeypatch.setenv("BENCHRUN_LAUNCHER_RUN_HOME", run_home)
    settings = LauncherSettings.from_env()
    run_id = "canary-20261201000000-abcdef12"
    inv = next(i for p in plan_run(load_spec(ROOT / "specs/local/canary.yaml").run, run_id,
                                   Path(run_home) / "runs" / run_id) for i in p.invocations)
    job = job_manifest(inv, namespace="benchrun-runs", placement=settings.placement(False, run_home=run_home,
                                                                                     cadence="canary"))
    pod = job["spec"]["template"]["spec"]
    [volume] = [v for v in pod["volumes"] if v.get("persistentVolumeClaim", {}).get("claimName") == claim]
    mounts = [m for c in pod["containers"] for m in c.get("volumeMounts") or [] if m["name"] == volume["name"]]
    assert mounts and all(m["mountPath"].startswith(run_home) for m in mounts), mounts
    kubernetes_validate.validate(job, version, strict=True)
