"""The BenchmarkRun operator at scale on the cluster harness: N resources created at once.

What runs: the harness API server (tests/kharness, kmock over HTTP on loopback) with the
BenchmarkRun CRD from deploy/; the operator as deploy/ runs it, ``benchrun operator`` in its own
process (``--in-process``: ``benchrun.controller.operator.Operator`` in a thread of this one, where
it shares the GIL with the API server it is timed against), as ServiceAccount
benchrun/benchrun-operator (its kubeconfig), holding the Lease; a real Dagster instance (sqlite in
a temporary DAGSTER_HOME, or ``--postgres``) with a QueuedRunCoordinator. The operator validates
and pins each document, creates its run directory, creates the Dagster run (job snapshot,
execution plan, origins: what the sensor daemon does for a RunRequest; the instance's sqlite
files in RAM, one event log database) and submits it: the run is QUEUED and **not executed** (no
daemon runs here), so no run worker moves a status to Admitted or Running. What is timed is
therefore create → the operator's status write (phase Pending, runId set, the Dagster run
QUEUED): the part of "create → Admitted/Running" that is the operator's.

Measured, after all N objects are created in one burst (in the API server's loop, no HTTP):
- per object, create → first status with a runId seen by an independent watcher (p50/p90/p99/max);
- the operator's API requests (recorded by the harness for its account) per second, by verb;
- checks: every object has exactly one Dagster run (by uid) and a status with a runId;
  no object's status ever went back to an earlier phase (every stored version, in order);
  a second operator started afterwards (state lost, all events again) starts no run.

``--execute K`` then runs K of the queued runs (the K objects created last: the longest wait for
the operator) to their end, as the daemon and K8sRunLauncher would: each dequeued (STARTING) and
its run worker, ``dagster api execute_run``, started in its own process (``--workers`` at once)
with the run worker's ServiceAccount's kubeconfig; the run worker's ``lifecycle.begin_run`` sets
the resource's Admitted condition and phase Running in one status write, and on to the end. Timed per run, from the same watcher:
dequeue → Admitted (the run worker's start: process, code location, run directory) and
create → Admitted / Running, which for these objects is the operator's share plus that. A
cluster adds the run-worker pod's scheduling and image pull, which the harness does not model.

Usage: .venv/bin/python benchmarks/controller_scale.py [--objects 1000] [--starts-per-second 200]
       [--execute K --workers W]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import kmock
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
NS = "benchruns"
KIND = "benchmarking.aisp.dev/v1alpha1/benchmarkruns"
GEMM = {"name": "gemm", "repoCommand": "python -m benchrun.suites.gemm", "parameters": {"sizes": [32], "iterations": 2}}
QUEUED = {"run_coordinator": {"module": "dagster._core.run_coordinator", "class": "QueuedRunCoordinator"}}
# RAM-backed when the machine has it: the instance's sqlite commits then cost CPU, not disk
# flushes (a deployment's instance is Postgres; this is the nearest one process can have).
SCRATCH = "/dev/shm" if Path("/dev/shm").is_dir() else None


def documents(n: int) -> list[dict]:
    from helpers import tiny_layers

    base = yaml.safe_load((ROOT / "specs/local/canary.yaml").read_text())
    base["spec"]["layers"] = tiny_layers([GEMM])
    out = []
    for i in range(n):
        doc = copy.deepcopy(base)
        doc["metadata"] = {"name": f"scale-{i:04d}", "namespace": NS}
        out.append(doc)
    return out


def pct(values: list[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(values, q)) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--starts-per-second", type=float, default=200.0)
    parser.add_argument("--start-burst", type=int, default=200)
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--in-process", action="store_true",
                        help="The operator in a thread of this process (sharing the GIL with the harness's API server), "
                             "not `benchrun operator` in its own process")
    parser.add_argument("--postgres", action="store_true",
                        help="The Dagster instance on a throwaway PostgreSQL server on loopback (dagster-postgres, as "
                             "deploy/ runs it), not sqlite files")
    parser.add_argument("--execute", type=int, default=0, metavar="K",
                        help="then run K of the queued runs (the last created) to their end, timing each one's "
                             "create -> Admitted / Running")
    parser.add_argument("--workers", type=int, default=2, help="run workers at once for --execute")
    args = parser.parse_args()

    import dagster as dg
    from kubernetes import client, watch

    from benchrun.controller.dagster_runs import DagsterRuns
    from benchrun.controller.lease import LeaseElector
    from benchrun.controller.operator import Operator, Settings
    from benchrun.controller.resources import TAG_UID
    from benchrun.controller.status import PHASE_ORDER
    from kharness.cluster import Cluster
    from kharness.rbac import sa_user

    tmp = Path(tempfile.mkdtemp(prefix="controller-scale-", dir=SCRATCH))
    home = tmp / "home"
    home.mkdir()
    (tmp / "dagster_home").mkdir()
    os.environ["BENCHRUN_HOME"] = str(home)
    os.environ.pop("KUBERNETES_SERVICE_HOST", None)
    cluster = Cluster(tmp / "cluster", namespace=NS, crds=[ROOT / "deploy/kustomize/base/benchmarkrun-crd.yaml"]).start()
    account = ("benchrun", "benchrun-operator")
    first_seen: dict[str, float] = {}
    phase_seen: dict[tuple[str, str], float] = {}  # (name, phase) -> when the watcher first saw it
    watcher_stop = threading.Event()

    def watcher() -> None:  # an independent observer: when each status with a runId appears
        api = client.CustomObjectsApi(cluster.api_client())
        rv = api.list_namespaced_custom_object("benchmarking.aisp.dev", "v1alpha1", NS, "benchmarkruns")["metadata"][
            "resourceVersion"]
        while not watcher_stop.is_set():
            for ev in watch.Watch().stream(api.list_namespaced_custom_object, "benchmarking.aisp.dev", "v1alpha1", NS,
                                           "benchmarkruns", resource_version=rv, timeout_seconds=2):
                obj = ev["object"]
                rv = obj["metadata"]["resourceVersion"]
                name, status = obj["metadata"]["name"], obj.get("status") or {}
                if status.get("runId") and name not in first_seen:
                    first_seen[name] = time.time()
                if status.get("phase"):
                    phase_seen.setdefault((name, status["phase"]), time.time())
                if any(c.get("type") == "Admitted" and c.get("status") == "True" for c in status.get("conditions") or []):
                    phase_seen.setdefault((name, "Admitted"), time.time())  # the condition: the phase goes on to Running

    stack = contextlib.ExitStack()
    if args.postgres:
        from test_postgres_instance import running_pg_server

        pg = stack.enter_context(running_pg_server())
        pg.sql("postgres", 'CREATE DATABASE "controller_scale"')
        storage: dict = {"storage": {"postgres": {"postgres_db": {
            "username": pg.user, "password": "trust", "hostname": pg.host, "port": pg.port,
            "db_name": "controller_scale", "scheme": "postgresql+psycopg2"}}}}
    else:
        # One event log database for every run (as on Postgres), not a sqlite file per run.
        storage = {"event_log_storage": {"module": "dagster._core.storage.event_log",
                                         "class": "ConsolidatedSqliteEventLogStorage",
                                         "config": {"base_dir": str(tmp / "dagster_home" / "events")}}}
    dagster_home = tmp / "dagster_home"
    (dagster_home / "dagster.yaml").write_text(yaml.safe_dump({**QUEUED, **storage}))
    with stack, dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        api_client = cluster.api_client(account)
        settings = Settings(namespace=NS, page_size=args.page_size, watch_timeout_s=2,
                            starts_per_s=args.starts_per_second, start_burst=args.start_burst, home=home)
        stop = threading.Event()
        if args.in_process:
            runs = DagsterRuns(instance)
            runs._job()  # load the code location before the clock starts (an operator does it once at start)
            op = Operator(client.CustomObjectsApi(api_client), runs, settings,
                          elector=LeaseElector(api_client, NS, "benchrun-operator", "bench", duration_s=15))
            thread = threading.Thread(target=op.run, args=(stop,), daemon=True)
            thread.start()
            cluster.wait_for(lambda: op.version is not None, what="the operator's first listing")
        else:  # what deploy/ runs: `benchrun operator`, its own process, as its ServiceAccount
            op = None
            log_file = stack.enter_context(open(tmp / "operator.log", "w"))
            env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig_for(*account)), "DAGSTER_HOME": str(dagster_home),
                   "BENCHRUN_HOME": str(home), "PYTHONPATH": str(ROOT)}
            proc = subprocess.Popen(
                [str(Path(sys.executable).with_name("benchrun")), "operator", "--namespace", NS, "--lease-namespace", NS,
                 "--starts-per-second", str(args.starts_per_second), "--start-burst", str(args.start_burst),
                 "--page-size", str(args.page_size), "--home", str(home)],
                env=env, stdout=log_file, stderr=subprocess.STDOUT)
            from helpers import stop_process

            stack.callback(stop_process, proc, 90)  # SIGTERM: it stops after its current pass
            cluster.wait_for(lambda: any(c.verb == "watch" for c in cluster.calls(sa_user(*account))) or
                             proc.poll() is not None, timeout=180, what="the operator's first watch")
            if proc.poll() is not None:
                sys.exit(f"the operator exited ({proc.returncode}): {(tmp / 'operator.log').read_text()[-3000:]}")
        obs = threading.Thread(target=watcher, daemon=True)
        obs.start()
        time.sleep(1.0)
        docs = documents(args.objects)
        created: dict[str, float] = {}

        async def burst() -> None:
            for doc in docs:
                await cluster.api.put_object(kmock.resource(KIND), NS, doc)
                created[doc["metadata"]["name"]] = time.time()

        calls_before = len(cluster.calls(sa_user(*account)))
        t0 = time.time()
        cluster.call(burst)
        burst_s = time.time() - t0
        deadline = time.monotonic() + args.timeout
        while len(first_seen) < args.objects and time.monotonic() < deadline:
            time.sleep(0.2)
        t_done = time.time()
        elapsed = t_done - t0
        calls = cluster.calls(sa_user(*account))[calls_before:]
        seen = [first_seen[n] - created[n] for n in created if n in first_seen]
        print(f"{len(seen)} of {args.objects} statuses after {elapsed:.1f} s; p99 {pct(seen, 99):.1f} s; "
              f"{len(calls)} operator requests", flush=True)  # before the slow checks
        executed = execute(instance, cluster, dagster_home, home, [d["metadata"]["name"] for d in docs[-args.execute:]],
                           args.workers, phase_seen, created) if args.execute else []
        stop.set()
        if op is not None:
            thread.join(30)
        watcher_stop.set()

        # checks
        objs = cluster.list(KIND, NS)
        missing_status = [o["metadata"]["name"] for o in objs if not (o.get("status") or {}).get("runId")]
        per_uid = collections.Counter(r.tags.get(TAG_UID) for r in instance.get_runs())
        wrong_count = [o["metadata"]["name"] for o in objs if per_uid.get(o["metadata"]["uid"]) != 1]
        queued = sum(1 for r in instance.get_runs() if r.status == dg.DagsterRunStatus.QUEUED) + len(executed)
        regressions = []
        for o in objs:
            ranks = [PHASE_ORDER[(v.get("status") or {})["phase"]] for v in cluster.history(KIND, o["metadata"]["name"], NS)
                     if v and (v.get("status") or {}).get("phase")]
            if ranks != sorted(ranks):
                regressions.append(o["metadata"]["name"])
        # a second operator, nothing remembered: every object again, no new run
        before = len(instance.get_runs())
        again = Operator(client.CustomObjectsApi(api_client), DagsterRuns(instance), settings)
        again.relist()
        after = len(instance.get_runs())

    latencies = [first_seen[n] - created[n] for n in created if n in first_seen]
    by_verb = collections.Counter(f"{c.verb} {c.resource}{'/' + c.subresource if c.subresource else ''}" for c in calls)
    print(f"operator: {'a thread of this process' if op is not None else 'its own process (benchrun operator)'}")
    print(f"objects {args.objects}, created in {burst_s:.2f} s; all statuses written after {elapsed:.1f} s")
    print(f"create -> status Pending with runId (Dagster run QUEUED): p50 {pct(latencies, 50):.1f} s, "
          f"p90 {pct(latencies, 90):.1f} s, p99 {pct(latencies, 99):.1f} s, max {max(latencies):.1f} s")
    print(f"operator API requests: {len(calls)} in {elapsed:.1f} s = {len(calls) / elapsed:.1f}/s; "
          + ", ".join(f"{k} {v}" for k, v in sorted(by_verb.items())))
    if op is not None:
        print(f"operator stats: {op.stats.started} started, {op.stats.reused} reused, {op.stats.status_writes} status "
              f"writes, {op.stats.relists} list(s), {len(op.stats.errors)} errors {op.stats.errors[:3]}")
    else:
        print(f"operator log: {len(log_lines := (tmp / 'operator.log').read_text().splitlines())} lines, "
              f"{sum('WARNING' in line for line in log_lines)} warnings")
    print(f"checks: {len(objs)} objects, {queued} Dagster runs QUEUED (or executed here), without exactly one run: "
          f"{len(wrong_count)}, without a status runId: {len(missing_status)}, phase regressions: {len(regressions)}, "
          f"runs started by a restarted operator: {after - before}")
    failed = [e for e in executed if e["phase"] != "Succeeded" or e["admitted"] is None or e["running"] is None]
    if executed:
        adm = [e["admitted"] - e["dequeued"] for e in executed if e["admitted"] is not None]
        print(f"executed {len(executed)} runs ({args.workers} run workers at once): "
              + ", ".join(f"{e['name']} {e['phase']} in {e['wall_s']:.0f} s" for e in executed))
        for label, key in (("create -> Pending (the operator)", "pending"), ("create -> Admitted", "admitted"),
                           ("create -> Running", "running")):
            vals = [e[key] - e["created"] for e in executed if e[key] is not None]
            print(f"  {label}: min {min(vals):.1f} s, median {pct(vals, 50):.1f} s, max {max(vals):.1f} s"
                  if vals else f"  {label}: never seen")
        print(f"  dequeued -> Admitted (the run worker's start): min {min(adm):.1f} s, median {pct(adm, 50):.1f} s, "
              f"max {max(adm):.1f} s" if adm else "  dequeued -> Admitted: never seen")
    ok = not wrong_count and not missing_status and not regressions and after == before and len(latencies) == args.objects \
        and not failed
    cluster.stop()
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(0 if ok else 1)


def execute(instance, cluster, dagster_home: Path, home: Path, names: list[str], workers: int,
            phase_seen: dict[tuple[str, str], float], created: dict[str, float]) -> list[dict]:
    """Run the queued runs of ``names`` to their end, ``workers`` run workers at once: each
    dequeued as the daemon does, then ``dagster api execute_run`` in its own process (what
    K8sRunLauncher's pod runs) as the run worker's ServiceAccount."""
    from concurrent.futures import ThreadPoolExecutor

    from dagster._grpc.types import ExecuteRunArgs

    from benchrun.controller.resources import TAG_UID
    from helpers import dequeue

    by_uid = {r.tags.get(TAG_UID): r for r in instance.get_runs()}
    objs = {o["metadata"]["name"]: o for o in cluster.list(KIND, NS)}
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "BENCHRUN_HOME": str(home), "PYTHONPATH": str(ROOT),
           "KUBECONFIG": str(cluster.kubeconfig_for(NS, "benchrun-run"))}

    def one(name: str) -> dict:
        run = by_uid[objs[name]["metadata"]["uid"]]
        dequeued = time.time()
        dequeue(instance, run)
        args = ExecuteRunArgs(job_origin=run.job_code_origin, run_id=run.run_id, instance_ref=instance.get_ref(),
                              set_exit_code_on_failure=True)
        done = subprocess.run([sys.executable, "-m", "dagster", *args.get_command_args()[1:]], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=1800)
        wall = time.time() - dequeued
        if done.returncode != 0:
            print(f"{name}: run worker exited {done.returncode}: {done.stderr[-2000:]}", file=sys.stderr)
        time.sleep(2.5)  # the watcher's next event
        phase = (cluster.get(KIND, name, NS).get("status") or {}).get("phase")
        return {"name": name, "created": created[name], "dequeued": dequeued, "wall_s": wall, "phase": phase,
                **{key: phase_seen.get((name, ph)) for key, ph in
                   (("pending", "Pending"), ("admitted", "Admitted"), ("running", "Running"))}}

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(one, names))


if __name__ == "__main__":
    main()
