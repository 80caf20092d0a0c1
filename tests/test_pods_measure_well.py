"""Suite pods that measure well: Guaranteed QoS with whole CPUs in every grade, GPUs for GPU
suites, a gang's pods on distinct nodes, and a pod deadline that leaves room for the pull."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchrun.errors import BenchrunError
from benchrun.launch.podspec import SUITE_RESOURCES, Placement, job_manifest, qos_class, suite_module
from conftest import ROOT
from crdschemas import crd_validator
from helpers import tiny_spec
from test_launch_kubernetes_harness import RUN_ID, launcher_for, make_inv, script_for


def pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj["kind"] == "Job":
        return [obj["spec"]["template"]["spec"]]
    return [rj["template"]["spec"]["template"]["spec"] for rj in obj["spec"]["replicatedJobs"]]


def render(path: Path) -> list[dict[str, Any]]:
    from benchrun.launch.render import render_objects

    os.environ["BENCHRUN_LAUNCHER_KIND"] = "kubernetes"
    try:
        return render_objects(path)
    finally:
        del os.environ["BENCHRUN_LAUNCHER_KIND"]


@pytest.mark.slow
def test_every_rendered_pod_is_guaranteed_with_whole_cpus(bench_home, canary_doc):
    """Suites with no cpu/memory anywhere (the canary's) and a gang: every pod Guaranteed,
    whole CPUs, requests = limits; a CUDA suite gets nvidia.com/gpu; every object validates."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    suites = {s["name"]: s for layer in canary_doc["spec"]["layers"] for s in layer["suites"]}
    gemm, fio, allreduce = suites["gemm"], suites["fio"], suites["allreduce"]
    gemm.setdefault("parameters", {})["device"] = "cuda"
    allreduce.update(nodes=2, gpusPerNode=8)  # the canary's suite as a 2-node gang
    allreduce.get("parameters", {}).pop("world_size", None)  # a gang's is nodes x gpusPerNode (refused)
    tiny_spec(canary_doc, [gemm, fio, allreduce])
    path = bench_home / "canary.yaml"
    path.write_text(yaml.safe_dump(canary_doc))
    objs = render(path)
    jobset = crd_validator("jobset.x-k8s.io_jobsets.yaml", "v1alpha2")
    version = kubernetes_validate.latest_version()
    kinds, validated = set(), set()
    for obj in objs:
        kinds.add(obj["kind"])
        suite = obj["metadata"]["labels"]["benchrun.dev/suite"]
        if suite not in validated:  # one replicate per suite: the others differ in names only
            validated.add(suite)
            if obj["kind"] == "Job":
                kubernetes_validate.validate(obj, version, strict=True)
            else:
                jobset.validate(obj)
        for spec in pod_specs(obj):
            assert qos_class(spec) == "Guaranteed", obj["metadata"]["name"]
            [c] = spec["containers"]
            res = c["resources"]
            assert res["requests"] == res["limits"]
            assert str(int(res["limits"]["cpu"])) == res["limits"]["cpu"]  # whole CPUs
    assert kinds == {"Job", "JobSet"}
    gemm = [o for o in objs if o["metadata"]["labels"]["benchrun.dev/suite"] == "gemm" and o["metadata"]["labels"]["benchrun.dev/replicate"] == "1"][0]
    limits = pod_specs(gemm)[0]["containers"][0]["resources"]["limits"]
    assert limits == {"cpu": SUITE_RESOURCES["gemm"][0], "memory": SUITE_RESOURCES["gemm"][1], "nvidia.com/gpu": "1"}
    gang = [o for o in objs if o["kind"] == "JobSet"][0]
    assert pod_specs(gang)[0]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"


def test_cpu_must_be_whole_and_cuda_needs_a_gpu(tmp_path):
    run_dir = tmp_path / "run"
    inv = make_inv(run_dir, cpu="500m")
    with pytest.raises(BenchrunError, match=r"suites\[tiny\]\.cpu: '500m' is not a whole number of CPUs"):
        job_manifest(inv, namespace="bench", placement=Placement(queue_name="q"))
    with pytest.raises(BenchrunError, match=r"launcher cpu \(BENCHRUN_LAUNCHER_CPU\): '1.5'"):
        job_manifest(make_inv(run_dir), namespace="bench", placement=Placement(queue_name="q", cpu="1.5"))
    job = job_manifest(make_inv(run_dir, cpu="2000m", memory="1Gi"), namespace="bench", placement=Placement(queue_name="q"))
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "2", "memory": "1Gi"}
    cuda = make_inv(run_dir, gpus=0, parameters={"device": "cuda"})
    with pytest.raises(BenchrunError, match=r"suites\[tiny\]\.gpus: the suite asks for CUDA"):
        job_manifest(cuda, namespace="bench", placement=Placement(queue_name="q"))
    assert suite_module(make_inv(run_dir, argv=("python", "-m", "benchrun.suites.fio"))) == "fio"


