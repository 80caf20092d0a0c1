"""Issue 16 soak: 4 concurrent submissions through the Dagster queue (a real dagster-daemon),
50 concurrent queries while they run, and one run's process killed with SIGKILL mid-run.

Every run must end in a final phase, nothing is lost or merged (4 runs, 4 directories, each
with exactly its own replicates), the runs never overlap (one benchmark at a time) and the
queue drains: the killed run is failed (by the failure or liveness sensor, with the liveness reason), its
orphaned suite ended, not left STARTED.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from helpers import kill_processes_of_home, tiny_spec

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
GEMM = {"name": "gemm", "repoCommand": "python -m benchrun.suites.gemm", "parameters": {"sizes": [32], "iterations": 2}}
SLEEPER = {"name": "sleeper", "repoCommand": "python -c 'import time; time.sleep(300)'", "timeoutSeconds": 600}
DEADLINE_S = 540


def _env(home: Path) -> dict[str, str]:
    env = {**os.environ, "BENCHRUN_HOME": str(home), "DAGSTER_HOME": str(home / "dagster_home"),
           "PYTHONPATH": str(REPO), "BENCHRUN_TELEMETRY": "0"}
    env.pop("BENCHRUN_AUTOMATION_ON", None)
    return env


def _suites_of(run_dir: Path) -> int:
    import psutil

    n = 0
    for p in psutil.process_iter():
        try:
            if p.environ().get("BENCHRUN_RUN_DIR") == str(run_dir) and p.status() != psutil.STATUS_ZOMBIE:
                n += 1
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return n


def _phase(home: Path, run_id: str) -> str | None:
    try:
        return json.loads((home / "runs" / run_id / "status.json").read_text()).get("phase")
    except (OSError, ValueError):
        return None


@pytest.mark.slow
def test_soak_queue_queries_and_a_kill(bench_home: Path, canary_doc, write_spec, monkeypatch) -> None:
    import dagster as dg

    from benchrun import submit as sub
    from benchrun.errors import BenchrunError
    from benchrun.warehouse import query

    home = bench_home
    canary_doc["spec"]["trials"]["minReplicates"] = 3
    tiny_spec(canary_doc, [GEMM])
    same = write_spec(canary_doc, "same.yaml")
    sleeper_doc = yaml.safe_load(yaml.safe_dump(canary_doc))
    sleeper_doc["metadata"]["name"] = "soak-sleeper"
    tiny_spec(sleeper_doc, [SLEEPER])
    sleeper_doc["spec"]["trials"]["minReplicates"] = 3
    # Three identical submissions (same bytes, same second) and one that will be killed.
    prepared = [sub.prepare(same) for _ in range(3)] + [sub.prepare(write_spec(sleeper_doc, "sleeper.yaml"))]
    run_ids = [p.run_id for p in prepared]
    assert len(set(run_ids)) == 4
    sleeper = run_ids[3]
    instance = sub.get_instance(home)
    for rid in run_ids:
        sub.register_partition(instance, rid)

    env = _env(home)
    daemon_log = open(home / "daemon.log", "w")
    daemon = subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-w", str(REPO / "workspace.yaml")], cwd=REPO,
                              env=env, stdout=daemon_log, stderr=subprocess.STDOUT, start_new_session=True)
    killed = False
    try:
        # 4 concurrent submissions through the queue (QueuedRunCoordinator, max_concurrent_runs: 1).
        launches = [subprocess.Popen([str(BIN / "dagster"), "job", "launch", "-w", str(REPO / "workspace.yaml"),
                                      "-j", sub.JOB_NAME, "--tags", json.dumps({"dagster/partition": rid})],
                                     cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                    for rid in run_ids]
        for p in launches:
            out, _ = p.communicate(timeout=300)
            assert p.returncode == 0, out[-3000:]

        # 50 concurrent queries while the queue runs: every one answers (no lock, no half file).
        def one_query(i: int) -> int:
            return query("SELECT count(*) AS n FROM measurement_fact", home).table.column(0)[0].as_py()

        with concurrent.futures.ThreadPoolExecutor(max_workers=50) as pool:
            counts = list(pool.map(one_query, range(50)))
        assert len(counts) == 50 and all(isinstance(n, int) and n >= 0 for n in counts)

        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            claim = home / "liveness" / f"{sleeper}.json"
            if not killed and _phase(home, sleeper) == "Running" and claim.is_file():
                time.sleep(1)  # inside the sleeping suite
                pid = json.loads(claim.read_text())["pid"]
                os.kill(pid, signal.SIGKILL)
                killed = True
            runs = instance.get_runs(filters=dg.RunsFilter(job_name=sub.JOB_NAME))
            done = [r for r in runs if r.status in (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE,
                                                    dg.DagsterRunStatus.CANCELED)]
            if killed and len(runs) == 4 and len(done) == 4 and all(
                    _phase(home, rid) in ("Succeeded", "Failed") for rid in run_ids):
                break
            time.sleep(2)
        else:
            pytest.fail(f"queue did not drain in {DEADLINE_S}s: "
                        + ", ".join(f"{r.tags.get('dagster/partition')}={r.status.value}" for r in
                                    instance.get_runs(filters=dg.RunsFilter(job_name=sub.JOB_NAME)))
                        + f"; phases {[_phase(home, r) for r in run_ids]}; daemon log tail: "
                        + (home / "daemon.log").read_text()[-2000:])
        orphans = _suites_of(home / "runs" / sleeper)
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait(10)
        daemon_log.close()
        kill_processes_of_home(home)  # the killed run's suite was orphaned: it is ours to end

    assert orphans == 0  # the killed run's suite was ended when the run was reaped
    runs = {r.tags["dagster/partition"]: r for r in instance.get_runs(filters=dg.RunsFilter(job_name=sub.JOB_NAME))}
    assert set(runs) == set(run_ids)  # nothing lost, nothing merged
    assert runs[sleeper].status == dg.DagsterRunStatus.FAILURE
    st = json.loads((home / "runs" / sleeper / "status.json").read_text())
    assert st["phase"] == "Failed" and "is gone without finishing" in st["message"], st["message"]
    for rid in run_ids[:3]:
        assert runs[rid].status == dg.DagsterRunStatus.SUCCESS, rid
        assert _phase(home, rid) == "Succeeded"
        launches = json.loads((home / "runs" / rid / "structured" / f"{rid}_launches.json").read_text())
        assert sorted(r["replicate"] for r in launches) == [1, 2, 3]  # exactly its own replicates
    # One benchmark at a time: the runs' [start, end] never overlap.
    spans = sorted((rec.start_time, rec.end_time) for rec in instance.get_run_records(
        filters=dg.RunsFilter(job_name=sub.JOB_NAME)) if rec.start_time)
    assert all(a_end <= b_start + 1e-3 for (_, a_end), (b_start, _) in zip(spans, spans[1:])), spans
    try:
        n = query("SELECT count(DISTINCT run_id) AS n FROM benchmark_run_fact", home).table.column(0)[0].as_py()
    except BenchrunError as exc:  # pragma: no cover - the message says what broke
        pytest.fail(str(exc))
    assert n >= 3
