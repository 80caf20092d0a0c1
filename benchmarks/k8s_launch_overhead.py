"""What the Kubernetes launcher itself costs per replicate, measured on the cluster harness.

A trivial suite (prints its result line and exits) is launched ``--replicates`` times with
the local launcher and with the Kubernetes launcher against ``tests/kharness`` (the real
client over HTTP, kmock's API server, the harness's Kueue/scheduler/kubelet; ``poll_s`` 0.1,
control-plane tick 0.05 s). Reported per launch: wall time (median, max) and the launching
thread's own CPU time (``time.thread_time``: the client's requests, JSON decoding, polling;
the harness's server and kubelet run in other threads and are not counted), so the figure
is the orchestrator-side cost, not the harness's. On a real cluster add Kueue's admission
latency, scheduling, image pull and container start; the harness makes those near zero.

Usage: .venv/bin/python benchmarks/k8s_launch_overhead.py [--replicates 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from benchrun.launch.kubernetes import RESULT_KEY, KubernetesLauncher  # noqa: E402
from benchrun.launch.local import LocalLauncher  # noqa: E402
from benchrun.launch.podspec import Placement  # noqa: E402
from benchrun.plan import Invocation  # noqa: E402
from benchrun.suites.result import SCHEMA  # noqa: E402

RUN_ID = "bench-20261201000000-0000abcd"


def invocation(run_dir: Path, k: int) -> Invocation:
    doc = {"schema": SCHEMA, "run_id": RUN_ID, "suite": "noop", "replicate": k, "benchmark_case_id": "bc-0",
           "status": "ok", "reason": None, "synthetic": True, "started_utc": "2026-12-01T00:00:00Z",
           "finished_utc": "2026-12-01T00:00:00Z", "parameters": {}, "context": {}, "samples": {},
           "metrics": [{"name": "x", "value": 1.0, "unit": "1", "direction": "higher", "case": ""}]}
    code = (f"import json, os, pathlib\ndoc = json.loads({json.dumps(json.dumps(doc))})\n"
            f"print(json.dumps({{{RESULT_KEY!r}: doc}}))\n"
            f"p = pathlib.Path(os.environ['BENCHRUN_RUN_DIR'], 'structured'); p.mkdir(parents=True, exist_ok=True)\n"
            f"(p / '{RUN_ID}_noop_r{k}.json').write_text(json.dumps(doc))\n")
    return Invocation(RUN_ID, "micro", "noop", k, "bc-0", (sys.executable, "-c", code),
                      {"BENCHRUN_RUN_DIR": str(run_dir), "BENCHRUN_TELEMETRY_HZ": "0"}, 30.0, image="python:3.11")


def measure(launch, run_dir: Path, n: int) -> dict[str, float]:
    walls, cpus = [], []
    for k in range(1, n + 1):
        inv = invocation(run_dir, k)
        t0, c0 = time.perf_counter(), time.thread_time()
        res = launch(inv)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.thread_time() - c0)
        assert res.status == "ok", res.reason
    return {"wall_median_s": statistics.median(walls), "wall_max_s": max(walls),
            "cpu_median_s": statistics.median(cpus), "cpu_max_s": max(cpus)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replicates", type=int, default=20)
    args = parser.parse_args()
    from kharness import Cluster
    from kubernetes import client

    tmp = Path(tempfile.mkdtemp(prefix="k8s-bench-"))
    home = tmp / "home"
    run_dir = home / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    local = measure(lambda inv: LocalLauncher().launch(inv, run_dir), run_dir, args.replicates)
    with Cluster(tmp / "cluster", host_env={"PYTHONPATH": str(ROOT)}) as cluster:
        cluster.bind_pvc("home", home)
        api = cluster.api_client()
        launcher = KubernetesLauncher(
            client.BatchV1Api(api), client.CoreV1Api(api), "default",
            Placement(queue_name="benchrun", run_volume_claim="home", run_home=str(home), pending_timeout_s=60.0),
            poll_s=0.1, custom_api=client.CustomObjectsApi(api))
        k8s = measure(lambda inv: launcher.launch(inv, run_dir), run_dir, args.replicates)
    print(json.dumps({"replicates": args.replicates, "local": local, "kubernetes_harness": k8s}, indent=2))


if __name__ == "__main__":
    main()
