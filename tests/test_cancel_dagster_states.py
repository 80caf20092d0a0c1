"""`benchrun cancel` and the Dagster run's end state (found in review).

A: a run whose process was already dead (``benchrun run`` killed -9 while Analyzing, holding the
``duckdb_writer`` pool slot) was canceled by asking the run launcher to terminate its Dagster run;
for a run executed in the CLI's own process the launcher reports CANCELING and gives up, and
nothing ever ended it: CANCELING for ever, the pool slot held (later runs' warehouse steps waited
for good), and the reaper skipped it (in progress only when STARTED/STARTING).

B: a same-host cancel sent SIGINT straight to the run's process, which Dagster took for an
unexplained interrupt: the Dagster run ended FAILURE, the failure sensor marked the run Failed, and
the cancel answered "already ended in phase Failed ... nothing canceled".
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POOL = "duckdb_writer"


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _instance(home: Path):
    from benchrun import submit as sub

    instance = sub.get_instance(home)
    storage = instance.event_log_storage
    assert storage.supports_global_concurrency_limits
    storage.set_concurrency_slots(POOL, 1)
    return instance


def _cli_run(instance, run_id: str, pid: int, *, status=None):
    """A Dagster run as ``benchrun run`` makes it (executed in its process: executor tags, no gRPC info)."""
    import dagster as dg
    from dagster._core.test_utils import create_run_for_test

    from benchrun.liveness import JOB_NAME, PARTITION_TAG, TAG_HOST, TAG_PID

    return create_run_for_test(instance, job_name=JOB_NAME, status=status or dg.DagsterRunStatus.STARTED,
                               tags={PARTITION_TAG: run_id, TAG_HOST: socket.gethostname(), TAG_PID: str(pid)})


def _run_dir(home: Path, run_id: str, phase: str, dagster_run_id: str):
    from benchrun.rundir import RunDir

    rd = RunDir(home, run_id)
    rd.create()
    rd.write_status({"run_id": run_id, "phase": phase, "conditions": [], "dagster_run_id": dagster_run_id})
    return rd


def _claim(home: Path, run_id: str, pid: int, dagster_run_id: str) -> None:
    from benchrun.liveness import liveness_path

    path = liveness_path(home, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"run_id": run_id, "host": socket.gethostname(), "pid": pid, "pid_start": None,
                                "dagster_run_id": dagster_run_id}))


def _held_by(instance) -> set[str]:
    return {s.run_id for s in instance.event_log_storage.get_concurrency_info(POOL).claimed_slots}


def test_cancel_of_a_run_whose_process_was_killed_ends_its_dagster_run_canceled_and_frees_its_slot(bench_home):
    import dagster as dg

    from benchrun.runctl import cancel_run

    instance = _instance(bench_home)
    run_id, dead = "killed-20261207000000-aaaaaaaa", _dead_pid()
    run = _cli_run(instance, run_id, dead)
    assert instance.event_log_storage.claim_concurrency_slot(POOL, run.run_id, "warehouse_views").is_claimed
    rd = _run_dir(bench_home, run_id, "Analyzing", run.run_id)
    _claim(bench_home, run_id, dead, run.run_id)  # the claim its killed process left behind

    out = cancel_run(run_id, home=bench_home, instance=instance)
    assert out.phase == "Canceled" and run.run_id in out.how and "terminate" in out.how
    assert rd.read_status()["phase"] == "Canceled"
    assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.CANCELED  # was: CANCELING for ever
    assert _held_by(instance) == set()  # was: the pool slot held, later warehouse steps waited for good


def test_the_reaper_mends_a_run_left_canceling_by_an_earlier_cancel(bench_home):
    """A home wedged before the fix: the next CLI start ends it CANCELED (not FAILURE) and frees its slot;
    a CANCELING run whose process still runs is left to it."""
    import dagster as dg

    from benchrun.liveness import reap_dead_runs

    instance = _instance(bench_home)
    run_id = "wedged-20261207000000-aaaaaaaa"
    stuck = _cli_run(instance, run_id, _dead_pid())
    assert instance.event_log_storage.claim_concurrency_slot(POOL, stuck.run_id, "warehouse_views").is_claimed
    instance.report_run_canceling(stuck)
    rd = _run_dir(bench_home, run_id, "Canceled", stuck.run_id)
    live = _cli_run(instance, "live-20261207000000-aaaaaaaa", os.getpid())
    instance.report_run_canceling(live)

    assert reap_dead_runs(bench_home, instance) == []  # nothing marked Failed
    assert instance.get_run_by_id(stuck.run_id).status == dg.DagsterRunStatus.CANCELED
    assert stuck.run_id not in _held_by(instance)
    assert rd.read_status()["phase"] == "Canceled"  # not turned Failed
    assert instance.get_run_by_id(live.run_id).status == dg.DagsterRunStatus.CANCELING
    instance.report_run_canceled(instance.get_run_by_id(live.run_id), "test over")


def test_the_reaper_ends_a_canceling_run_its_dead_claim_names(bench_home):
    """A daemon-launched run (no executor tags) whose worker died while its cancel was in progress:
    its dead claim names the Dagster run, which is ended CANCELED, not left CANCELING."""
    import dagster as dg
    from dagster._core.test_utils import create_run_for_test

    from benchrun.liveness import JOB_NAME, PARTITION_TAG, reap_dead_runs

    instance = _instance(bench_home)
    run_id = "daemon-20261207000000-aaaaaaaa"
    run = create_run_for_test(instance, job_name=JOB_NAME, status=dg.DagsterRunStatus.STARTED,
                              tags={PARTITION_TAG: run_id})
    instance.report_run_canceling(run)
    _run_dir(bench_home, run_id, "Canceled", run.run_id)
    _claim(bench_home, run_id, _dead_pid(), run.run_id)
    reap_dead_runs(bench_home, instance)
    assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.CANCELED


_EXECUTOR = """
import sys, time
from pathlib import Path
import dagster as dg
from benchrun import submit
from benchrun.automation.failures import record_orchestrator_failure
from benchrun.liveness import JOB_NAME, PARTITION_TAG, start_heartbeat
from benchrun.rundir import RunDir

