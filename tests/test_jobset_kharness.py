"""A 2-node gang as a JobSet on the cluster harness: one Kueue workload, two indexed pods,
each with its own node rank and rank 0's stable hostname as MASTER_ADDR."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from kubernetes import client

from benchrun.launch.jobset import jobset_manifest, pod_hostname
from benchrun.launch.podspec import Placement
from benchrun.plan import gang_mark, plan_run
from benchrun.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
SHOW_ENV = ("import json, os, socket, sys; print(json.dumps({'argv': sys.argv[1:], 'hostname': socket.gethostname(), "
            "**{k: os.environ.get(k) for k in ('NODE_RANK', 'RANK', 'MASTER_ADDR', 'MASTER_PORT', 'WORLD_SIZE', "
            "'LOCAL_WORLD_SIZE', 'BENCHRUN_NODE_NAME', 'HOSTNAME')}}))")


@pytest.mark.slow
def test_two_node_gang_runs_as_one_jobset_under_one_workload(kcluster) -> None:
    plans = plan_run(load_spec(ROOT / "specs/local/training.yaml").run, "local-training-20261201000000-abcdef12",
                     Path("/benchrun/run"))
    inv = next(i for p in plans for i in p.invocations if i.suite == "training" and i.replicate == 1)
    inv = replace(inv, argv=(sys.executable, "-c", SHOW_ENV, "--hosts", gang_mark("HOSTS")))
    js = jobset_manifest(inv, namespace="default", placement=Placement(queue_name="benchrun"))
    name = js["metadata"]["name"]
    client.CustomObjectsApi(kcluster.api_client()).create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", js)
    from kharness import has_condition

    done = kcluster.wait_for(lambda: has_condition(kcluster.get("jobsets", name), "Completed") and kcluster.get("jobsets", name))
    assert done["status"]["replicatedJobsStatus"][0]["succeeded"] == 1
    [wl] = kcluster.list("workloads")
    assert has_condition(wl, "Admitted") and sum(ps["count"] for ps in wl["spec"]["podSets"]) == 2
    [job] = kcluster.list("jobs")
    assert (job["spec"]["parallelism"], job["spec"]["completionMode"]) == (2, "Indexed")
    core = client.CoreV1Api(kcluster.api_client())
    pods = kcluster.list("pods")
    assert len(pods) == 2
    seen = {}
    for pod in pods:
        # raw bytes: the client would parse a JSON log line into a dict and hand back its repr
        text = core.read_namespaced_pod_log(pod["metadata"]["name"], "default", _preload_content=False).data.decode()
        out = json.loads(text.strip().splitlines()[-1])
        seen[out["NODE_RANK"]] = out
        assert out["BENCHRUN_NODE_NAME"] == pod["spec"]["nodeName"]
    assert sorted(seen) == ["0", "1"]
    master = pod_hostname(name, 0)
    for rank, out in seen.items():
        assert out["RANK"] == rank and out["WORLD_SIZE"] == "2" and out["LOCAL_WORLD_SIZE"] == "1"
        assert out["MASTER_ADDR"] == master and out["MASTER_PORT"] == "29500"
        assert out["HOSTNAME"] == pod_hostname(name, int(rank)).split(".")[0]
        assert out["argv"] == ["--hosts", f"{pod_hostname(name, 0)},{pod_hostname(name, 1)}"]
    assert kcluster.errors == []


def test_an_rdma_gang_is_admitted_only_by_a_clusterqueue_that_covers_the_rdma_device(kcluster_factory) -> None:
    """`network: rdma` asks every pod for rdma/ib: Kueue admits the gang only where a resource
    group of the ClusterQueue covers it (else "resource rdma/ib unavailable in ClusterQueue",
    and no preemption helps), as deploy/'s ClusterQueues do."""
    from kharness import GPU, Node, has_condition

    plans = plan_run(load_spec(ROOT / "specs/local/training.yaml").run, "local-training-20261201000000-abcdef12",
                     Path("/benchrun/run"))
    inv = next(i for p in plans for i in p.invocations if i.suite == "training" and i.replicate == 1)
    inv = replace(inv, network="rdma", argv=(sys.executable, "-c", "pass"))
    js = jobset_manifest(inv, namespace="default", placement=Placement(queue_name="benchrun"))
    assert js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0][
        "resources"]["requests"]["rdma/ib"] == "1"
    covered = {"cpu": "256", "memory": "2048Gi", GPU: "16"}
    for quota, admitted in ((covered, False), ({**covered, "rdma/ib": "4"}, True)):
        nodes = [Node(f"node-{i}", capacity={"cpu": "256", "memory": "2048Gi", GPU: "8", "rdma/ib": "1",
                                             "pods": "110"}) for i in "ab"]
        c = kcluster_factory(queues={"benchrun": quota}, nodes=nodes)
        client.CustomObjectsApi(c.api_client()).create_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", js)
        [wl] = c.wait_for(lambda: [w for w in c.list("workloads") if (w.get("status") or {}).get("conditions")],
                          what="Kueue's decision")
        assert has_condition(wl, "Admitted") is admitted, wl["status"]
        if not admitted:
            [cond] = wl["status"]["conditions"]
            assert (cond["type"], cond["status"], cond["reason"]) == ("QuotaReserved", "False", "Pending")
            assert cond["message"] == "couldn't assign flavors to pod set node: resource rdma/ib unavailable in ClusterQueue"
        assert c.errors == []
