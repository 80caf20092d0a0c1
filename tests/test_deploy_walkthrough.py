"""docs/kubernetes.md "Deploying", followed on the cluster harness: deploy/'s CRD, queues and
priority classes (step 3), the S3 Secret in benchrun-runs (step 4), the Helm values' launcher
settings (step 5: Kueue Jobs, outputs through the artifact store, Pipes over S3, no shared
volume), then the example BenchmarkRun applied (step 6) goes to Succeeded with every output file
in the run directory. A real S3 API server (moto) on loopback is the artifact store.

Kept cheap: the example's layers are cut to its gemm on CPU (the harness has no GPUs), three
replicates; the whole canary on the harness is tests/test_k8s_canary.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg
import pytest
import yaml

from conftest import ROOT
from helpers import tiny_layers
from test_store_helpers import s3_env  # noqa: F401  (fixture)

BASE = ROOT / "deploy/kustomize/base"
CRD = BASE / "benchmarkrun-crd.yaml"
EXAMPLE = ROOT / "deploy/examples/canary-gpu.yaml"
VALUES = ROOT / "deploy/helm/values.yaml"
LANES = {"canary": 100, "nightly": 200, "pre-release": 300, "publication": 1000}
CR = ("benchmarking.aisp.dev", "v1alpha1", "benchmarkruns")


def values_env() -> dict[str, str]:
    [code] = yaml.safe_load(VALUES.read_text())["dagster-user-deployments"]["deployments"]
    return {e["name"]: e["value"] for e in code["env"]}


@pytest.mark.slow
def test_the_deploy_walkthrough_takes_the_example_to_succeeded_with_every_output(
        kcluster_factory, bench_home, s3_env, monkeypatch):  # noqa: F811
    import boto3
    from kubernetes import client, config

    from bench_assets.definitions import defs as code_location
    from benchrun.automation.settings import JOB_NAME
    from benchrun.launch.settings import LauncherSettings
    from benchrun.rundir import RunDir
    from sensors.benchmarkrun import benchmarkrun_resource_sensor

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    env = values_env()
    bucket = env["BENCHRUN_LAUNCHER_OUTPUTS_URI"].split("/")[2]
    s3 = boto3.client("s3", endpoint_url=s3_env)
    s3.create_bucket(Bucket=bucket)
    # step 3: benchrun's objects; step 4: the S3 Secret (the pods' only credentials: none in host_env)
    cluster = kcluster_factory(namespace="benchrun-runs", crds=[CRD], host_env={"PYTHONPATH": str(ROOT)},
                               queues={q: {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "16"} for q in LANES},
                               priority_classes={f"benchrun-{q}": v for q, v in LANES.items()})
    cluster.create("secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "benchrun-s3"},
                               "stringData": {k: os.environ[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                                                         "AWS_DEFAULT_REGION", "BENCHRUN_S3_ENDPOINT_URL")}})
    # step 5: the code location's environment from the Helm values (the home is this test's)
    for key, value in env.items():
        if key.startswith("BENCHRUN_LAUNCHER_") or key == "BENCHRUN_CR_NAMESPACE":
            monkeypatch.setenv(key, value)
    settings = LauncherSettings.from_env()
    assert settings.kind == "kubernetes" and settings.run_volume_claim is None and settings.outputs_uri
    # step 6: kubectl apply -f deploy/examples/canary-gpu.yaml (cut to its gemm, on CPU)
    doc = yaml.safe_load(EXAMPLE.read_text())
    [gemm] = [s for s in doc["spec"]["layers"][0]["suites"] if s["name"] == "gemm"]
    gemm["parameters"].update(device="cpu", sizes=[64], iterations=3)
    gemm.update(gpus=0, cpu="1", memory="1Gi")
    doc["spec"]["layers"] = tiny_layers([gemm])
    doc["spec"]["trials"]["minReplicates"] = 3
    api = client.CustomObjectsApi(config.new_client_from_config(str(cluster.kubeconfig)))
    api.create_namespaced_custom_object(*CR[:2], "benchrun-runs", CR[2], doc)

    with dg.instance_for_test() as instance:
        context = dg.build_sensor_context(instance=instance, cursor=None, definitions=code_location,
                                          instance_ref=instance.get_ref())
        [request] = benchmarkrun_resource_sensor.evaluate_tick(context).run_requests
        run_id = request.partition_key
        instance.add_dynamic_partitions("benchmark_run", [run_id])
        launcher = {**settings.model_dump(), "poll_s": 0.1, "pending_timeout_s": 60.0}
        result = code_location.resolve_job_def(JOB_NAME).execute_in_process(
            instance=instance, partition_key=run_id, tags=request.tags, raise_on_error=False,
            run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}},
                        "resources": {"launcher": {"config": launcher}}})
        assert result.success
        messages = [e.user_message for e in instance.all_logs(result.run_id)]
    status = cluster.get("/".join(CR), doc["metadata"]["name"], "benchrun-runs")["status"]
    assert status["phase"] == "Succeeded" and status["runId"] == run_id, status
    rd = RunDir.for_run(run_id)
    st = rd.read_status()
    assert st["selected_scheduler_path"] == "kubernetes" and st["outcome"] == "succeeded"
    # the run records the image by digest, though the values name it by a tag
    digest = cluster.image_id(env["BENCHRUN_LAUNCHER_IMAGE"]).split("@", 1)[1]
    assert st["images"] == {"gemm": "registry.example.com/benchrun@" + digest}
    assert st["image_digests"] == {"gemm": digest}
    launches = json.loads(rd.file("structured", "launches", "", "json").read_text())
    assert [(r["suite"], r["status"]) for r in launches] == [("gemm", "ok")] * 3, launches
    # every output file each replicate declared is in the run directory, hashed in the manifest
    manifest = json.loads((rd.path / "manifest.json").read_text())
    sha = manifest["summary"]["sha256"]
    declared = []
    for r in launches:
        result_doc = json.loads((rd.path / r["result"]).read_text())
        declared += list(result_doc["samples"].values())
        objects = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=f"benchrun/pods/{run_id}/{r['pod_uid']}/")
                   .get("Contents", [])}
        assert f"benchrun/pods/{run_id}/{r['pod_uid']}/index.json" in objects  # it came back by key
    assert len(declared) == 3
    for rel in declared + [f"raw/{run_id}_gemm_r{k}_environment.json" for k in (1, 2, 3)]:
        assert (rd.path / rel).is_file() and rel in sha, rel
    # the Jobs went to the cadence's LocalQueue with no shared volume; Pipes came through S3
    jobs = [v for name in {r["messages"][0]["job_name"] for r in launches} for v in cluster.history("jobs", name) if v]
    assert {j["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] for j in jobs} == {"canary"}
    assert not [v for j in jobs for v in j["spec"]["template"]["spec"]["volumes"] if "persistentVolumeClaim" in v]
    assert any("gemm" in m and "TFLOP/s" in m for m in messages)
    assert cluster.errors == []
    assert Path(status["reportRef"]).is_file()