@pytest.mark.slow
def test_the_pod_deadline_leaves_room_for_the_pull(kcluster_factory, tmp_path):
    """A 2.5 s pull and a 2 s suite timeout: the pod's startTime is before the pull, so a pod
    deadline of the bare timeout kills it before its container starts. Timeout + pull
    allowance lets it run; the orchestrator still times the suite from its start."""
    cluster = kcluster_factory(host_env={"PYTHONPATH": str(ROOT)}, pull_seconds=2.5)
    (tmp_path / "home" / "runs" / RUN_ID).mkdir(parents=True)
    run_dir = tmp_path / "home" / "runs" / RUN_ID
    res = launcher_for(cluster).launch(make_inv(run_dir, timeout_s=2.0), run_dir)
    assert res.status == "ok", res.reason
    [pod] = [v for v in cluster.history("pods", res.messages[0]["pod_name"]) if v and v["status"].get("containerStatuses")
             and "terminated" in v["status"]["containerStatuses"][0]["state"]][-1:]
    started = pod["status"]["containerStatuses"][0]["state"]["terminated"]["startedAt"]
    from kharness.control import _epoch

    assert _epoch(started) - _epoch(pod["status"]["startTime"]) >= 2  # the pull counted from startTime
    assert pod["status"]["qosClass"] == "Guaranteed"
    # the orchestrator's own timeout counts from the container's start
    res2 = launcher_for(cluster).launch(make_inv(run_dir, replicate=2, code="import time; time.sleep(30)",
                                                 timeout_s=1.0), run_dir)
    assert res2.status == "failed" and "timed out after 1s" in res2.reason


def test_a_gangs_pods_are_on_distinct_nodes(kcluster_factory, tmp_path):
    """Two 8-GPU nodes, a 2-node gang asking for one GPU each: the packing scheduler puts
    both pods on node-a unless the pods' anti-affinity forbids it."""
    cluster = kcluster_factory(host_env={"PYTHONPATH": str(ROOT)})
    home = tmp_path / "home"
    (home / "runs" / RUN_ID).mkdir(parents=True)
    cluster.bind_pvc("home", home)
    run_dir = home / "runs" / RUN_ID
    code = script_for(1, before=textwrap.dedent("""
        import os, sys
        if os.environ["NODE_RANK"] != "0":
            sys.exit(0)
    """))
    inv = make_inv(run_dir, code=code, nodes=2, ranks_per_node=1, gpus_per_node=1)
    res = launcher_for(cluster, run_volume_claim="home", run_home=str(home)).launch(inv, run_dir)
    assert res.status == "ok", res.reason
    nodes = [n["node_name"] for n in res.messages[0]["nodes"]]
    assert len(nodes) == 2 and len(set(nodes)) == 2, nodes


def test_the_harness_scheduler_packs_unless_anti_affinity_forbids(kcluster):
    """Without a rule two pods share the first node; with required anti-affinity they spread,
    and a third with no node left is Unschedulable saying why."""
    from kubernetes import client

    core = client.CoreV1Api(kcluster.api_client())

    def pod(name: str, anti: bool) -> dict[str, Any]:
        spec: dict[str, Any] = {"containers": [{"name": "c", "image": "registry.invalid/x:1"}]}
        if anti:
            spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"gang": "g"}}, "topologyKey": "kubernetes.io/hostname"}]}}
        return {"metadata": {"name": name, "labels": {"gang": "g" if anti else "free"}}, "spec": spec}

    for name in ("free-0", "free-1"):
        core.create_namespaced_pod("default", pod(name, False))
    for name in ("gang-0", "gang-1", "gang-2"):
        core.create_namespaced_pod("default", pod(name, True))

    def node(name: str) -> str | None:
        return ((kcluster.get("pods", name) or {}).get("spec") or {}).get("nodeName")

    kcluster.wait_for(lambda: all(node(n) for n in ("free-0", "free-1", "gang-0", "gang-1")), what="four pods bound")
    assert node("free-0") == node("free-1") == "node-a"
    assert {node("gang-0"), node("gang-1")} == {"node-a", "node-b"}
    msg = kcluster.wait_for(lambda: [c.get("message") for c in (kcluster.get("pods", "gang-2") or {})["status"].get(
        "conditions") or [] if c["type"] == "PodScheduled" and c["status"] == "False"], what="gang-2 unschedulable")[0]
    assert "2 node(s) didn't match pod anti-affinity rules" in msg
    assert kcluster.get("pods", "free-0")["status"]["qosClass"] == "BestEffort"
