"""Multi-node gangs on the local launcher: real gloo rendezvous over loopback, per-node
placeholders, and a crashing rank that fails the whole gang with no process left behind."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from benchrun.launch.local import LocalLauncher
from benchrun.plan import Invocation, base_env, build_argv, gang_mark
from benchrun.rundir import RunDir

RUN_ID = "g-20260101000000-abcdef12"
GANG_SUITE = r'''
import datetime, json, os, subprocess, sys
import torch, torch.distributed as dist
from benchrun.suites._runtime import main

def run(ctx):
    out = ctx.params["out_dir"]
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    child = subprocess.Popen(["sleep", "300"])  # a grandchild the launcher must not leave behind
    with open(os.path.join(out, f"node{ctx.node_rank}.json"), "w") as f:
        json.dump({"rank": rank, "argv": sys.argv[1:], "pid": os.getpid(), "child": child.pid,
                   "env": {k: os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "WORLD_SIZE",
                                                          "LOCAL_WORLD_SIZE", "RANK", "BENCHRUN_NODE_NAME")}}, f)
    if ctx.params.get("crash_rank") == rank:
        raise RuntimeError(f"injected crash on rank {rank}")
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    ctx.add_metric("rank_sum", float(t), "1", "higher", rank_id=rank)
    dist.destroy_process_group()

main(run)
'''


def _gang_inv(tmp_path: Path, run_dir: Path, params: dict, nodes: int = 2) -> Invocation:
    script = tmp_path / "gang_suite.py"
    script.write_text(GANG_SUITE)
    values = {name: gang_mark(name) for name in ("NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NNODES", "HOSTS")}
    argv = build_argv(f"python {script} --node-rank ${{NODE_RANK}} --rdzv ${{MASTER_ADDR}}:${{MASTER_PORT}} "
                      "--nnodes=${NNODES} --hosts ${HOSTS}", values, where="test")
    env = {**base_env(), "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "BENCHRUN_RUN_ID": RUN_ID,
           "BENCHRUN_RUN_DIR": str(run_dir), "BENCHRUN_SUITE": "gang", "BENCHRUN_REPLICATE": "1",
           "BENCHRUN_PARAMS": json.dumps(params)}
    return Invocation(RUN_ID, "micro", "gang", 1, "bc-g", argv, env, 120.0, params, nodes=nodes)


def _gone(pid: int) -> bool:
    """True once ``pid`` no longer runs (SIGKILL is delivered asynchronously: poll a little)."""
    for _ in range(100):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):  # a zombie no longer runs (reaped by init in its own time)
            return True
        time.sleep(0.05)
    return False


@pytest.mark.slow
def test_two_nodes_rendezvous_and_resolve_their_placeholders(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path, RUN_ID).create().path
    out = tmp_path / "out"
    out.mkdir()
    res = LocalLauncher().launch(_gang_inv(tmp_path, run_dir, {"out_dir": str(out)}), run_dir)
    assert res.status == "ok", res.reason
    assert [m["value"] for m in res.metrics if m["name"] == "rank_sum"] == [3.0]  # 1 + 2: both ranks met
    docs = [json.loads((out / f"node{n}.json").read_text()) for n in range(2)]
    port = docs[0]["env"]["MASTER_PORT"]
    for n, doc in enumerate(docs):
        assert doc["rank"] == n
        assert doc["argv"][:5] == ["--node-rank", str(n), "--rdzv", f"127.0.0.1:{port}", "--nnodes=2"]
        hosts = doc["argv"][6].split(",")
        assert len(hosts) == 2 and hosts[n] == doc["env"]["BENCHRUN_NODE_NAME"] and hosts[n].endswith(f"-node{n}")
        assert doc["env"] | {"MASTER_PORT": None, "BENCHRUN_NODE_NAME": None} == {
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": None, "NODE_RANK": str(n), "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "1", "RANK": str(n), "BENCHRUN_NODE_NAME": None}
        assert _gone(doc["pid"]) and _gone(doc["child"])
    assert (run_dir / f"raw/{RUN_ID}_gang_r1_node1.log").is_file()
    assert (run_dir / f"raw/{RUN_ID}_gang_r1_node1_result.json").is_file()


@pytest.mark.slow
def test_a_crashing_rank_fails_the_gang_naming_rank_and_reason(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path, RUN_ID).create().path
    out = tmp_path / "out"
    out.mkdir()
    inv = _gang_inv(tmp_path, run_dir, {"out_dir": str(out), "crash_rank": 1})
    res = LocalLauncher().launch(inv, run_dir)
    assert res.status == "failed"
    assert res.reason.startswith("node 1 (rank 1) exited with code 1: RuntimeError: injected crash on rank 1")
    assert "gang of 2 nodes was stopped" in res.reason
    # rank 0 was blocked in all_reduce with a 120 s group timeout: the gang stopped it long before
    assert res.wall_s < inv.timeout_s
    for n in range(2):
        doc = json.loads((out / f"node{n}.json").read_text())
        assert _gone(doc["pid"]) and _gone(doc["child"]), f"node {n} left a process behind"
    assert not (run_dir / res.log).read_text().count("Traceback") > 1  # node 0 was killed, not crashed


TORCHRUN_SCRIPT = r'''
import torch, torch.distributed as dist
from benchrun.suites._runtime import SuiteContext
dist.init_process_group("gloo")  # env:// from torchrun's workers' RANK, WORLD_SIZE, MASTER_*
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
if dist.get_rank() == 0:
    ctx = SuiteContext()
    ctx.add_metric("rank_sum", float(t), "1", "higher")
    ctx.finish("ok")
dist.destroy_process_group()
'''


@pytest.mark.slow
def test_torchrun_across_two_local_nodes_with_gang_placeholders(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path, RUN_ID).create().path
    script = tmp_path / "train.py"
    script.write_text(TORCHRUN_SCRIPT)
    values = {name: gang_mark(name) for name in ("NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NNODES", "HOSTS")}
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.is_file():
        pytest.skip(f"no torchrun beside {sys.executable}")
    argv = build_argv(f"{torchrun} --nnodes ${{NNODES}} --nproc-per-node 1 --node-rank ${{NODE_RANK}} "
                      f"--master-addr ${{MASTER_ADDR}} --master-port ${{MASTER_PORT}} {script}", values, where="test")
    env = {**base_env(), "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "BENCHRUN_RUN_ID": RUN_ID,
           "BENCHRUN_RUN_DIR": str(run_dir), "BENCHRUN_SUITE": "gang", "BENCHRUN_REPLICATE": "1"}
    inv = Invocation(RUN_ID, "micro", "gang", 1, "bc-g", argv, env, 120.0, {}, nodes=2)
    res = LocalLauncher().launch(inv, run_dir)
    assert res.status == "ok", res.reason
    assert [m["value"] for m in res.metrics if m["name"] == "rank_sum"] == [3.0]  # ranks 0 and 1 of 2 met


QUICK_GANG = r'''
import sys
from benchrun.suites._runtime import main

if sys.argv[sys.argv.index("--node-rank") + 1] == "1":
    sys.exit(3)  # node 1 fails before it joins anything


def run(ctx):
    ctx.add_metric("x", 1.0, "1", "higher")


main(run)
'''


def test_a_node_that_fails_while_the_launcher_is_between_polls_still_fails_the_gang(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    """When every node had ended before the launcher's loop looked again, the loop ended with no
    failure and node 0's ok document decided: an ok replicate with a non-zero exit code."""
    import subprocess

    from benchrun.launch import local

    class Finished(subprocess.Popen):  # each node has ended by the time the launcher polls
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.wait()

    rd = RunDir(tmp_path, RUN_ID).create()
    script = tmp_path / "quick_gang.py"
    script.write_text(QUICK_GANG)
    values = {name: gang_mark(name) for name in ("NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NNODES", "HOSTS")}
    argv = build_argv(f"python {script} --node-rank ${{NODE_RANK}}", values, where="test")
    env = {**base_env(), "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "BENCHRUN_RUN_ID": RUN_ID,
           "BENCHRUN_RUN_DIR": str(rd.path), "BENCHRUN_SUITE": "gang", "BENCHRUN_REPLICATE": "1",
           "BENCHRUN_PARAMS": "{}"}
    inv = Invocation(RUN_ID, "micro", "gang", 1, "bc-g", argv, env, 60.0, {}, nodes=2)
    monkeypatch.setattr(local.subprocess, "Popen", Finished)
    res = LocalLauncher().launch(inv, rd.path)
    assert res.status == "failed" and res.exit_code == 3, (res.status, res.reason)
    assert res.reason.startswith("node 1 (rank 1) exited with code 3")


