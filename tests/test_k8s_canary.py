"""The canary through Dagster with the Kubernetes launcher, on the cluster harness."""

from __future__ import annotations

import json

import pytest

from benchrun import submit as sub
from benchrun.rundir import RunDir
from conftest import ROOT

K8S_LAUNCHER = {
    "kind": "kubernetes", "namespace": "default", "queue_name": "benchrun", "poll_s": 0.1,
    "run_volume_claim": "benchrun-home", "pending_timeout_s": 60.0, "image": "benchrun:test",
    "cpu": "1", "memory": "2Gi",
}


def run_k8s(prepared, home, **overrides):
    from bench_assets.definitions import defs

    instance = sub.get_instance()
    sub.register_partition(instance, prepared.run_id)
    job = defs.resolve_job_def(sub.JOB_NAME)
    config = {**K8S_LAUNCHER, "run_home": str(home), **overrides}
    run_config = {"loggers": {"console": {"config": {"log_level": "WARNING"}}},
                  "resources": {"launcher": {"config": config}}}
    return job.execute_in_process(instance=instance, partition_key=prepared.run_id, raise_on_error=False,
                                  run_config=run_config), instance


@pytest.fixture
def k8s_home(bench_home, kcluster_factory):
    cluster = kcluster_factory(host_env={"PYTHONPATH": str(ROOT)})
    cluster.bind_pvc("benchrun-home", bench_home)
    return cluster


@pytest.mark.slow
def test_tiny_run_through_dagster_on_the_harness(k8s_home, bench_home, canary_doc, write_spec):
    from helpers import tiny_layers

    canary_doc["metadata"]["name"] = "k8s-tiny"
    canary_doc["spec"]["trials"]["minReplicates"] = 3
    canary_doc["spec"]["layers"] = tiny_layers(
        [{"name": "gemm", "repoCommand": "python -m benchrun.suites.gemm", "parameters": {"sizes": [64], "iterations": 3},
          "gpus": 0, "cpu": "2", "memory": "1Gi"}])
    prepared = sub.prepare(write_spec(canary_doc))
    result, instance = run_k8s(prepared, bench_home)
    assert result.success
    rd = RunDir.for_run(prepared.run_id)
    st = rd.read_status()
    assert st["selected_scheduler_path"] == "kubernetes"
    launches = json.loads(rd.file("structured", "launches", "", "json").read_text())
    assert [(r["suite"], r["status"]) for r in launches] == [("gemm", "ok")] * 3, launches
    assert launches[0]["pod_uid"] and launches[0]["node_name"] in ("node-a", "node-b")
    doc = json.loads((rd.path / f"structured/{prepared.run_id}_gemm_r1.json").read_text())
    assert doc["status"] == "ok" and (rd.path / doc["samples"]["calls"]).is_file()
    timeline = json.loads((rd.path / f"raw/{prepared.run_id}_gemm_r1_pod.json").read_text())
    assert timeline["admitted_utc"] and timeline["queue_wait_s"] is not None
    env = json.loads((rd.path / f"structured/{prepared.run_id}_environment.json").read_text())
    assert env["captured_in"] == "pod" and env["pod"]["node_name"] == launches[0]["node_name"]
    assert st["image_digests"]["gemm"] == k8s_home.image_id("benchrun:test").split("@", 1)[1]
    # the Job is gone after the launch; nothing leaks
    assert k8s_home.list("jobs") == []
    assert k8s_home.errors == []
