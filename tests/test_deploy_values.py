"""The deploy values run suites on Kueue Jobs by default: the launcher settings in the Helm
values are valid and name deploy/'s objects, the example BenchmarkRun renders to valid Jobs
whose commands are in the image, and a publication-grade spec with a moving image tag renders as the
realism-grade run it would be."""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from benchrun.launch.podspec import moving_tag, qos_class
from benchrun.launch.settings import LauncherSettings
from conftest import ROOT

VALUES = ROOT / "deploy/helm/values.yaml"
EXAMPLE = ROOT / "deploy/examples/canary-gpu.yaml"


@pytest.fixture(scope="module")
def kustomized() -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    out = subprocess.run([kubectl, "kustomize", str(ROOT / "deploy/kustomize/base")], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def location_env() -> dict[str, str]:
    values = yaml.safe_load(VALUES.read_text())
    [code] = values["dagster-user-deployments"]["deployments"]
    return {e["name"]: e["value"] for e in code["env"] if "value" in e}


def launcher_env() -> dict[str, str]:
    return {k: v for k, v in location_env().items() if k.startswith("BENCHRUN_LAUNCHER_")}


def test_the_values_run_suites_on_kueue_jobs(kustomized):
    values = yaml.safe_load(VALUES.read_text())
    s = LauncherSettings.from_env(launcher_env())  # every name valid, every value of its type
    assert s.kind == "kubernetes"
    k8s = values["runLauncher"]["config"]["k8sRunLauncher"]
    assert s.namespace == k8s["jobNamespace"]
    named = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in kustomized}
    assert ("Namespace", None, s.namespace) in named
    suite_sa = named[("ServiceAccount", s.namespace, s.service_account)]
    assert suite_sa["automountServiceAccountToken"] is False  # the suites' pods: no API access
    assert not moving_tag(s.image) and s.image.endswith("-cuda")  # the GPU build, by a pinned tag
    # the suites' files come back through the artifact store, not a ReadWriteMany volume: the
    # pods upload under the shared state's bucket with the credentials of the Secret of step 4
    assert s.run_volume_claim is None and not k8s["volumes"]
    assert not [d for d in kustomized if d["kind"] == "PersistentVolumeClaim"]
    assert s.outputs_uri == location_env()["BENCHRUN_SHARED_STATE"]
    # the pods get a key of their own (scoped to pods/ and the Pipes bucket), never the run workers' (review
    # 2026-12-08: both read benchrun-s3, so a suite image held keys to runs/, published/ and the warehouse)
    assert s.env_secret == "benchrun-s3-pods" and {"name": "benchrun-s3"} in k8s["envSecrets"]
    assert {"name": s.env_secret} not in k8s["envSecrets"]
    # Pipes messages go under random keys at a bucket's root: a bucket of their own, which the pods' key may write
    assert s.pipes_messages == "s3" and s.pipes_s3_bucket and s.pipes_s3_bucket != s.outputs_uri.split("/")[2]
    docs = (ROOT / "docs" / "kubernetes.md").read_text()
    assert f"create secret generic {s.env_secret}" in docs and f"{s.pipes_s3_bucket}/*" in docs
    # the webserver listens on its service port as uid 10001: no port below 1024 (ip_unprivileged_port_start)
    web = values["dagsterWebserver"]
    assert web["podSecurityContext"]["runAsUser"] != 0 and web["service"]["port"] >= 1024
    # the chart copies its probes as written (defaults: port 80): they must name the port it listens on
    for probe in ("readinessProbe", "startupProbe"):
        assert web[probe]["httpGet"]["port"] == web["service"]["port"], probe
    # each run's queue is its cadence's: no one queue for every run
    assert s.queue_name is None and s.queue_for("nightly")[0] in {
        d["metadata"]["name"] for d in kustomized if d["kind"] == "LocalQueue"}


