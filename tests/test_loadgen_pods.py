"""A serving point's load spread over the pods of one Indexed Job (issue 29 item 7): the Job as
rendered (strict batch/v1 schema), what is refused, the merge and the verdict, and a point run on
the cluster harness by 2 load pods against the reference server, merged through a real S3 API
(moto), checked against the server's own log."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from benchrun.errors import BenchrunError
from benchrun.launch.loadjob import load_job_manifest, load_pods
from benchrun.launch.podspec import Placement
from benchrun.plan import Invocation
from conftest import ROOT
from test_store_helpers import s3_env  # noqa: F401  (fixture)

RUN_ID = "lp-20261203000000-abcdef12"
CASE = "bc-00112233445566aa"
BUCKET = "benchrun-artifacts"
URI = f"s3://{BUCKET}/benchrun"
AWS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "BENCHRUN_S3_ENDPOINT_URL")


def serving_inv(run_dir: Path, params: dict[str, Any], **over: Any) -> Invocation:
    fields: dict[str, Any] = dict(
        run_id=RUN_ID, layer="component", suite="serving_sweep", replicate=1, benchmark_case_id=CASE,
        argv=(sys.executable, "-m", "benchrun.suites.serving_sweep"),
        env={"BENCHRUN_RUN_ID": RUN_ID, "BENCHRUN_RUN_DIR": str(run_dir), "BENCHRUN_SUITE": "serving_sweep",
             "BENCHRUN_REPLICATE": "1", "BENCHRUN_CASE_ID": CASE, "BENCHRUN_PARAMS": json.dumps(params),
             "PYTHONUNBUFFERED": "1"},
        timeout_s=120.0, image="python:3.11", parameters=params,
    )
    fields.update(over)
    return Invocation(**fields)


PLACE = Placement(queue_name="q", outputs_uri=URI, image="i")


def test_the_load_job_is_one_valid_indexed_job(tmp_path):
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    from benchrun.launch.kubernetes import KubernetesLauncher

    inv = serving_inv(tmp_path, {"endpoint": "http://server:8000", "load_pods": 3, "concurrency": [8]})
    job = load_job_manifest(inv, namespace="bench", placement=PLACE)
    kubernetes_validate.validate(job, "1.34.0", strict=True)  # the published batch/v1 schema, no unknown field
    assert KubernetesLauncher._model(job).spec.completion_mode == "Indexed"  # and dagster-k8s's model
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"], spec["backoffLimit"]) == ("Indexed", 3, 3, 0)
    assert "podFailurePolicy" not in spec and "podReplacementPolicy" not in spec and spec["suspend"] is True
    env = {e["name"]: e for e in spec["template"]["spec"]["containers"][0]["env"]}
    assert env["BENCHRUN_LOAD_PODS"]["value"] == "3" and env["BENCHRUN_LOAD_STORE"]["value"] == URI
    index = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    assert env["BENCHRUN_LOAD_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == index
    assert env["BENCHRUN_NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == index
    assert "controller-uid" in env["BENCHRUN_LOAD_JOB_UID"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "q"
    # the launcher renders it for such a suite, and the plain Job for the others
    launcher = KubernetesLauncher(None, None, "bench", PLACE)
    assert launcher.manifest(inv)["spec"]["completions"] == 3
    plain = serving_inv(tmp_path, {"endpoint": "http://server:8000", "concurrency": [8]})
    assert "completionMode" not in launcher.manifest(plain)["spec"]


@pytest.mark.parametrize("params,over,place,match", [
    ({"load_pods": 2.5, "endpoint": "http://s"}, {}, PLACE, r"parameters.load_pods: 2.5 must be a whole number"),
    ({"load_pods": 0, "endpoint": "http://s"}, {}, PLACE, r"from 1 to 64"),
    ({"load_pods": True, "endpoint": "http://s"}, {}, PLACE, r"must be a whole number"),
    ({"load_pods": 65, "endpoint": "http://s"}, {}, PLACE, r"from 1 to 64"),
    ({"load_pods": 2}, {}, PLACE, r"parameters.endpoint: load_pods=2 drives one server"),
    ({"load_pods": 2, "endpoint": "http://s"}, {}, Placement(queue_name="q", image="i"), r"set the launcher's outputs_uri"),
    ({"load_pods": 2, "endpoint": "http://s"}, {"argv": ("python", "-m", "benchrun.suites.gemm"), "suite": "gemm"},
     PLACE, r"only the serving suites"),
    ({"load_pods": 2, "endpoint": "http://s"}, {"nodes": 2}, PLACE, r"cannot also be a load Job"),
])
def test_a_load_job_that_cannot_work_is_refused_naming_the_field(tmp_path, params, over, place, match):
    inv = serving_inv(tmp_path, params, **over)
    with pytest.raises(BenchrunError, match=match):
        load_job_manifest(inv, namespace="bench", placement=place)


def test_load_pods_outside_a_load_job_is_refused_in_the_suite(monkeypatch):
    from benchrun.loadgen.loadpods import LoadPods

    assert LoadPods.from_env(1, {}) is None
    with pytest.raises(BenchrunError, match="load_pods=2: load pods run as one Indexed Job on the Kubernetes launcher"):
        LoadPods.from_env(2, {})
    with pytest.raises(BenchrunError, match="load_pods=2 but the load Job has 3 pods"):
        LoadPods.from_env(2, {"BENCHRUN_LOAD_PODS": "3", "BENCHRUN_LOAD_INDEX": "0"})
    assert load_pods(serving_inv(Path("/x"), {})) == 1


def test_one_saturated_worker_of_one_pod_invalidates_the_merged_point():
    """The verdict takes the worst worker, named with its pod, not a figure diluted by the others."""
    from benchrun.loadgen.config import LoadPoint, SweepConfig
    from benchrun.loadgen.runner import summarize_point
    from benchrun.loadgen.workload import parse_mix

    point = LoadPoint("closed_loop", 4)
    cfg = SweepConfig(url="http://127.0.0.1:1", model="m", mix=tuple(parse_mix("8/4")), points=(point,), requests_per_point=4)

    def row(worker: int, t: int) -> dict[str, Any]:
        return {"request_id": f"r{worker}-{t}", "worker": worker, "bucket": "8/4", "error": None, "error_kind": None,
                "ttft_ms": 1.0, "e2e_ms": 2.0, "output_tokens": 4, "input_tokens": 8, "decode_ms_per_token": 0.3,
                "token_gap_std_ms": 0.0, "token_gaps_ms": [0.3] * 3, "schedule_lag_ms": 0.0,
                "scheduled_mono_ns": t * 1_000_000, "send_mono_ns": t * 1_000_000, "end_mono_ns": t * 1_000_000 + 2_000_000}

    results = [{"worker": w, "pod": w // 2, "rows": [row(w, w)], "cpu_frac": cpu, "loop_lag_ms": [0.1], "go_late_ms": 0.0,
                "warmup_rows": 0} for w, cpu in enumerate((0.2, 0.3, 0.25, 0.97))]
    s = summarize_point([r for res in results for r in res["rows"]], point, results, cfg)[0]
    assert s["verdict"] == "invalid"
    assert any(r.startswith("client saturated: load pod 1 worker 3 used 97% of a core") for r in s["verdict_reasons"]), s["verdict_reasons"]
    results[3]["cpu_frac"], results[1]["go_late_ms"] = 0.3, 12.5
    s = summarize_point([r for res in results for r in res["rows"]], point, results, cfg)[0]
    assert not any("saturated" in r for r in s["verdict_reasons"])
    assert "load pod 0 reached the start barrier 12.5 ms after the agreed go time" in s["verdict_reasons"]


def test_pods_agree_on_one_go_time_merge_onto_one_clock_and_see_a_stop(s3_env):  # noqa: F811
    """The store protocol itself, two pods as two threads against a real S3 API (moto)."""
    import threading

    import boto3

    from benchrun.loadgen.loadpods import GO_MARGIN_S, LoadPods, Stopped

    boto3.client("s3", endpoint_url=s3_env).create_bucket(Bucket=BUCKET)
    pods = [LoadPods(k, 2, URI, RUN_ID, "job-uid-1", timeout_s=20.0) for k in (0, 1)]
    gos: dict[int, int] = {}

    def arrive(k: int, delay: float) -> None:
        import time

        time.sleep(delay)
        gos[k] = pods[k].barrier(0)

    threads = [threading.Thread(target=arrive, args=(k, 0.3 * k)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    p0, p1 = pods[0].points[0], pods[1].points[0]
    assert p0["go_wall_ns"] == p1["go_wall_ns"]  # one go time, agreed with no leader
    assert p0["go_late_ms"] == p1["go_late_ms"] == 0.0
    assert p0["waited_ms"] > 250 > p1["waited_ms"]  # pod 0 waited for pod 1
    assert abs(gos[0] - gos[1]) < 5_000_000  # one host: the same monotonic instant within 5 ms
    # pod 1's rows, stamped on a clock 7 s off pod 0's, land on pod 0's clock aligned at the go time
    pods[1].points[0]["go_mono_ns"] += 7_000_000_000
    row = {"request_id": "x", "send_mono_ns": pods[1].points[0]["go_mono_ns"] + 1_000, "write_mono_ns": None}
    pods[1].publish(0, [{"worker": 1, "rows": [row], "cpu_frac": 0.2, "loop_lag_ms": [0.1]}])
    [got] = pods[0].gather(0)
    assert got["pod"] == 1 and got["rows"][0]["send_mono_ns"] == pods[0].points[0]["go_mono_ns"] + 1_000
    assert got["rows"][0]["write_mono_ns"] is None
    # a stop by pod 0 ends pod 1 at its next barrier; a pod that never comes is named after the timeout
    pods[0].stop(0, "goodput fell")
    with pytest.raises(Stopped):
        pods[1].barrier(1)
    lone = LoadPods(0, 2, URI, RUN_ID, "job-uid-2", timeout_s=0.3)
    with pytest.raises(BenchrunError, match=r"load pod 0: the ready objects of point 0 from all 2 pods not there after 0.3 s"):
        lone.barrier(0)
    assert GO_MARGIN_S == 0.5
    from benchrun.loadgen.loadpods import go_margin_s

    assert go_margin_s({}) == 0.5 and go_margin_s({"BENCHRUN_LOAD_GO_MARGIN_S": "2"}) == 2.0
    for bad in ("0", "61", "soon"):
        with pytest.raises(BenchrunError, match="BENCHRUN_LOAD_GO_MARGIN_S"):
            go_margin_s({"BENCHRUN_LOAD_GO_MARGIN_S": bad})


# -- on the cluster harness -----------------------------------------------------------------
@pytest.fixture
def load_cluster(kcluster_factory, s3_env):  # noqa: F811
    import boto3

    boto3.client("s3", endpoint_url=s3_env).create_bucket(Bucket=BUCKET)
    # two cores shared by 3 pods x 2 workers, moto and the harness: a pod may read the last ready
    # object more than the default 0.5 s after it was written, and would rightly count as late
    cluster = kcluster_factory(host_env={"PYTHONPATH": str(ROOT), "BENCHRUN_LOAD_GO_MARGIN_S": "3"})
    cluster.create("secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "benchrun-s3"},
                               "stringData": {k: os.environ[k] for k in AWS}})
    return cluster


def _launcher(cluster):
    from kubernetes import client

    from benchrun.launch.kubernetes import KubernetesLauncher

    api = cluster.api_client()
    place = Placement(queue_name="benchrun", outputs_uri=URI, env_secret="benchrun-s3", pending_timeout_s=60.0)
    return KubernetesLauncher(client.BatchV1Api(api), client.CoreV1Api(api), "default", place, poll_s=0.1,
                              custom_api=client.CustomObjectsApi(api))


START_TOLERANCE_MS = 50.0  # first measured arrival of each pod at the server, against the others'


@pytest.mark.slow
def test_two_load_pods_share_a_point_and_merge_through_the_store(load_cluster, tmp_path):
    import pyarrow.parquet as pq

    from benchrun.loadgen.refserver import PerfModel, ServerProcess
    from benchrun.loadgen.suite import SUITE_REFSERVER_MODEL

    cluster = load_cluster
    run_dir = tmp_path / "home" / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    record = tmp_path / "server.jsonl"
    with ServerProcess(PerfModel.from_dict(SUITE_REFSERVER_MODEL), record_path=str(record)) as server:
        params = {"endpoint": server.url, "load_pods": 2, "concurrency": [4], "requests_per_point": 40, "warmup": 2,
                  "mix": "64/16", "seed": 3, "verdict": {"max_client_cpu": 0.000001}}
        inv = serving_inv(run_dir, params)
        res = _launcher(cluster).launch(inv, run_dir)
    assert res.status == "ok", res.reason
    assert cluster.errors == []
    doc = json.loads((run_dir / res.result).read_text())
    [s] = [s for s in doc["serving"] if s["bucket"] == "all"]
    # every index's records merged: 40 requests, split 20 + 20, all completed
    info = doc["context"]["loadgen"]["points"][0]
    assert info["load_pods"]["requests_by_pod"] == [20, 20]
    assert s["n_requests"] == 40 and s["n_errors"] == 0
    rows = pq.read_table(run_dir / doc["samples"]["requests"]).to_pylist()
    assert len(rows) == 40 and {r["worker"] for r in rows} == {0, 1}  # worker k: load pod k (workers: 1)
    # ...against what the server itself logged: every measured request once, from both pods
    logged = {}
    for line in record.read_text().splitlines():
        rec = json.loads(line)
        logged[rec["request_id"]] = rec
    measured = {rid: rec for rid, rec in logged.items() if "-p0-w" in rid and "-wu" not in rid}  # not warm-ups, not probes
    assert set(measured) == {r["request_id"] for r in rows}
    # the pods started together: each pod's first measured arrival at the server (kernel stamps,
    # one host) within START_TOLERANCE_MS of the other's, and no pod passed the barrier late
    firsts = [min(rec["arrival_ns"] for rid, rec in measured.items() if f"-w{w}-" in rid) for w in (0, 1)]
    assert abs(firsts[0] - firsts[1]) / 1e6 < START_TOLERANCE_MS, firsts
    assert info["load_pods"]["go_late_ms_by_pod"] == [0.0, 0.0]
    # pod 1's stamps moved onto pod 0's clock: its first send is as near the agreed go as pod 0's
    sends = [min(r["send_mono_ns"] for r in rows if r["worker"] == w) for w in (0, 1)]
    assert abs(sends[0] - sends[1]) / 1e6 < START_TOLERANCE_MS, sends
    # a saturated worker invalidates the point, named with its pod (the threshold here makes every worker saturated:
    # the reason names the worst one, as the per-worker figures say)
    cpu = info["client_cpu_by_worker"]
    worst = max(range(2), key=lambda w: cpu[w])
    assert s["verdict"] == "invalid"
    assert any(r.startswith(f"client saturated: load pod {worst} worker {worst} used") for r in s["verdict_reasons"]), s["verdict_reasons"]
    # every pod's log and files came back by key; pod 1 handed its rows to pod 0 and says so
    assert "handed to pod 0" in (run_dir / inv.node_log_relpath(1)).read_text()
    pod1 = json.loads((run_dir / inv.node_result_relpath(1)).read_text())
    assert pod1["status"] == "ok" and pod1["context"]["load_pods"]["index"] == 1 and "serving" not in pod1
    timeline = json.loads((run_dir / f"raw/{RUN_ID}_serving_sweep_r1_pod.json").read_text())
    assert [p["index"] for p in timeline["load_pods"]] == [0, 1]


@pytest.mark.slow
def test_three_pods_of_two_workers_split_an_open_loop_point(load_cluster, tmp_path):
    """Global worker k*2+w on pod k: each pod's requests (one nonce per pod in the server's log)
    come from its own two workers, 6 Poisson processes of rate/6 started at one go time."""
    import pyarrow.parquet as pq

    from benchrun.loadgen.refserver import PerfModel, ServerProcess
    from benchrun.loadgen.suite import SUITE_REFSERVER_MODEL

    run_dir = tmp_path / "home" / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    record = tmp_path / "server.jsonl"
    with ServerProcess(PerfModel.from_dict(SUITE_REFSERVER_MODEL), record_path=str(record)) as server:
        params = {"endpoint": server.url, "load_pods": 3, "workers": 2, "rates": [30], "requests_per_point": 36,
                  "warmup": 6, "mix": "32/8", "seed": 5}
        inv = serving_inv(run_dir, params)
        res = _launcher(load_cluster).launch(inv, run_dir)
    assert res.status == "ok", res.reason
    doc = json.loads((run_dir / res.result).read_text())
    info = doc["context"]["loadgen"]["points"][0]
    assert info["load_pods"]["requests_by_pod"] == [12, 12, 12]
    rows = pq.read_table(run_dir / doc["samples"]["requests"]).to_pylist()
    assert len(rows) == 36 and sorted({r["worker"] for r in rows}) == [0, 1, 2, 3, 4, 5]
    by_nonce: dict[str, set[int]] = {}
    for r in rows:
        by_nonce.setdefault(r["request_id"].split("-p0-")[0], set()).add(r["worker"])
    assert sorted(map(sorted, by_nonce.values())) == [[0, 1], [2, 3], [4, 5]]
    logged = [json.loads(line) for line in record.read_text().splitlines()]
    measured = [rec for rec in logged if "-p0-w" in rec["request_id"] and "-wu" not in rec["request_id"]]
    assert sorted(rec["request_id"] for rec in measured) == sorted(r["request_id"] for r in rows)
    # one schedule origin: on pod 0's clock no pod schedules a request before the agreed go time, and
    # every pod's sends overlap every other's (the load was offered together, not pod after pod)
    go = info["load_pods"]["go"]["go_mono_ns"]
    assert min(r["scheduled_mono_ns"] for r in rows) >= go - 1_000_000
    spans = [(min(r["send_mono_ns"] for r in rows if r["worker"] // 2 == k),
              max(r["send_mono_ns"] for r in rows if r["worker"] // 2 == k)) for k in range(3)]
    assert max(a for a, _ in spans) < min(b for _, b in spans), spans
    assert info["load_pods"]["go_late_ms_by_pod"] == [0.0, 0.0, 0.0]
    assert load_cluster.errors == []


@pytest.mark.slow
def test_a_load_pod_lost_mid_point_fails_the_replicate_naming_it(load_cluster, tmp_path):
    import threading

    from benchrun.loadgen.refserver import PerfModel, ServerProcess
    from benchrun.loadgen.suite import SUITE_REFSERVER_MODEL

    run_dir = tmp_path / "home" / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    out: dict[str, Any] = {}
    with ServerProcess(PerfModel.from_dict(SUITE_REFSERVER_MODEL)) as server:
        params = {"endpoint": server.url, "load_pods": 2, "concurrency": [2], "duration_s": 30, "mix": "32/8"}
        inv = serving_inv(run_dir, params)
        t = threading.Thread(target=lambda: out.setdefault("res", _launcher(load_cluster).launch(inv, run_dir)))
        t.start()

        def pod1_running():
            return [p for p in load_cluster.list("pods")
                    if p["metadata"]["annotations"].get("batch.kubernetes.io/job-completion-index") == "1"
                    and p["status"].get("phase") == "Running"]

        [pod1] = load_cluster.wait_for(pod1_running, timeout=60, what="load pod 1 running")
        load_cluster.oom_kill(pod1["metadata"]["name"])
        t.join(120)
    res = out["res"]
    assert res.status == "failed"
    assert res.reason.startswith("load pod 1 (") and "OOMKilled" in res.reason, res.reason
