"""benchrun render: every object a run would create, valid against the API's and the CRDs' schemas."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT
from crdschemas import crd_validator


def render(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchrun.cli", "render", *args], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, timeout=120)


@pytest.mark.slow
def test_render_canary_prints_valid_jobs_with_kueue_labels_resources_and_fixed_names(bench_home, canary_doc, write_spec):
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    canary_doc["spec"]["layers"][0]["suites"][0].update(gpus=1, cpu="4", memory="8Gi", shmSize="2Gi")
    spec = write_spec(canary_doc)
    out = render(str(spec), "--launcher", "kubernetes", "-o", "yaml",
                 env={"BENCHRUN_LAUNCHER_QUEUE_NAME": "gpu-lq", "BENCHRUN_LAUNCHER_NAMESPACE": "bench"})
    assert out.returncode == 0, out.stderr
    # no run volume: the emptyDir it falls back to is said, not silent (issue 26 item 7)
    assert "warning: no way back for the suites' files (BENCHRUN_LAUNCHER_OUTPUTS_URI or _RUN_VOLUME_CLAIM)" in out.stderr
    docs = list(yaml.safe_load_all(out.stdout))
    n_suites = sum(len(layer["suites"]) for layer in canary_doc["spec"]["layers"] if layer["enabled"])
    assert len(docs) == n_suites * canary_doc["spec"]["trials"]["minReplicates"]  # every suite, every replicate
    version = kubernetes_validate.latest_version()
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)
        assert doc["kind"] == "Job" and doc["spec"]["suspend"] is True
        assert doc["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-lq"
        assert doc["metadata"]["namespace"] == "bench"
        assert doc["spec"]["ttlSecondsAfterFinished"] > 0
    names = [d["metadata"]["name"] for d in docs]
    assert len(set(names)) == len(names)
    last = canary_doc["spec"]["trials"]["minReplicates"]
    assert re.search(r"-gemm-r1-[0-9a-f]{8}$", names[0]) and any(
        re.search(rf"-serving-workflow-r{last}-[0-9a-f]{{8}}$", n) for n in names)
    gemm = docs[0]["spec"]["template"]["spec"]
    assert gemm["containers"][0]["resources"]["limits"] == {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}} in gemm["volumes"]
    # The same input renders the same names (fixed, not generated).
    again = render(str(spec), "--launcher", "kubernetes", "-o", "json",
                   env={"BENCHRUN_LAUNCHER_QUEUE_NAME": "gpu-lq", "BENCHRUN_LAUNCHER_NAMESPACE": "bench"})
    assert [d["metadata"]["name"] for d in json.loads(again.stdout)["items"]] == names
    # teeth: strict validation refuses a misspelt field
    broken = copy.deepcopy(docs[0])
    broken["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, version, strict=True)


def test_the_launcher_runs_only_the_images_it_allows(bench_home, canary_doc, write_spec):
    """A spec names its suites' images, and on a cluster their pods get the launcher's env Secret (S3
    credentials): any image anyone's BenchmarkRun named was run. BENCHRUN_LAUNCHER_ALLOWED_IMAGES keeps
    suites to trusted prefixes."""
    canary_doc["spec"]["layers"][0]["suites"][0]["image"] = "attacker.example.com/anything:latest"
    spec = write_spec(canary_doc)
    env = {"BENCHRUN_LAUNCHER_ALLOWED_IMAGES": '["registry.example.com/bench/", "benchrun:"]',
           "BENCHRUN_LAUNCHER_ENV_SECRET": "benchrun-s3"}
    out = render(str(spec), "--launcher", "kubernetes", env=env)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert ".image: 'attacker.example.com/anything:latest' is not among the images this launcher runs" in out.stderr
    assert "BENCHRUN_LAUNCHER_ALLOWED_IMAGES" in out.stderr
    canary_doc["spec"]["layers"][0]["suites"][0]["image"] = "registry.example.com/bench/suite@sha256:" + "a" * 64
    out = render(str(write_spec(canary_doc)), "--launcher", "kubernetes", "-o", "json", env=env)
    assert out.returncode == 0, out.stderr
    images = {d["spec"]["template"]["spec"]["containers"][0]["image"] for d in json.loads(out.stdout)["items"]}
    assert images == {"registry.example.com/bench/suite@sha256:" + "a" * 64, "benchrun:latest"}
    # a suite that names no image runs the launcher's: the refusal names that setting
    del canary_doc["spec"]["layers"][0]["suites"][0]["image"]
    out = render(str(write_spec(canary_doc, "plain.yaml")), "--launcher", "kubernetes",
                 env={**env, "BENCHRUN_LAUNCHER_IMAGE": "myregistry.io/b:1"})
    assert out.returncode == 1 and "BENCHRUN_LAUNCHER_IMAGE (the image of spec.layers[" in out.stderr, out.stderr


def test_render_refuses_the_local_launcher_and_bad_output(bench_home):
    out = render(str(ROOT / "specs/local/canary.yaml"), "--launcher", "local")
    assert out.returncode != 0 and "--launcher kubernetes" in out.stderr and "Traceback" not in out.stderr
    out = render(str(ROOT / "specs/local/canary.yaml"), "--launcher", "kubernetes", "-o", "toml")
    assert out.returncode != 0 and "-o/--output" in out.stderr


def test_gang_jobsets_validate_against_the_jobset_crd(bench_home, canary_doc):
    from benchrun.launch.render import render_objects

    validator = crd_validator("jobset.x-k8s.io_jobsets.yaml", "v1alpha2")
    from helpers import tiny_spec

    tiny_spec(canary_doc, [{
        "name": "allreduce", "repoCommand": "python -m benchrun.suites.allreduce --node-rank ${NODE_RANK}",
        "nodes": 2, "gpusPerNode": 8, "cpu": "16", "memory": "64Gi"}])
    path = bench_home / "gang.yaml"
    path.write_text(yaml.safe_dump(canary_doc))
    os.environ["BENCHRUN_LAUNCHER_KIND"] = "kubernetes"
    try:
        objs = render_objects(path)
    finally:
        del os.environ["BENCHRUN_LAUNCHER_KIND"]
    assert {o["kind"] for o in objs} == {"JobSet"}
    for obj in objs:
        validator.validate(obj)
        # the canary's cadence → deploy/'s LocalQueue "canary" (and its priority class)
        assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "canary"
        assert obj["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "benchrun-canary"
        assert obj["metadata"]["namespace"] == "benchrun-runs"


def test_a_suite_timeout_is_bounded_so_every_rendered_deadline_is_an_int64(bench_home, canary_doc, monkeypatch):
    """timeoutSeconds: 2**63-1 was valid and rendered Job deadlines beyond int64 (Kubernetes refuses
    them); it is at most 30 days, and the longest layer renders deadlines that fit."""
    from benchrun.launch.render import render_objects
    from benchrun.spec import SpecInvalid, load_spec
    from helpers import tiny_spec

    gemm = {"name": "gemm", "repoCommand": "python -m benchrun.suites.gemm", "replicates": 10_000,
            "timeoutSeconds": 2**63 - 1}
    tiny_spec(canary_doc, [gemm])
    canary_doc["spec"]["trials"]["contendedReruns"] = 3
    path = bench_home / "long.yaml"
    path.write_text(yaml.safe_dump(canary_doc))
    with pytest.raises(SpecInvalid) as refused:
        load_spec(path)
    [error] = refused.value.errors
    assert (error.path, error.message) == ("spec.layers[0].suites[0].timeoutSeconds",
                                           "is 9223372036854775807; input should be less than or equal to 2592000")
    canary_doc["spec"]["layers"][0]["suites"][0]["timeoutSeconds"] = 30 * 24 * 3600
    path.write_text(yaml.safe_dump(canary_doc))
    monkeypatch.setenv("BENCHRUN_LAUNCHER_KIND", "kubernetes")
    deadlines = [v for o in render_objects(path) for v in re.findall(r'"activeDeadlineSeconds": (\d+)', json.dumps(o))]
    assert deadlines and all(0 < int(d) < 2**63 - 1 for d in deadlines), deadlines


def test_harness_workloads_validate_against_the_kueue_crd(kcluster):
    """The harness's Kueue writes Workloads the published v1beta2 schema accepts."""
    from kubernetes import client

    validator = crd_validator("kueue.x-k8s.io_workloads.yaml", "v1beta2")
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "w", "labels": {"kueue.x-k8s.io/queue-name": "benchrun"}},
           "spec": {"template": {"spec": {
               "restartPolicy": "Never",
               # the harness's namespace enforces the restricted Pod Security level
               "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "seccompProfile": {"type": "RuntimeDefault"}},
               "containers": [
                   {"name": "c", "image": "python:3.11", "command": [sys.executable, "-c", "print(1)"],
                    "resources": {"requests": {"cpu": "1"}},
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]}}}}
    client.BatchV1Api(kcluster.api_client()).create_namespaced_job("default", job)
    wl = kcluster.wait_for(lambda: [w for w in kcluster.list("workloads")
                                    if any(c["type"] == "Finished" for c in w["status"].get("conditions") or [])])[0]
    validator.validate(wl)