home, run_id = Path(sys.argv[1]), sys.argv[2]

@dg.op
def benchmark(context):
    RunDir(home, run_id).update_status(dagster_run_id=context.run_id)  # as lifecycle.admit does
    start_heartbeat(home, run_id, dagster_run_id=context.run_id)
    print("ready", flush=True)
    time.sleep(60)

@dg.job(name=JOB_NAME)
def job():
    benchmark()

instance = submit.get_instance(home)
result = job.execute_in_process(instance=instance, raise_on_error=False, tags={PARTITION_TAG: run_id})
run = instance.get_run_by_id(result.run_id)
print("ended", run.status.value, flush=True)
# what the run-status sensors then do (run_failure_sensor / run_canceled_sensor), before the cancel's own mark
record_orchestrator_failure(run, "Dagster run ended " + run.status.value, home,
                            canceled=run.status == dg.DagsterRunStatus.CANCELED)
"""


def test_a_same_host_cancel_ends_the_dagster_run_canceled_not_failed(bench_home):
    """The claim's process runs a real Dagster execution; the cancel marks its Dagster run CANCELING
    before the SIGINT, so Dagster ends it CANCELED and the sensors agree: the run is Canceled."""
    import dagster as dg

    from benchrun.runctl import cancel_run

    instance = _instance(bench_home)
    run_id = "busy-20261207000000-aaaaaaaa"
    rd = _run_dir(bench_home, run_id, "Running", "")
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(_EXECUTOR), str(bench_home), run_id],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "BENCHRUN_HOME": str(bench_home)})
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 120)  # a bounded wait: a stuck child fails, not hangs
        assert ready and proc.stdout.readline().strip() == "ready"
        dagster_run_id = rd.read_status()["dagster_run_id"]
        out = cancel_run(run_id, home=bench_home, instance=instance, grace_s=30)
        rest, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0
    # was: FAILURE ("interrupted unexpectedly"), the run marked Failed, and "nothing canceled"
    assert "ended CANCELED" in rest, rest
    assert instance.get_run_by_id(dagster_run_id).status == dg.DagsterRunStatus.CANCELED
    assert out.phase == "Canceled" and f"interrupted its process (pid {proc.pid})" in out.how, out.how
    assert rd.read_status()["phase"] == "Canceled"

