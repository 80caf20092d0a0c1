"""Helpers for building test spec documents (import as `from helpers import ...`)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import threading


def tiny_layers(micro: list[dict], component: list[dict] | None = None, end_to_end: list[dict] | None = None) -> list[dict]:
    """A layers section with the given suites (a layer with none is disabled)."""
    out = []
    for name, suites in (("micro", micro), ("component", component or []), ("end_to_end", end_to_end or [])):
        out.append({"name": name, "enabled": bool(suites), "objective": f"{name} (test)", "suites": suites})
    return out


def tiny_spec(doc: dict, micro: list[dict], component: list[dict] | None = None,
              end_to_end: list[dict] | None = None) -> None:
    """Give ``doc`` the layers of :func:`tiny_layers`; its primaries qualified by a suite the spec no
    longer runs become bare names (a primary must name a suite of an enabled layer)."""
    doc["spec"]["layers"] = tiny_layers(micro, component, end_to_end)
    runs = {s["name"] for layer in doc["spec"]["layers"] for s in layer["suites"]}
    for family in (doc["spec"].get("metrics") or {}).values():
        if isinstance(family, dict) and isinstance(family.get("primary"), list):
            family["primary"] = [p if "/" not in p or p.split("/", 1)[0] in runs else p.split("/", 1)[1].split("[")[0]
                                 for p in family["primary"]]


@contextlib.contextmanager
def threaded_server(**kw):
    """A RefServer on its own event loop in a thread (tests that do not measure timing)."""
    loop = asyncio.new_event_loop()
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    from benchrun.loadgen.refserver import RefServer

    srv = RefServer(**kw)
    port = asyncio.run_coroutine_threadsafe(srv.start(), loop).result(10)
    try:
        yield srv, f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(srv.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        t.join(5)
        loop.close()


def run_builtin_suite(suite: str, run_id: str, run_dir, params: dict, **env_extra: str):
    """Run ``python -m benchrun.suites.<suite>`` as the launcher would (explicit environment,
    replicate 1); returns (completed process, the result document it wrote)."""
    import json
    import os
    import subprocess
    import sys

    from benchrun.suites.result import read_result, result_path

    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "BENCHRUN_RUN_ID": run_id,
           "BENCHRUN_RUN_DIR": str(run_dir), "BENCHRUN_SUITE": suite, "BENCHRUN_REPLICATE": "1",
           "BENCHRUN_PARAMS": json.dumps(params), **env_extra}
    proc = subprocess.run([sys.executable, "-m", f"benchrun.suites.{suite}"], env=env, capture_output=True,
                          text=True, timeout=300)
    return proc, read_result(result_path(run_dir, run_id, suite, 1))


def kill_processes_of_home(home) -> int:
    """SIGKILL every process whose environment names ``home`` (BENCHRUN_HOME, or a suite's
    BENCHRUN_RUN_DIR under it): what a test started and a kill -9 orphaned; returns how many."""
    import os

    import psutil

    n = 0
    for p in psutil.process_iter():
        try:
            env = p.environ()
            run_dir = env.get("BENCHRUN_RUN_DIR", "")
            if p.pid != os.getpid() and (env.get("BENCHRUN_HOME") == str(home)
                                         or run_dir.startswith(str(home) + os.sep)):
                p.kill()
                n += 1
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return n


# A Dagster instance whose runs wait QUEUED for a daemon (the Helm chart's coordinator).
QUEUED = {"run_coordinator": {"module": "dagster._core.run_coordinator", "class": "QueuedRunCoordinator"}}


def stopped():
    """An already-set stop event: ``Operator.run(stopped())`` makes one pass and releases the Lease."""
    stop = threading.Event()
    stop.set()
    return stop


def leading_operator(cluster, instance, account: tuple[str, str] = ("benchrun", "benchrun-operator")):
    """The BenchmarkRun operator as ``account`` on the harness, holding its Lease, starting
    runs on ``instance`` (all namespaces, no rate limit worth the name)."""
    from kubernetes import client

    from benchrun.controller.dagster_runs import DagsterRuns
    from benchrun.controller.lease import LeaseElector
    from benchrun.controller.operator import Operator, Settings

    api_client = cluster.api_client(account)
    elector = LeaseElector(api_client, "benchrun", "benchrun-operator", "replica-a", duration_s=30)
    op = Operator(client.CustomObjectsApi(api_client), DagsterRuns(instance),
                  Settings(namespace=None, watch_timeout_s=1), elector=elector)
    assert elector.try_acquire()
    return op


def dequeue(instance, run):
    """What the daemon does to a queued run before its run launcher starts it: STARTING."""
    import dagster as dg

    instance.report_dagster_event(dg.DagsterEvent(event_type_value="PIPELINE_STARTING", job_name=run.job_name),
                                  run_id=run.run_id)
    return instance.get_run_by_id(run.run_id)


def stop_process(proc: "subprocess.Popen", grace_s: float) -> None:
    """SIGTERM, ``grace_s`` to exit, then SIGKILL (a server or operator a test or benchmark started)."""
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def run_rows(home, table: str, run_id: str) -> list[dict]:
    """A run's rows of a warehouse table, read the way every reader reads them (``benchrun query``),
    whichever layout the warehouse has."""
    from benchrun.warehouse import query

    return query(f'SELECT * FROM "{table}" WHERE run_id = ?', home, [run_id]).table.to_pylist()


def cli_in_process(args, monkeypatch, capsys) -> tuple[int, str, str]:
    """``benchrun.cli.main`` in this process (same code path, no interpreter start-up): exit code,
    stdout, stderr."""
    import sys

    from benchrun import cli

    monkeypatch.setattr(sys, "argv", ["benchrun", *args])
    code = 0
    try:
        cli.main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err