PINNED = "registry.example.com/benchrun@sha256:" + "a" * 64
PUBLICATION_ENV = {"BENCHRUN_LAUNCHER_KIND": "kubernetes", "BENCHRUN_LAUNCHER_IMAGE": PINNED,
                   "BENCHRUN_LAUNCHER_NODE_SELECTOR": '{"pool": "bench"}', "BENCHRUN_LAUNCHER_CPU": "8",
                   "BENCHRUN_LAUNCHER_MEMORY": "64Gi", "BENCHRUN_LAUNCHER_OUTPUTS_URI": "s3://bench/runs",
                   "BENCHRUN_LAUNCHER_TOPOLOGY_LABEL": "topology.example.com/rack",
                   "BENCHRUN_LAUNCHER_TOPOLOGY_VALUES": '["rack-1"]'}


def test_a_publication_run_renders_the_layer_jobs_it_creates(bench_home, monkeypatch):
    """A granted publication run creates one Job per layer without a gang (launch_layer:
    benchrun.launch.inpod, the layer's deadline, its largest suite's size); render prints those,
    not a Job per replicate that the run never creates. A layer with a gang stays per replicate."""
    from benchrun.launch.podspec import layer_deadline_s, layer_job_manifest, layer_job_name
    from benchrun.launch.render import render_objects
    from benchrun.launch.settings import LauncherSettings
    from benchrun.plan import plan_run
    from benchrun.spec import load_spec
    from helpers import tiny_spec

    doc = yaml.safe_load((ROOT / "specs/local/pre-release.yaml").read_text())
    micro = {s["name"]: s for s in doc["spec"]["layers"][0]["suites"]}
    gemm = {**micro["gemm"], "parameters": {**micro["gemm"]["parameters"], "device": "cuda"}}  # 1 GPU, unset
    # a gang's world size is nodes x gpusPerNode: the suite refuses a world_size parameter (and validate with it)
    params = {k: v for k, v in micro["allreduce"].get("parameters", {}).items() if k != "world_size"}
    gang = {**micro["allreduce"], "name": "allreduce2", "nodes": 2, "gpusPerNode": 1, "parameters": params}
    tiny_spec(doc, [micro["membw"], gemm, {**micro["fio"], "cpu": "2", "memory": "4Gi"}],
                                        [micro["allreduce"], gang])
    path = bench_home / "publication.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    for key, value in PUBLICATION_ENV.items():
        monkeypatch.setenv(key, value)
    run_id = "local-pre-release-20261206000000-abcdef12"
    objs = render_objects(path, run_id=run_id)
    layer_job, *rest = objs
    # micro: one layer Job, as launch_layer builds it
    assert layer_job["kind"] == "Job" and layer_job["metadata"]["name"] == layer_job_name(run_id, "micro")
    [c] = layer_job["spec"]["template"]["spec"]["containers"]
    assert "benchrun.launch.inpod" in c["args"] and c["args"][c["args"].index("--layer") + 1] == "micro"
    assert c["resources"]["limits"] == {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"}
    plans = plan_run(load_spec(path).run, run_id, bench_home / "runs" / run_id, home=bench_home, record_plan=False)
    invs = plans[0].invocations
    deadline = int(layer_deadline_s(invs, plans[0].contended_reruns))
    assert layer_job["spec"]["template"]["spec"]["activeDeadlineSeconds"] >= deadline >= sum(
        i.timeout_s for i in invs)
    settings = LauncherSettings.from_env()
    assert layer_job == layer_job_manifest(
        invs, namespace=settings.namespace, contended_reruns=plans[0].contended_reruns,
        placement=settings.placement(True, run_home=str(bench_home), cadence="pre_release"))
    # component has a gang: a JobSet per gang replicate and a Job per other replicate, as the run launches them
    assert {o["kind"] for o in rest} == {"Job", "JobSet"}
    assert len(rest) == len(plans[1].invocations)
    assert all(o["metadata"]["labels"]["benchrun.dev/layer"] == "component" for o in rest)


def test_preflight_builds_the_layer_job_a_publication_layer_runs_as(tmp_path):
    """The run's preflight checks what launch_layer will create: a publication layer whose
    suites name two images builds as per-replicate Jobs but not as its one layer Job."""
    from dataclasses import replace

    from benchrun.errors import BenchrunError
    from benchrun.launch.kubernetes import KubernetesLauncher
    from benchrun.launch.podspec import Placement
    from test_launch_kubernetes_harness import make_inv

    other = "registry.example.com/other@sha256:" + "b" * 64
    invs = [make_inv(tmp_path, replicate=k, image=PINNED if k == 1 else other, cpu="1", memory="1Gi") for k in (1, 2)]
    placement = Placement(queue_name="q", publication_grade=True, node_selector={"pool": "bench"})
    realism = KubernetesLauncher(None, None, "bench", replace(placement, publication_grade=False))
    realism.preflight(invs)
    launcher = KubernetesLauncher(None, None, "bench", placement)
    with pytest.raises(BenchrunError, match=r"publication grade runs a layer in one pod, so its suites need one image"):
        launcher.preflight(invs)
    assert [m["kind"] for m in realism.manifests(invs)] == ["Job", "Job"]
    same = [replace(i, image=PINNED) for i in invs]
    launcher.preflight(same, contended_reruns=1)
    [job] = launcher.manifests(same, contended_reruns=1)
    assert job["metadata"]["labels"]["benchrun.dev/layer-job"] == "true"
    assert job["spec"]["template"]["spec"]["containers"][0]["args"][-2:] == ["--contended-reruns", "1"]
