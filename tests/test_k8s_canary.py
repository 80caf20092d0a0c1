"""The canary through Dagster with the Kubernetes launcher, on the cluster harness."""

from __future__ import annotations

import json

import pytest

from benchrun import submit as sub
from benchrun.rundir import RunDir
from conftest import ROOT
from test_store_helpers import s3_env  # noqa: F401  (fixture)

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
    from helpers import tiny_spec

    canary_doc["metadata"]["name"] = "k8s-tiny"
    canary_doc["spec"]["trials"]["minReplicates"] = 3
    tiny_spec(canary_doc,
        [{"name": "gemm", "repoCommand": "python -m benchrun.suites.gemm", "parameters": {"sizes": [64], "iterations": 3},
          "gpus": 0, "cpu": "2", "memory": "1Gi"}])
    prepared = sub.prepare(write_spec(canary_doc))
    result, instance = run_k8s(prepared, bench_home)
    assert result.success
    rd = RunDir.for_run(prepared.run_id)
    st = rd.read_status()
    assert st["selected_scheduler_path"] == "kueue"  # the canary asks for no slinky
    launches = json.loads(rd.file("structured", "launches", "", "json").read_text())
    assert [(r["suite"], r["status"]) for r in launches] == [("gemm", "ok")] * 3, launches
    assert launches[0]["pod_uid"] and launches[0]["node_name"] in ("node-a", "node-b")
    doc = json.loads((rd.path / f"structured/{prepared.run_id}_gemm_r1.json").read_text())
    assert doc["status"] == "ok" and (rd.path / doc["samples"]["calls"]).is_file()
    timeline = json.loads((rd.path / f"raw/{prepared.run_id}_gemm_r1_pod.json").read_text())
    assert timeline["admitted_utc"] and timeline["queue_wait_s"] is not None
    env = json.loads((rd.path / f"structured/{prepared.run_id}_environment.json").read_text())
    assert env["captured_in"] == "pod" and env["pod"]["node_name"] == launches[0]["node_name"]
    # the node's own load sample; the orchestrator's (its host, not the node) stay under orchestrator
    pod_env = json.loads((rd.path / f"raw/{prepared.run_id}_gemm_r1_environment.json").read_text())
    assert env["background_load"] == pod_env["background_load"] and env["background_load"]["after"] is None
    assert env["orchestrator"]["background_load"]["before"] and env["orchestrator"]["background_load"]["after"]
    assert st["image_digests"]["gemm"] == k8s_home.image_id("benchrun:test").split("@", 1)[1]
    # the Job is gone after the launch; nothing leaks
    assert k8s_home.list("jobs") == []
    assert k8s_home.errors == []


def _facts(result) -> dict[str, int]:
    out = {}
    for event in result.get_asset_materialization_events():
        mat = event.event_specific_data.materialization
        if "dagster/row_count" in mat.metadata:
            out[mat.asset_key.to_user_string()] = mat.metadata["dagster/row_count"].value
    return out


def _results(rd: RunDir) -> dict[tuple[str, int], dict]:
    out = {}
    for path in sorted((rd.path / "structured").glob(f"{rd.run_id}_*_r*.json")):
        doc = json.loads(path.read_text())
        if isinstance(doc, dict) and "suite" in doc:
            out[(doc["suite"], doc["replicate"])] = doc
    return out


@pytest.mark.slow
def test_stock_canary_gives_the_same_facts_as_the_local_launcher(k8s_home, bench_home, canary_doc, write_spec):
    """Every suite of the stock canary (3 replicates to keep CI short), once locally and once
    as Jobs on the harness: the same suites, metrics and warehouse facts, serving requests
    included, and the suites' Pipes log lines in the Dagster event log."""
    canary_doc["spec"]["trials"]["minReplicates"] = 3
    local = sub.prepare(write_spec(canary_doc, "local.yaml"))
    local_result = sub.execute(local)
    assert local_result.success
    canary_doc["metadata"]["name"] = "k8s-canary"
    prepared = sub.prepare(write_spec(canary_doc, "k8s.yaml"))
    result, instance = run_k8s(prepared, bench_home)
    assert result.success
    rd, rd_local = RunDir.for_run(prepared.run_id), RunDir.for_run(local.run_id)
    st = rd.read_status()
    assert st["outcome"] == rd_local.read_status()["outcome"] == "succeeded", st.get("issues")
    docs, docs_local = _results(rd), _results(rd_local)
    assert sorted(docs) == sorted(docs_local) and len(docs) == 8 * 3
    # The local launcher's host sampler adds telemetry summaries (case "telemetry"); a pod's
    # node is not sampled from the orchestrator (README: Running on Kubernetes).
    # capacity_at_slo is there only when a point's verdict held: on a loaded host the client's own
    # lag can invalidate a point in one launch and not the other, and the document says so.
    def varies(m):
        return m.get("case") == "telemetry" or m["name"] == "capacity_at_slo"

    def core(doc):
        return sorted((m["name"], m["case"]) for m in doc["metrics"] if not varies(m))

    def n_telemetry(ds):
        return sum(1 for d in ds.values() for m in d["metrics"] if varies(m))

    for key, doc in docs.items():
        assert doc["status"] == docs_local[key]["status"], key
        assert core(doc) == core(docs_local[key]), key
        for d in (doc, docs_local[key]):
            if key[0] == "serving_sweep" and not any(m["name"] == "capacity_at_slo" for m in d["metrics"]):
                assert d["context"]["capacity_at_slo"].startswith("absent: no point"), key
    facts, facts_local = _facts(result), _facts(local_result)
    assert facts["measurement_fact"] - n_telemetry(docs) == facts_local["measurement_fact"] - n_telemetry(docs_local) > 0
    assert facts["serving_outcome_fact"] == facts_local["serving_outcome_fact"] > 0
    assert facts["serving_request_fact"] == facts_local["serving_request_fact"] > 0
    # The suites' own log lines came through Pipes from the pod log into the event log.
    messages = [e.user_message for e in instance.all_logs(result.run_id)]
    assert any("gemm" in m and "TFLOP/s" in m for m in messages)
    assert any("fio" in m and "MiB/s" in m for m in messages)
    assert k8s_home.list("jobs") == [] and k8s_home.errors == []


