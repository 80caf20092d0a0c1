"""Outputs back through the artifact store (launcher outputs_uri): on the cluster harness, with a
real S3 API server (moto) on loopback and no shared volume; and a pod log the kubelet rotated."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from benchrun.errors import BenchrunError
from benchrun.launch.podout import safe_rel
from benchrun.launch.podspec import Placement, job_manifest
from conftest import ROOT
from test_launch_kubernetes_harness import RUN_ID, launcher_for, make_inv, script_for
from test_store_helpers import s3_env  # noqa: F401  (fixture)

BUCKET = "benchrun-artifacts"
URI = f"s3://{BUCKET}/benchrun"
AWS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "BENCHRUN_S3_ENDPOINT_URL")


@pytest.fixture
def store_cluster(kcluster_factory, s3_env):  # noqa: F811
    """A harness cluster with no run volume; the pods' S3 credentials come from a Secret
    (launcher env_secret), as deploy/ gives them."""
    import boto3

    boto3.client("s3", endpoint_url=s3_env).create_bucket(Bucket=BUCKET)

    def make(**kw):
        cluster = kcluster_factory(host_env={"PYTHONPATH": str(ROOT)}, **kw)
        cluster.create("secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "benchrun-s3"},
                                   "stringData": {k: os.environ[k] for k in AWS}})
        return cluster

    return make


def writes_calls(values: str = "[1, 2]") -> str:
    return script_for(1, samples={"calls": f"raw/{RUN_ID}_tiny_r1_calls.json"}, before=textwrap.dedent(f"""
        import os, pathlib
        p = pathlib.Path(os.environ["BENCHRUN_RUN_DIR"], "raw"); p.mkdir(parents=True, exist_ok=True)
        (p / "{RUN_ID}_tiny_r1_calls.json").write_text("{values}")
        (p / "{RUN_ID}_tiny_r1_trace.bin").write_bytes(bytes(range(256)) * 64)
    """))


def test_outputs_come_back_through_the_store_without_a_volume(store_cluster, tmp_path):
    cluster = store_cluster()
    run_dir = tmp_path / "home" / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    res = launcher_for(cluster, outputs_uri=URI, env_secret="benchrun-s3").launch(
        make_inv(run_dir, code=writes_calls()), run_dir)
    assert res.status == "ok", res.reason
    assert json.loads((run_dir / f"raw/{RUN_ID}_tiny_r1_calls.json").read_text()) == [1, 2]
    assert (run_dir / f"raw/{RUN_ID}_tiny_r1_trace.bin").read_bytes() == bytes(range(256)) * 64
    log_text = (run_dir / res.log).read_text()
    assert "hello from the pod" in log_text and "a line on stderr" in log_text
    import boto3

    keys = {o["Key"] for o in boto3.client("s3", endpoint_url=os.environ["BENCHRUN_S3_ENDPOINT_URL"]).list_objects_v2(Bucket=BUCKET)["Contents"]}
    base = f"benchrun/pods/{RUN_ID}/{res.pod_uid}/"
    assert {base + "index.json", base + "log", base + f"files/raw/{RUN_ID}_tiny_r1_calls.json"} <= keys
    assert cluster.errors == []


def test_a_pod_without_store_credentials_fails_naming_the_fix(store_cluster, tmp_path):
    cluster = store_cluster()
    run_dir = tmp_path / "home" / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    res = launcher_for(cluster, outputs_uri="s3://no-such-bucket/x", env_secret="benchrun-s3").launch(
        make_inv(run_dir, code=writes_calls()), run_dir)
    assert res.status == "failed"
    assert res.reason.startswith(f"declared outputs did not arrive in the run directory: raw/{RUN_ID}_tiny_r1_calls.json "
                                 "(the pod uploaded no outputs to s3://no-such-bucket/x/pods/"), res.reason
    assert "launcher env_secret" in res.reason


NOISY = textwrap.dedent("""
    import sys
    print('{"__dagster_pipes_version": "0.1", "method": "report_custom_message", "params": '
          '{"payload": {"kind": "progress", "step": 1}}}', flush=True)