def test_the_node_whose_own_failure_ended_the_gang_is_named_not_a_peer_stopped_after_it():
    """Found in review: the lowest rank above 0 that failed was named; with node 0 exiting 3 and node 1
    stopped by the Job controller's SIGTERM, "node 1 failed: exited with code 143 (SIGTERM)"."""
    import datetime as dt
    from types import SimpleNamespace as NS

    from benchrun.launch.k8s_failures import failed_node
    from benchrun.launch.k8s_status import CONTAINER_NAME

    def pod(node: str, code: int, at: int, reason: str | None = None) -> NS:
        term = NS(exit_code=code, reason=reason or ("Error" if code else "Completed"), signal=None,
                  finished_at=dt.datetime(2026, 12, 6, 12, 0, at, tzinfo=dt.timezone.utc))
        cs = NS(name=CONTAINER_NAME, state=NS(terminated=term, waiting=None, running=None))
        return NS(status=NS(phase="Failed" if code else "Succeeded", reason=None, message=None, conditions=None,
                            container_statuses=[cs]), spec=NS(node_name=node), metadata=NS(name=node))

    inv = None  # verdict reads it only for a deadline
    # node 0 failed by itself, node 1 was stopped after it: node 0's own verdict speaks (None here)
    assert failed_node(inv, {0: pod("a", 3, 10), 1: pod("b", 143, 11)}, True) is None
    # node 1 failed by itself first, node 0 and 2 were stopped: node 1 is named
    named = failed_node(inv, {0: pod("a", 143, 12), 1: pod("b", 1, 10), 2: pod("c", 137, 11)}, True)
    assert named is not None and named.startswith("node 1 (b) failed: exited with code 1"), named
    # an OOMKilled node is a failure of its own, not a peer stopped by a signal
    named = failed_node(inv, {0: pod("a", 143, 12), 1: pod("b", 143, 11), 2: pod("c", 137, 13, "OOMKilled")}, True)
    assert named is not None and named.startswith("node 2 (c) failed: OOMKilled"), named
    assert failed_node(inv, {0: pod("a", 0, 10), 1: pod("b", 0, 11)}, True) is None
    # a drained node (DisruptionTarget) is named before its peers, though all exited 143 and it ended last
    drained = pod("b", 143, 12)
    drained.status.conditions = [NS(type="DisruptionTarget", status="True", reason="EvictionByEvictionAPI",
                                    message="Eviction API: evicting")]
    named = failed_node(inv, {0: pod("a", 143, 11), 1: drained}, True)
    assert named == "node 1 (b) failed: evicted: EvictionByEvictionAPI: Eviction API: evicting (exit code 143)", named
    # a node's pod deleted while it ran, gone before a poll saw it end (its index shows a replacement that
    # never ran): named, not node 0's SIGTERM
    running = NS(status=NS(phase="Running", reason=None, message=None, conditions=None, container_statuses=[]),
                 spec=NS(node_name="b"), metadata=NS(name="b", deletion_timestamp=None))
    pending = NS(status=NS(phase="Pending", reason=None, message=None, conditions=None, container_statuses=[]),
                 spec=NS(node_name=None), metadata=NS(name="b2"))
    named = failed_node(inv, {0: pod("a", 143, 11), 1: pending}, True, gone={1: running})
    assert named is not None and named.startswith("node 1 (b) failed: evicted: its pod was deleted while it ran"), named
    # a gang that succeeded all the same is no failure
    assert failed_node(inv, {0: pod("a", 0, 10), 1: pod("b", 0, 11)}, True, gone={1: running}) is None
    # a node that failed by itself is named, not the peer the Job controller deleted for it (gone between
    # polls: no eviction)
    peer = NS(status=NS(phase="Running", reason=None, message=None, conditions=None, container_statuses=[]),
              spec=NS(node_name="a"), metadata=NS(name="a", deletion_timestamp=None))
    named = failed_node(inv, {0: peer, 1: pod("b", 3, 10)}, True, gone={0: peer})
    assert named is not None and named.startswith("node 1 (b) failed: exited with code 3"), named