@pytest.mark.slow
def test_publication_grade_through_dagster_runs_each_layer_in_one_job(bench_home, kcluster_factory, write_spec):
    import yaml

    from helpers import tiny_spec
    from kharness import Node

    # The in-pod sampler would (rightly) downgrade the run on this shared, loaded test machine.
    cluster = kcluster_factory(host_env={"PYTHONPATH": str(ROOT), "BENCHRUN_TELEMETRY": "0"},
                               nodes=[Node("gpu-a", labels={"pool": "bench"}), Node("gpu-b", labels={"pool": "bench"})])
    cluster.bind_pvc("benchrun-home", bench_home)
    doc = yaml.safe_load((ROOT / "specs/local/pre-release.yaml").read_text())
    image = "registry.example/benchrun@sha256:" + "c" * 64
    gemm = {"name": "gemm", "repoCommand": "python -m benchrun.suites.gemm", "image": image, "cpu": "1",
            "memory": "1Gi", "parameters": {"sizes": [64], "iterations": 3}}
    tiny_spec(doc, [gemm])
    doc["spec"]["trials"]["minReplicates"] = 3
    prepared = sub.prepare(write_spec(doc))
    result, _instance = run_k8s(prepared, bench_home, node_selector={"pool": "bench"})
    assert result.success
    rd = RunDir.for_run(prepared.run_id)
    st = rd.read_status()
    assert st["benchmark_class_granted"] == "publication_grade", [c for c in st["conditions"] if "Publication" in c["type"]]
    launches = json.loads(rd.file("structured", "launches", "", "json").read_text())
    assert [(r["replicate"], r["status"]) for r in launches] == [(1, "ok"), (2, "ok"), (3, "ok")]
    assert len({r["job_uid"] for r in launches}) == 1 and len({r["node_name"] for r in launches}) == 1
    layer_job = [v for v in cluster.history("jobs", launches[0]["messages"][0]["job_name"]) if v][0]
    assert layer_job["metadata"]["labels"]["benchrun.dev/layer-job"] == "true"
    assert layer_job["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]  # exclusive placement


@pytest.mark.slow
def test_pipes_messages_through_s3(bench_home, kcluster_factory, canary_doc, write_spec, s3_env):
    """pipes_messages: s3 — the suite writes Pipes chunks to a bucket (dagster-pipes'
    PipesS3MessageWriter), dagster-aws's PipesS3MessageReader brings them into the run log."""
    import os

    import boto3

    from helpers import tiny_spec

    boto3.client("s3", endpoint_url=s3_env).create_bucket(Bucket="pipes")
    aws = {k: os.environ[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION",
                                      "BENCHRUN_S3_ENDPOINT_URL")}
    cluster = kcluster_factory(host_env={"PYTHONPATH": str(ROOT), **aws})
    cluster.bind_pvc("benchrun-home", bench_home)
    canary_doc["metadata"]["name"] = "k8s-s3pipes"
    canary_doc["spec"]["trials"]["minReplicates"] = 3
    tiny_spec(canary_doc,
        [{"name": "gemm", "repoCommand": "python -m benchrun.suites.gemm", "parameters": {"sizes": [64], "iterations": 3}}])
    prepared = sub.prepare(write_spec(canary_doc))
    result, instance = run_k8s(prepared, bench_home, pipes_messages="s3", pipes_s3_bucket="pipes")
    assert result.success
    messages = [e.user_message for e in instance.all_logs(result.run_id)]
    assert any("gemm" in m and "TFLOP/s" in m for m in messages)
    keys = boto3.client("s3", endpoint_url=s3_env).list_objects_v2(Bucket="pipes").get("KeyCount", 0)
    assert keys > 0  # the messages went through the bucket