def test_the_example_renders_valid_jobs_whose_commands_are_in_the_image(kustomized, bench_home, monkeypatch):
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    from benchrun.launch.render import render_objects
    from benchrun.spec import load_spec

    loaded = load_spec(EXAMPLE)
    doc = yaml.safe_load(EXAMPLE.read_text())
    assert doc["metadata"]["namespace"] == "benchrun-runs"
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "COPY benchrun/ benchrun/" in dockerfile
    for layer in loaded.run.spec.layers:
        for suite in layer.suites:
            m = re.fullmatch(r"python -m benchrun\.suites\.(\w+)", suite.repo_command or "")
            assert m and (ROOT / "benchrun/suites" / f"{m[1]}.py").is_file(), suite.name
            if m[1] == "fio":
                assert re.search(r"apt-get install[^\n]* fio ", dockerfile)
    for key, value in launcher_env().items():
        monkeypatch.setenv(key, value)
    objs = render_objects(EXAMPLE)
    version = kubernetes_validate.latest_version()
    seen = set()
    for obj in objs:
        suite = obj["metadata"]["labels"]["benchrun.dev/suite"]
        if suite not in seen:
            seen.add(suite)
            kubernetes_validate.validate(obj, version, strict=True)
        pod = obj["spec"]["template"]["spec"]
        assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "canary"
        assert obj["metadata"]["namespace"] == "benchrun-runs"
        assert pod["serviceAccountName"] == "benchrun-suite" and qos_class(pod) == "Guaranteed"
        assert pod["containers"][0]["image"] == "registry.example.com/benchrun:0.1.0-cuda"
        assert {"name": "run-dir", "emptyDir": {}} in pod["volumes"]
        container = pod["containers"][0]
        assert container["command"] == ["python"] and container["args"][:2] == ["-m", "benchrun.launch.podout"]
        assert container["envFrom"] == [{"secretRef": {"name": "benchrun-s3-pods"}}]
    gemm = [o for o in objs if o["metadata"]["labels"]["benchrun.dev/suite"] == "gemm"][0]
    assert gemm["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_publication_grade_with_a_moving_tag_renders_as_the_realism_run_it_would_be(bench_home, monkeypatch):
    """Found in review: render raised on a publication-grade spec with a tagged image while a real run of it
    is admitted downgraded to realism grade. Render grants what admission grants: the objects of the
    realism-grade run, the downgrade said (the message of the run's PublicationGuaranteesMet condition)."""
    from benchrun.launch import render

    path = ROOT / "specs/local/pre-release.yaml"  # publication_grade, suites naming no image
    env = {"BENCHRUN_LAUNCHER_KIND": "kubernetes", "BENCHRUN_LAUNCHER_NODE_SELECTOR": '{"pool": "bench"}',
           "BENCHRUN_LAUNCHER_CPU": "8", "BENCHRUN_LAUNCHER_MEMORY": "64Gi"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    # a pinned-looking tag moves too: only a digest says what ran
    for image in ("registry.example.com/benchrun:latest", "registry.example.com/benchrun:0.1.0-cuda"):
        monkeypatch.setenv("BENCHRUN_LAUNCHER_IMAGE", image)
        objects = render.render_objects(path)  # before: raised "is a moving tag"
        assert objects
        for obj in objects:  # per replicate, the cadence's queue, no exclusive placement
            assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "pre-release"
            assert "benchrun.dev/layer-job" not in obj["metadata"]["labels"]
            assert "podAntiAffinity" not in (obj["spec"]["template"]["spec"].get("affinity") or {})
        rendered = render.render_run(path)
        assert rendered.benchmark_class == "realism_grade" and rendered.objects == objects
        [warning] = rendered.warnings
        assert "realism_grade granted" in warning and "pinned by digest (name@sha256:...)" in warning
    monkeypatch.setenv("BENCHRUN_LAUNCHER_IMAGE", "registry.example.com/benchrun@sha256:" + "a" * 64)
    pinned = render.render_run(path)  # by digest: granted, one Job per layer in the publication queue
    assert pinned.benchmark_class == "publication_grade" and not pinned.warnings
    assert {o["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] for o in pinned.objects} == {"publication"}
    assert moving_tag("benchrun") and moving_tag("r.example:5000/benchrun") and not moving_tag("r.example:5000/b:1.0")
    assert not moving_tag("b:latest@sha256:" + "a" * 64)


def pod_resource_names(pod: dict[str, Any]) -> set[str]:
    """The resources Kueue counts for a pod: every container's and init container's requests
    (limits where a request is missing)."""
    names: set[str] = set()
    for c in (pod.get("containers") or []) + (pod.get("initContainers") or []):
        res = c.get("resources") or {}
        names |= set(res.get("requests") or {}) | set(res.get("limits") or {})
    return names


@pytest.mark.parametrize("spec", sorted((ROOT / "specs/examples").glob("*.yaml")) + [EXAMPLE], ids=lambda p: p.name)
def test_every_resource_a_shipped_example_asks_for_is_covered_by_its_clusterqueue(spec, kustomized, bench_home,
                                                                                   monkeypatch):
    """Kueue never admits a workload that asks for a resource no resource group of its
    ClusterQueue covers ("resource rdma/ib unavailable in ClusterQueue"): every resource the
    launcher puts in the shipped examples' pods (`network: rdma` adds the RDMA device) is
    covered, with a quota, by the ClusterQueue behind the object's LocalQueue in deploy/."""
    from benchrun.launch.render import render_objects

    for key, value in launcher_env().items():
        monkeypatch.setenv(key, value)
    # publication grade is granted only with an image pinned by digest (test above)
    monkeypatch.setenv("BENCHRUN_LAUNCHER_IMAGE", "registry.example.com/benchrun@sha256:" + "a" * 64)
    # examples ask for schedulerPath slinky: a cluster with slurm-bridge (else they are refused, as at admission)
    monkeypatch.setenv("BENCHRUN_LAUNCHER_SLINKY_SCHEDULER_NAME", "slurm-bridge-scheduler")
    monkeypatch.setenv("BENCHRUN_VAR_SSH_USER", "bench")  # the examples' one site variable
    local = {(d["metadata"]["namespace"], d["metadata"]["name"]): d["spec"]["clusterQueue"]
             for d in kustomized if d["kind"] == "LocalQueue"}
    quota = {}
    for cq in (d for d in kustomized if d["kind"] == "ClusterQueue"):
        quota[cq["metadata"]["name"]] = {
            r["name"] for group in cq["spec"]["resourceGroups"] for flavor in group["flavors"]
            for r in flavor["resources"] if r["name"] in group["coveredResources"]}
    objs = render_objects(spec)
    assert objs
    for obj in objs:
        cq = local[(obj["metadata"]["namespace"], obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"])]
        if obj["kind"] == "JobSet":
            pods = [rj["template"]["spec"]["template"]["spec"] for rj in obj["spec"]["replicatedJobs"]]
        else:
            pods = [obj["spec"]["template"]["spec"]]
        for pod in pods:
            missing = pod_resource_names(pod) - quota[cq]
            assert not missing, f"{spec.name}: {obj['kind']} {obj['metadata']['name']} asks for {sorted(missing)}, " \
                                f"which ClusterQueue {cq} does not cover: Kueue would never admit it"