""")
AFTER = "\nfor i in range(400):\n    print('noise line %04d ' % i + 'x' * 40, flush=True)\n"


@pytest.mark.parametrize("through_store", [False, True])
def test_results_and_pipes_messages_survive_log_rotation(store_cluster, tmp_path, through_store):
    """The kubelet rotates a container log at a size (10 MiB; 4 KiB here): the API then serves
    only the newest file. A result line and Pipes messages printed before 20 KB of output are
    lost from it; through the artifact store the whole log comes back."""
    cluster = store_cluster(log_max_bytes=4096)
    run_dir = tmp_path / "home" / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    place = {"outputs_uri": URI, "env_secret": "benchrun-s3"} if through_store else {}
    res = launcher_for(cluster, **place).launch(make_inv(run_dir, code=script_for(1, before=NOISY) + AFTER), run_dir)
    pod_log = cluster.scratch(res.messages[0]["pod_name"]) / "logs"
    assert sorted(p.name for p in pod_log.iterdir())[:2] == ["suite.log", "suite.log.1"]  # it rotated
    if not through_store:  # the defect: what the API serves after a rotation has no result line
        assert res.status == "failed" and "printed no __benchrun_result__ line" in res.reason, res.reason
        return
    assert res.status == "ok", res.reason
    assert res.metrics[0]["value"] == 3.5
    assert {"kind": "progress", "step": 1} in res.messages
    log_text = (run_dir / res.log).read_text()
    assert "hello from the pod" in log_text and "noise line 0399" in log_text


def test_manifest_wraps_the_suite_and_refuses_two_output_paths(tmp_path):
    inv = make_inv(tmp_path, code="print(1)")
    job = job_manifest(inv, namespace="default", placement=Placement(queue_name="q", outputs_uri=URI, image="i"))
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == ["python"]
    assert c["args"][:6] == ["-m", "benchrun.launch.podout", "--run-dir", str(tmp_path), "--to", URI]
    assert c["args"][6:] == ["--", "python", "-c", "print(1)"]
    with pytest.raises(BenchrunError, match="outputs_uri and run_volume_claim"):
        job_manifest(inv, namespace="default", placement=Placement(
            queue_name="q", outputs_uri=URI, run_volume_claim="v", run_home=str(tmp_path.parent), image="i"))
    with pytest.raises(BenchrunError, match=r"outputs_uri 'http://x': use s3://bucket/prefix"):
        job_manifest(inv, namespace="default", placement=Placement(queue_name="q", outputs_uri="http://x", image="i"))


def test_only_plain_paths_under_the_output_dirs_come_back():
    assert safe_rel("raw/a.json") and safe_rel("structured/x/y.parquet") and safe_rel("figures/f.png")
    for bad in ("manifest.json", "status.json", "../x", "raw/../../etc/passwd", "/raw/a", "raw//a", "reports/r.html",
                "raw/./a", "raw\\a", ""):
        assert safe_rel(bad) is None, bad


def test_podout_exits_with_the_suites_code_and_uploads_a_failed_suites_files(s3_env, tmp_path, monkeypatch):  # noqa: F811
    import boto3

    from benchrun.launch import podout

    s3 = boto3.client("s3", endpoint_url=s3_env)
    s3.create_bucket(Bucket=BUCKET)
    monkeypatch.setenv("BENCHRUN_RUN_ID", RUN_ID)
    monkeypatch.setenv("BENCHRUN_POD_UID", "uid-1")
    run_dir = tmp_path / "run"
    code = ("import pathlib; p = pathlib.Path(%r) / 'raw'; p.mkdir(parents=True); (p / 'partial.txt').write_text('so far');"
            "print('dying'); raise SystemExit(3)" % str(run_dir))
    import sys

    assert podout.main(["--run-dir", str(run_dir), "--to", URI, "--", sys.executable, "-c", code]) == 3
    index = json.loads(s3.get_object(Bucket=BUCKET, Key="benchrun/pods/%s/uid-1/index.json" % RUN_ID)["Body"].read())
    assert index["exit_code"] == 3 and list(index["files"]) == ["raw/partial.txt"]
    assert s3.get_object(Bucket=BUCKET, Key="benchrun/pods/%s/uid-1/log" % RUN_ID)["Body"].read() == b"dying\n"


def _pod_uploaded(s3_env, tmp_path, monkeypatch, uid: str, files: dict[str, str]):  # noqa: F811
    """A pod (podout around a suite) that wrote ``raw/<name>`` files and uploaded them; the S3 client."""
    import sys

    import boto3

    from benchrun.launch import podout

    s3 = boto3.client("s3", endpoint_url=s3_env)
    s3.create_bucket(Bucket=BUCKET)
    monkeypatch.setenv("BENCHRUN_RUN_ID", RUN_ID)
    monkeypatch.setenv("BENCHRUN_POD_UID", uid)
    pod_dir = tmp_path / "pod"
    code = f"import pathlib; p = pathlib.Path({str(pod_dir)!r}) / 'raw'; p.mkdir(parents=True)\n" + "".join(
        f"(p / {name!r}).write_text({text!r})\n" for name, text in files.items())
    assert podout.main(["--run-dir", str(pod_dir), "--to", URI, "--", sys.executable, "-c", code]) == 0
    return s3


def test_a_tampered_object_is_not_taken(s3_env, tmp_path, monkeypatch):  # noqa: F811
    from benchrun.launch.k8s_outputs import fetch_outputs

    s3 = _pod_uploaded(s3_env, tmp_path, monkeypatch, "uid-2", {"a.txt": "A"})
    s3.put_object(Bucket=BUCKET, Key=f"benchrun/pods/{RUN_ID}/uid-2/files/raw/a.txt", Body=b"B")
    run_dir = tmp_path / "run"
    note = fetch_outputs(URI, RUN_ID, "uid-2", run_dir, run_dir / "raw" / "r.log")
    assert note is not None and "is not the index's" in note
    assert not (run_dir / "raw" / "a.txt").exists()  # nothing half-taken
    assert not (run_dir / "raw").exists() or [p.name for p in (run_dir / "raw").iterdir()] == []


def test_an_index_entry_without_its_sha256_is_not_taken(s3_env, tmp_path, monkeypatch):  # noqa: F811
    """Found in review: a file whose index entry had no sha256 (or a null entry) came back unchecked."""
    import json

    from benchrun.launch.k8s_outputs import fetch_outputs

    s3 = _pod_uploaded(s3_env, tmp_path, monkeypatch, "uid-5", {"a.txt": "A"})
    key = f"benchrun/pods/{RUN_ID}/uid-5/index.json"
    index = json.loads(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    for rel in index["files"]:
        index["files"][rel] = None
    s3.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(index).encode())
    s3.put_object(Bucket=BUCKET, Key=f"benchrun/pods/{RUN_ID}/uid-5/files/raw/a.txt", Body=b"B")
    run_dir = tmp_path / "run"
    note = fetch_outputs(URI, RUN_ID, "uid-5", run_dir, run_dir / "raw" / "r.log")
    assert note is not None and "gives no sha256" in note  # was: None, and the altered file taken
    assert not (run_dir / "raw" / "a.txt").exists()


def test_outputs_that_do_not_all_come_back_leave_none_and_say_so(s3_env, tmp_path, monkeypatch):  # noqa: F811
    """Found in review: with three files uploaded and the second altered, the first stayed in the run
    directory, the others and the pod's log did not, and the replicate read ok. Now none is kept, and
    the note starts with INCOMPLETE, which fails the replicate (KubernetesLauncher._settle)."""
    from benchrun.launch.k8s_outputs import INCOMPLETE, fetch_outputs

    s3 = _pod_uploaded(s3_env, tmp_path, monkeypatch, "uid-3", {f"{n}.txt": n for n in "abc"})
    s3.put_object(Bucket=BUCKET, Key=f"benchrun/pods/{RUN_ID}/uid-3/files/raw/b.txt", Body=b"changed")
    run_dir = tmp_path / "run"
    note = fetch_outputs(URI, RUN_ID, "uid-3", run_dir, run_dir / "raw" / "r.log")
    assert note is not None and note.startswith(INCOMPLETE) and "raw/b.txt" in note
    assert not (run_dir / "raw").exists() or sorted(p.name for p in (run_dir / "raw").iterdir()) == []
    assert not any(p.name.startswith(".scratch-") for p in run_dir.iterdir())  # the staging folder is gone
    s3.put_object(Bucket=BUCKET, Key=f"benchrun/pods/{RUN_ID}/uid-3/files/raw/b.txt", Body=b"b")
    assert fetch_outputs(URI, RUN_ID, "uid-3", run_dir, run_dir / "raw" / "r.log") is None
    assert sorted(p.name for p in (run_dir / "raw").iterdir()) == ["a.txt", "b.txt", "c.txt", "r.log"]


def test_a_publication_layer_pod_fetches_the_pinned_plan_first(tmp_path):
    from benchrun.launch.podspec import layer_job_manifest

    image = "registry.example/bench@sha256:" + "b" * 64
    invs = [make_inv(tmp_path, replicate=k, code="print(1)", image=image, cpu="1", memory="1Gi") for k in (1, 2)]
    job = layer_job_manifest(invs, namespace="default", placement=Placement(
        queue_name="q", outputs_uri=URI, publication_grade=True, node_selector={"pool": "bench"}))
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:8] == ["-m", "benchrun.launch.podout", "--run-dir", str(tmp_path), "--to", URI,
                        "--input", f"structured/{RUN_ID}_plan.json"]
    assert args[8:11] == ["--", "python", "-m"] and "benchrun.launch.inpod" in args


def test_a_publication_layer_comes_back_through_the_store(store_cluster, tmp_path):
    """No run volume: the layer pod fetches the pinned plan, runs every replicate, and its results,
    logs and result documents come back by key when it ends."""
    from kharness import Node

    cluster = store_cluster(nodes=[Node("gpu-a", labels={"pool": "bench"})])
    run_dir = tmp_path / "home" / "runs" / RUN_ID
    image = "registry.example/bench@sha256:" + "b" * 64
    invs = [make_inv(run_dir, replicate=k, code=script_for(k), image=image, cpu="1", memory="1Gi") for k in (1, 2)]
    (run_dir / "structured").mkdir(parents=True)
    (run_dir / "structured" / f"{RUN_ID}_plan.json").write_text(json.dumps([i.to_json() for i in invs]))
    launcher = launcher_for(cluster, outputs_uri=URI, env_secret="benchrun-s3", publication_grade=True,
                            node_selector={"pool": "bench"})
    results = launcher.launch_layer(invs, run_dir)
    assert [(r.replicate, r.status) for r in results] == [(1, "ok"), (2, "ok")], [r.reason for r in results]
    for r in results:
        assert "hello from the pod" in (run_dir / r.log).read_text()
        assert json.loads((run_dir / r.result).read_text())["replicate"] == r.replicate
    assert cluster.errors == []


def test_a_publication_layer_relaunched_through_the_store_sets_the_earlier_files_aside(store_cluster, tmp_path):
    """Found in review: without a run volume the layer pod sets aside only what is in its own empty run
    directory, and its files come back at the replicates' own names: what an earlier materialization of
    the layer left here stayed, its contended attempt read as this launch's rerun. The launcher now sets
    it aside before the Job, the contended attempts with it, its document naming their new names."""
    from kharness import Node

    cluster = store_cluster(nodes=[Node("gpu-a", labels={"pool": "bench"})])
    run_dir = tmp_path / "home" / "runs" / RUN_ID
    image = "registry.example/bench@sha256:" + "b" * 64
    inv = make_inv(run_dir, replicate=1, code=script_for(1), image=image, cpu="1", memory="1Gi")
    (run_dir / "structured").mkdir(parents=True)
    (run_dir / "structured" / f"{RUN_ID}_plan.json").write_text(json.dumps([inv.to_json()]))
    raw, pre = run_dir / "raw", f"{RUN_ID}_tiny_r1"
    raw.mkdir()
    (raw / f"{pre}_contended2.json").write_text(json.dumps(
        {"status": "ok", "samples": {"requests": f"raw/{pre}_contended2_requests.parquet"}}))
    (raw / f"{pre}_contended2_requests.parquet").write_bytes(b"earlier contended")
    (raw / f"{pre}.log").write_text("the earlier materialization's log\n")
    (run_dir / inv.result_relpath()).write_text(json.dumps(
        {"status": "ok", "contention_rerun": {"attempt": 3, "earlier": [f"raw/{pre}_contended2.json"]}}))
    launcher = launcher_for(cluster, outputs_uri=URI, env_secret="benchrun-s3", publication_grade=True,
                            node_selector={"pool": "bench"})
    [res] = launcher.launch_layer([inv], run_dir)
    assert res.status == "ok", res.reason
    assert not list(raw.glob(f"{pre}_contended*"))  # none read as this launch's rerun
    assert json.loads((raw / f"{pre}_earlier1_contended2.json").read_text())["samples"] == {
        "requests": f"raw/{pre}_earlier1_contended2_requests.parquet"}
    assert (raw / f"{pre}_earlier1_contended2_requests.parquet").read_bytes() == b"earlier contended"
    earlier = json.loads((raw / f"{pre}_earlier1.json").read_text())
    assert earlier["contention_rerun"]["earlier"] == [f"raw/{pre}_earlier1_contended2.json"]
    assert (raw / f"{pre}_earlier1.log").read_text() == "the earlier materialization's log\n"
    assert "contention_rerun" not in json.loads((run_dir / res.result).read_text())
    assert "hello from the pod" in (run_dir / res.log).read_text()
    assert cluster.errors == []


def test_a_gangs_nodes_each_bring_their_files_back(store_cluster, tmp_path):
    cluster = store_cluster()
    run_dir = tmp_path / "home" / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    code = script_for(1, before=textwrap.dedent(f"""
        import os, pathlib
        rank = int(os.environ["NODE_RANK"])
        raw = pathlib.Path(os.environ["BENCHRUN_RUN_DIR"], "raw"); raw.mkdir(parents=True, exist_ok=True)
        (raw / ("{RUN_ID}_tiny_r1_rank%d.txt" % rank)).write_text("rank %d" % rank)
        print("node", rank, flush=True)
        if rank:
            raise SystemExit(0)
    """))
    inv = make_inv(run_dir, code=code, nodes=2, ranks_per_node=1)
    res = launcher_for(cluster, outputs_uri=URI, env_secret="benchrun-s3").launch(inv, run_dir)
    assert res.status == "ok", res.reason
    for rank in (0, 1):
        assert (run_dir / f"raw/{RUN_ID}_tiny_r1_rank{rank}.txt").read_text() == f"rank {rank}"
        assert f"node {rank}" in (run_dir / inv.node_log_relpath(rank)).read_text()
