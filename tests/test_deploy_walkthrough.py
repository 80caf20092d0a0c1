"""docs/kubernetes.md "Deploying", followed on the cluster harness with deploy/'s RBAC enforced
(a call its Roles do not grant is a 403, as on a cluster): deploy/'s CRD, queues and priority
classes (step 3), the S3 Secret in benchrun-runs (step 4), the Helm values' settings (step 5:
Kueue Jobs, outputs and the shared state through the artifact store, Pipes over S3, no shared
volume), then the example BenchmarkRun applied (step 6). The operator, as its ServiceAccount,
turns it into a queued Dagster run; the run worker is what the daemon's K8sRunLauncher starts
in its pod: ``dagster api execute_run`` in its own process, with its own BENCHRUN_HOME (no
volume shared with the operator) and the run worker's ServiceAccount. The resource goes to
``Succeeded`` with every output file in the run directory. A real S3 API server (moto) on
loopback is the artifact store.

Kept cheap: the example's layers are cut to its gemm on CPU (the harness has no GPUs), three
replicates; the whole canary on the harness is tests/test_k8s_canary.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml

from conftest import ROOT
from helpers import QUEUED, dequeue, leading_operator, stopped, tiny_spec
from kharness.rbac import Policy, deploy_rbac_docs, sa_user
from test_deploy_values import location_env as values_env
from test_postgres_instance import pg_server  # noqa: F401  (fixture: a real Postgres on loopback)
from test_store_helpers import s3_env  # noqa: F401  (fixture)

BASE = ROOT / "deploy/kustomize/base"
CRD = BASE / "benchmarkrun-crd.yaml"
EXAMPLE = ROOT / "deploy/examples/canary-gpu.yaml"
LANES = {"canary": 100, "nightly": 200, "pre-release": 300, "publication": 1000}
CR = ("benchmarking.aisp.dev", "v1alpha1", "benchmarkruns")
RUNS = "benchrun-runs"
OPERATOR = ("benchrun", "benchrun-operator")
RUN_WORKER = (RUNS, "benchrun-run")


@pytest.mark.slow
def test_the_deploy_walkthrough_takes_the_example_to_succeeded_with_every_output(
        kcluster_factory, bench_home, s3_env, pg_server, monkeypatch):  # noqa: F811
    import boto3
    from dagster._grpc.types import ExecuteRunArgs
    from kubernetes import client, config

    from benchrun.launch.settings import LauncherSettings
    from benchrun.rundir import RunDir

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    env = values_env()
    bucket = env["BENCHRUN_LAUNCHER_OUTPUTS_URI"].split("/")[2]
    s3 = boto3.client("s3", endpoint_url=s3_env)
    s3.create_bucket(Bucket=bucket)
    s3.create_bucket(Bucket=env["BENCHRUN_LAUNCHER_PIPES_S3_BUCKET"])  # the Pipes messages' own bucket
    policy = Policy(deploy_rbac_docs(BASE))
    # step 3: benchrun's objects, RBAC enforced; step 4: the S3 Secret (the pods' only credentials)
    cluster = kcluster_factory(namespace=RUNS, crds=[CRD], rbac=policy, host_env={"PYTHONPATH": str(ROOT)},
                               queues={q: {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "16"} for q in LANES},
                               priority_classes={f"benchrun-{q}": v for q, v in LANES.items()})
    for secret in ("benchrun-s3", env["BENCHRUN_LAUNCHER_ENV_SECRET"]):  # the run workers', the pods'
        cluster.create("secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret},
                                   "stringData": {k: os.environ[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                                                             "AWS_DEFAULT_REGION",
                                                                             "BENCHRUN_S3_ENDPOINT_URL")}})
    # step 5: the code location's environment from the Helm values (the homes are this test's)
    for key, value in env.items():
        if key.startswith("BENCHRUN_LAUNCHER_") or key in ("BENCHRUN_CR_NAMESPACE", "BENCHRUN_SHARED_STATE"):
            monkeypatch.setenv(key, value)
    # the warehouse as the values set it: Iceberg, the catalog in Postgres (here a real one on
    # loopback, the values' host being the cluster's), the files in the artifact store
    assert env["BENCHRUN_WAREHOUSE_FORMAT"] == "iceberg"
    pg_server.sql("postgres", 'CREATE DATABASE "walkthrough"')
    monkeypatch.setenv("BENCHRUN_WAREHOUSE_FORMAT", "iceberg")
    monkeypatch.setenv("BENCHRUN_CATALOG_URI",
                       f"postgresql+psycopg2://{pg_server.user}@{pg_server.host}:{pg_server.port}/walkthrough")
    monkeypatch.setenv("BENCHRUN_WAREHOUSE_LOCATION", env["BENCHRUN_WAREHOUSE_LOCATION"])
    monkeypatch.setenv("BENCHRUN_LAUNCHER_POLL_S", "0.1")
    monkeypatch.setenv("BENCHRUN_LAUNCHER_PENDING_TIMEOUT_S", "60")
    settings = LauncherSettings.from_env()
    assert settings.kind == "kubernetes" and settings.run_volume_claim is None and settings.outputs_uri
    # step 6: kubectl apply -f deploy/examples/canary-gpu.yaml (cut to its gemm, on CPU)
    doc = yaml.safe_load(EXAMPLE.read_text())
    [gemm] = [s for s in doc["spec"]["layers"][0]["suites"] if s["name"] == "gemm"]
    gemm["parameters"].update(device="cpu", sizes=[64], iterations=3)
    gemm.update(gpus=0, cpu="1", memory="1Gi")
    tiny_spec(doc, [gemm])
    doc["spec"]["trials"]["minReplicates"] = 3
    admin = client.CustomObjectsApi(config.new_client_from_config(str(cluster.kubeconfig)))
    admin.create_namespaced_custom_object(*CR[:2], RUNS, CR[2], doc)

    worker_home = bench_home.parent / "run-worker-home"  # the run worker pod's own disk
    with dg.instance_for_test(overrides=QUEUED) as instance:
        # the operator (as benchrun/benchrun-operator) validates, pins and queues the run
        op = leading_operator(cluster, instance, OPERATOR)
        op.step()
        assert op.stats.started == 1, op.stats.errors
        [run] = instance.get_runs()
        assert run.status == dg.DagsterRunStatus.QUEUED
        run_id = run.tags["dagster/partition"]
        pending = cluster.get("/".join(CR), doc["metadata"]["name"], RUNS)["status"]
        assert pending["phase"] == "Pending" and pending["runId"] == run_id, pending
        # the daemon dequeues it and K8sRunLauncher's pod runs `dagster api execute_run`: here a
        # process with the pod's environment, authenticated as the run worker's ServiceAccount
        dequeue(instance, run)
        args = ExecuteRunArgs(job_origin=run.job_code_origin, run_id=run.run_id, instance_ref=instance.get_ref(),
                              set_exit_code_on_failure=True)
        cmd = [sys.executable, "-m", "dagster", *args.get_command_args()[1:]]
        pod_env = {**os.environ, "BENCHRUN_HOME": str(worker_home),
                   "KUBECONFIG": str(cluster.kubeconfig_for(*RUN_WORKER)), "PYTHONPATH": str(ROOT)}
        done = subprocess.run(cmd, cwd=ROOT, env=pod_env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        finished = instance.get_run_by_id(run.run_id)
        assert finished.status == dg.DagsterRunStatus.SUCCESS, finished.status
        messages = [e.user_message for e in instance.all_logs(run.run_id)]
        op.step()  # catches up whatever status write it has not seen (none should be missing)
        op.run(stopped())
        assert not op.stats.errors, op.stats.errors
    status = cluster.get("/".join(CR), doc["metadata"]["name"], RUNS)["status"]
    assert status["phase"] == "Succeeded" and status["runId"] == run_id, status
    # no status ever went back to an earlier phase, whoever wrote it
    phases = [v["status"]["phase"] for v in cluster.history("/".join(CR), doc["metadata"]["name"], RUNS)
              if v and (v.get("status") or {}).get("phase")]
    order = ["Pending", "Admitted", "Running", "Analyzing", "Succeeded"]
    assert phases == sorted(phases, key=order.index), phases
    rd = RunDir.for_run(run_id, worker_home)
    st = rd.read_status()
    assert st["selected_scheduler_path"] == "kueue" and st["outcome"] == "succeeded"
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
    # the report was written in the run worker's run directory (reportRef names it by the path in
    # BENCHRUN_HOME, which is the same path, /var/lib/benchrun, in every pod of the deployment;
    # here the two homes differ, so the file is looked for in the worker's)
    assert list((rd.path / "reports").glob("*.html"))
    # and the finished run reaches anyone through the shared state, not through a shared disk
    from benchrun.sharedstate import pull_run

    reader = bench_home.parent / "reader-home"
    pull_run(run_id, reader)
    assert json.loads((reader / "runs" / run_id / "manifest.json").read_text()) == manifest
    assert RunDir.for_run(run_id, reader).read_status()["phase"] == "Succeeded"
    # the run worker committed the run's rows to the Iceberg tables: any pod reads them from the
    # catalog and the store, with no copy of the worker's home
    from benchrun.warehouse import lake, views

    assert run_id in lake.run_ids(reader, "measurement_fact")
    views._BUILT.clear()
    rows = views.query("SELECT count(*) AS n FROM measurement_fact WHERE run_id = ? AND suite = 'gemm'", reader,
                       [run_id]).table.to_pylist()
    assert rows[0]["n"] > 0, rows
    # every call each account made is one deploy/'s Roles grant (enforced: a 403 would have failed it)
    for account in (OPERATOR, RUN_WORKER):
        calls = cluster.calls(sa_user(*account))
        assert calls and not policy.denied(calls), (account, [c.what for c in policy.denied(calls)])

