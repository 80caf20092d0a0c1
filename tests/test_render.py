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
    from helpers import tiny_layers

    canary_doc["spec"]["layers"] = tiny_layers([{
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


def test_harness_workloads_validate_against_the_kueue_crd(kcluster):
    """The harness's Kueue writes Workloads the published v1beta2 schema accepts."""
    from kubernetes import client

    validator = crd_validator("kueue.x-k8s.io_workloads.yaml", "v1beta2")
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "w", "labels": {"kueue.x-k8s.io/queue-name": "benchrun"}},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
               {"name": "c", "image": "python:3.11", "command": [sys.executable, "-c", "print(1)"],
                "resources": {"requests": {"cpu": "1"}}}]}}}}
    client.BatchV1Api(kcluster.api_client()).create_namespaced_job("default", job)
    wl = kcluster.wait_for(lambda: [w for w in kcluster.list("workloads")
                                    if any(c["type"] == "Finished" for c in w["status"].get("conditions") or [])])[0]
    validator.validate(wl)
