"""A gang (one JobSet) disrupted part-way, against the cluster harness: Kueue preempting it after a
node had finished, and a node drained while its peers run (review 2026-12-08)."""

from __future__ import annotations

import textwrap

from conftest import ROOT
from test_launch_kubernetes_harness import RUN_ID, launcher_for, make_inv, script_for

INDEX = "batch.kubernetes.io/job-completion-index"


def _gang(kcluster_factory, tmp_path, before: str, **placement):
    home = tmp_path / "home"
    run_dir = home / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    cluster = kcluster_factory(host_env={"PYTHONPATH": str(ROOT)})
    cluster.bind_pvc("home", home)
    launcher = launcher_for(cluster, run_volume_claim="home", run_home=str(home), **placement)
    inv = make_inv(run_dir, code=script_for(1, before=textwrap.dedent(before)), nodes=2, ranks_per_node=1,
                   timeout_s=90.0)
    return cluster, launcher, inv, run_dir


def test_a_gang_preempted_after_a_node_finished_fails_rather_than_mixing_attempts(kcluster_factory, tmp_path):
    """Admitted again, a JobSet resumes its child Job, which keeps its completed indexes: only node 0
    ran again, and the replicate read ok from node 0 of attempt 2 and node 1 of attempt 1."""
    markers = tmp_path / "markers"
    markers.mkdir()
    cluster, launcher, inv, run_dir = _gang(kcluster_factory, tmp_path, f"""
        import os, pathlib, time
        rank = os.environ["NODE_RANK"]
        marker = pathlib.Path({str(markers)!r}, "rank" + rank)
        attempt = "2" if marker.exists() else "1"
        marker.write_text("1")
        print("node", rank, "attempt", attempt, flush=True)
        if attempt == "1" and rank == "0":
            time.sleep(60)
    """, eviction_retries=1)
    preempted: list[str] = []
    sleep = launcher._sleep

    def preempt_once_node_1_finished(s: float) -> None:
        done = any((p["metadata"].get("annotations") or {}).get(INDEX) == "1" and p["status"].get("phase") == "Succeeded"
                   for p in cluster.list("pods"))
        sets = cluster.list("jobsets")
        if sets and done and not preempted:
            preempted.append(sets[0]["metadata"]["name"])
            cluster.preempt(preempted[0])
        sleep(s)

    launcher._sleep = preempt_once_node_1_finished
    res = launcher.launch(inv, run_dir)
    assert preempted
    assert res.status == "failed", (res.status, res.reason)
    assert res.reason.startswith("preempted by Kueue (Preempted: "), res.reason
    assert ("after node 1 had finished: a JobSet admitted again resumes its Job, which keeps the indexes that "
            "completed and reruns only the others, so the gang cannot run together again; JobSet deleted") in res.reason
    # every node's log is of the one attempt that ran the gang
    for rank in (0, 1):
        assert f"node {rank} attempt 1" in (run_dir / inv.node_log_relpath(rank)).read_text()


def test_a_drained_gang_node_is_named_not_its_peer_stopped_after_it(kcluster_factory, tmp_path):
    """The Eviction API's drain of node 1 fails the child Job (backoffLimit 0): the reason was node
    0's SIGTERM from the Job controller ("exited with code 143"), the eviction and node 1 unnamed."""
    cluster, launcher, inv, run_dir = _gang(kcluster_factory, tmp_path, """
        import os, time
        print("node", os.environ["NODE_RANK"], "working", flush=True)
        time.sleep(20)
    """, eviction_retries=2)
    drained: list[str] = []
    sleep = launcher._sleep

    def drain_node_1_once_it_works(s: float) -> None:
        for p in cluster.list("pods"):
            if (p["metadata"].get("annotations") or {}).get(INDEX) == "1" and not drained \
                    and p["status"].get("phase") == "Running":
                try:
                    working = "working" in (cluster.scratch(p["metadata"]["name"]) / "logs" / "suite.log").read_text()
                except (KeyError, OSError):
                    working = False
                if working:
                    drained.append(p["metadata"]["name"])
                    cluster.drain_pod(p["metadata"]["name"])
        sleep(s)

    launcher._sleep = drain_node_1_once_it_works
    res = launcher.launch(inv, run_dir)
    assert drained
    assert res.status == "failed"
    assert res.reason.startswith("node 1 (") and "failed: evicted: EvictionByEvictionAPI: Eviction API: evicting" \
        in res.reason, res.reason
