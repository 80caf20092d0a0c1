"""Review of the CLI run lifecycle (found in review):

1. ``benchrun cancel`` of a run whose claiming process was killed (kill -9) while its suites still ran
   said "not admitted yet", left the orphaned suite running and the claim in place.
2. The one-benchmark-at-a-time lock held per home only: two homes on one machine measured at once.
3. A CANCELING Dagster run (its suites may still be stopping) did not hold the turn, though Dagster's
   queue counts it.
4. A claim's liveness compared wall-clock start times (psutil create_time) within 1 s: a clock step
   made a live run read dead, and the next CLI command reaped it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import dagster as dg
import pytest

from benchrun.errors import BenchrunError

ROOT = Path(__file__).resolve().parents[1]
LINUX = Path("/proc/self/stat").exists() and Path("/proc/sys/kernel/random/boot_id").exists()


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _sleeper(env_extra: dict[str, str] | None = None, argv: list[str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(argv or [sys.executable, "-c", "import time; time.sleep(120)"],
                            env={**os.environ, **(env_extra or {})})


# --- 1. cancel of a run whose claiming process is dead -------------------------------------------------


def _running_run(home: Path, run_id: str, dagster_run_id: str | None, pid: int) -> tuple[object, Path]:
    from benchrun.liveness import liveness_path
    from benchrun.paths import benchrun_home
    from benchrun.rundir import RunDir, utc_now

    rd = RunDir(benchrun_home(home), run_id)
    rd.create()
    rd.write_status({"run_id": run_id, "phase": "Running", "conditions": [], "started_utc": utc_now(),
                     "dagster_run_id": dagster_run_id})
    claim = liveness_path(home, run_id)
    claim.parent.mkdir(parents=True, exist_ok=True)
    claim.write_text(json.dumps({"run_id": run_id, "host": socket.gethostname(), "pid": pid, "pid_start": None,
                                 "dagster_run_id": dagster_run_id}))
    return rd, claim


def _gone(proc: subprocess.Popen, timeout_s: float = 10.0) -> bool:
    try:
        proc.wait(timeout=timeout_s)
        return True
    except subprocess.TimeoutExpired:
        return False


def _started_by_a_dead_process(bench_home, run_id: str):
    """A run admitted and STARTED in Dagster whose executing process (this host, a dead pid) is gone:
    (instance, Dagster run, run directory, its claim, the dead pid)."""
    from dagster._core.test_utils import create_run_for_test

    from benchrun import submit as sub
    from benchrun.liveness import JOB_NAME, PARTITION_TAG, TAG_HOST, TAG_PID

    instance = sub.get_instance(bench_home)
    dead = _dead_pid()
    run = create_run_for_test(instance, job_name=JOB_NAME, status=dg.DagsterRunStatus.STARTED,
                              tags={PARTITION_TAG: run_id, TAG_HOST: socket.gethostname(), TAG_PID: str(dead)})
    rd, claim = _running_run(bench_home, run_id, run.run_id, dead)
    return instance, run, rd, claim, dead


def test_cancel_of_a_run_whose_process_was_killed_kills_its_orphaned_suite_and_drops_the_claim(bench_home):
    from benchrun.runctl import cancel_run

    run_id = "orphan-20261207000000-aaaaaaaa"
    instance, run, rd, claim, dead = _started_by_a_dead_process(bench_home, run_id)
    suite = _sleeper({"BENCHRUN_RUN_DIR": str(rd.path)})  # the suite the killed process left running
    try:
        out = cancel_run(run_id, home=bench_home, instance=instance)
        assert out.phase == "Canceled"
        assert "not admitted" not in out.how, out.how  # was: "not admitted yet: Dagster run(s) ... were starting"
        assert f"pid {dead} on {socket.gethostname()}" in out.how and "gone without finishing" in out.how
        assert "1 orphaned suite process(es) killed" in out.how, out.how
        assert _gone(suite), "the orphaned suite still runs"  # was: alive 80 s later
        assert not claim.exists()  # was: left in place
        assert rd.read_status()["phase"] == "Canceled"
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.CANCELED
    finally:
        suite.kill()
        suite.wait()


def test_cancel_of_an_admitted_run_no_process_claims_does_not_say_not_admitted(bench_home):
    from benchrun.runctl import cancel_run

    run_id = "noclaim-20261207000000-aaaaaaaa"
    instance, run, _rd, claim, dead = _started_by_a_dead_process(bench_home, run_id)
    claim.unlink()  # started (started_utc), but no claim left
    out = cancel_run(run_id, home=bench_home, instance=instance)
    assert out.phase == "Canceled" and run.run_id in out.how and "not admitted" not in out.how, out.how


# --- 2. the machine-wide lock ---------------------------------------------------------------------------

_HOLDER = """
import sys, time
from pathlib import Path
from benchrun.runlock import benchmark_turn
with benchmark_turn(Path(sys.argv[1]), sys.argv[2]):
    print("held", flush=True)
    time.sleep(float(sys.argv[3]))
"""


def _hold_turn(home: Path, run_id: str, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(_HOLDER), str(home), run_id, str(seconds)],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_two_homes_on_one_machine_take_turns(tmp_path, monkeypatch):
    from benchrun.runlock import TurnRefused, benchmark_turn

    shared = tmp_path / "machine" / "benchmark.lock"
    monkeypatch.setenv("BENCHRUN_MACHINE_LOCK", str(shared))
    home_a, home_b = tmp_path / "homeA", tmp_path / "homeB"
    holder = _hold_turn(home_a, "run-a", 4.0)
    try:
        with pytest.raises(TurnRefused, match=rf"run run-a of home {home_a.resolve()} \(pid {holder.pid} on .*\) "
                                              "holds this machine's one-benchmark-at-a-time turn"):
            with benchmark_turn(home_b, "run-b", wait=False):
                pass
        said: list[str] = []
        t0 = time.monotonic()
        with benchmark_turn(home_b, "run-b", on_wait=said.append):  # waits for home A's run to end
            waited = time.monotonic() - t0
        assert waited > 2.0, "home B measured while home A's run held the machine"
        assert len(said) == 1 and "run run-a of home" in said[0], said
    finally:
        holder.kill()
        holder.wait()


def test_the_machine_lock_is_off_when_asked_and_made_for_every_user(tmp_path, monkeypatch):
    from benchrun.runlock import benchmark_turn

    monkeypatch.setenv("BENCHRUN_MACHINE_LOCK", "off")
    with benchmark_turn(tmp_path / "a", "run-a"), benchmark_turn(tmp_path / "b", "run-b", wait=False):
        pass  # two homes at once: no machine lock
    shared = tmp_path / "m.lock"
    monkeypatch.setenv("BENCHRUN_MACHINE_LOCK", str(shared))
    old = os.umask(0o077)
    try:
        with benchmark_turn(tmp_path / "a", "run-a"):
            assert shared.stat().st_mode & 0o777 == 0o666  # whatever the umask: other users' runs open it
    finally:
        os.umask(old)


def test_a_machine_lock_another_user_made_is_opened_read_only(tmp_path):
    from benchrun.runlock import _open_machine_lock

    lock = tmp_path / "m.lock"
    lock.write_text("")
    lock.chmod(0o444)
    if os.access(lock, os.W_OK):
        pytest.skip("running as root: a read-only file opens for writing all the same")
    fd = _open_machine_lock(lock)
    os.close(fd)


# --- 3. a CANCELING Dagster run holds the turn ---------------------------------------------------------


def test_a_canceling_dagster_run_holds_the_turn(bench_home):
    import dagster as dg
    from dagster._core.test_utils import create_run_for_test

    from benchrun import submit as sub
    from benchrun.liveness import JOB_NAME, PARTITION_TAG, TAG_HOST, TAG_PID, in_progress_holder
    from benchrun.runlock import benchmark_turn

    instance = sub.get_instance(bench_home)
    tearing_down = create_run_for_test(  # its process (this one) still runs: not reaped
        instance, job_name=JOB_NAME, status=dg.DagsterRunStatus.CANCELING,
        tags={PARTITION_TAG: "canceled-20261207000000-aaaaaaaa", TAG_HOST: socket.gethostname(),
              TAG_PID: str(os.getpid())})
    assert tearing_down.run_id in (in_progress_holder(instance) or "")
    with pytest.raises(BenchrunError, match=f"Dagster run {tearing_down.run_id}, CANCELING"):
        with benchmark_turn(bench_home, "run-x", wait=False, instance=instance):
            pass
    instance.report_run_canceled(instance.get_run_by_id(tearing_down.run_id), "test over")
    with benchmark_turn(bench_home, "run-x", wait=False, instance=instance):
        pass


# --- 4. liveness immune to clock steps -----------------------------------------------------------------


@pytest.mark.skipif(not LINUX, reason="start ticks and boot id are read from /proc")
def test_a_clock_step_does_not_make_a_live_claim_dead(tmp_path):
    from benchrun.liveness import alive, beat, executor_of, executor_tags

    me = beat(tmp_path, "run-a")
    assert me["start_ticks"] and me["boot_id"]
    assert alive({**me, "pid_start": me["pid_start"] - 10})  # the wall clock stepped 10 s: still alive
    assert not alive({**me, "start_ticks": me["start_ticks"] + 7})  # another process given the pid
    assert not alive({**me, "boot_id": "another-boot"})
    tags = executor_tags()
    assert alive({**executor_of(tags), "pid_start": me["pid_start"] + 10})
    # a claim without them (an earlier release's) keeps the create_time rule
    old = {k: v for k, v in me.items() if k not in ("start_ticks", "boot_id")}
    assert alive(old) and not alive({**old, "pid_start": me["pid_start"] - 10})


@pytest.mark.skipif(not LINUX, reason="start ticks and boot id are read from /proc")
def test_start_ticks_of_a_real_process_whose_name_has_parentheses(tmp_path):
    import psutil

    from benchrun.liveness import alive
    from benchrun.procstart import stamp, start_ticks

    odd = tmp_path / "a) b (c"
    shutil.copy(shutil.which("sleep"), odd)
    proc = _sleeper(argv=[str(odd), "60"])
    try:
        time.sleep(0.2)
        ticks = start_ticks(proc.pid)
        expect = (psutil.Process(proc.pid).create_time() - psutil.boot_time()) * os.sysconf("SC_CLK_TCK")
        assert ticks is not None and abs(ticks - expect) < 5
        record = {"host": socket.gethostname(), "pid": proc.pid, **stamp(proc.pid)}
        assert alive({**record, "pid_start": record["pid_start"] + 10})
        proc.kill()
        proc.wait()
        assert not alive(record)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(not LINUX, reason="start ticks and boot id are read from /proc")
def test_the_fence_knows_its_own_process_after_a_clock_step(tmp_path):
    from benchrun.liveness import identity
    from benchrun.rundir import FinalPhaseKept, RunDir

    rd = RunDir(tmp_path, "fenced-20261207000000-aaaaaaaa")
    me = identity()
    with pytest.raises(FinalPhaseKept):  # still this process: fenced, though its start time reads 10 s off
        rd._fence({"phase": "Canceled", "ended_under": {**me, "pid_start": me["pid_start"] + 10}})
    rd._fence({"phase": "Canceled", "ended_under": {**me, "start_ticks": me["start_ticks"] - 3}})  # a later one


def test_a_homes_holder_record_whose_process_is_gone_is_not_believed(tmp_path, monkeypatch):
    """The home's lock names its holder from the record it wrote; a record left by a process that is gone
    (the turn since taken by one that wrote none) is not believed, as the machine lock's is not."""
    from benchrun.runlock import TurnRefused, benchmark_turn

    monkeypatch.setenv("BENCHRUN_MACHINE_LOCK", "off")
    home = tmp_path / "home"
    holder = _hold_turn(home, "run-a", 30.0)
    try:
        with pytest.raises(TurnRefused, match=rf"run run-a \(pid {holder.pid} on "):
            with benchmark_turn(home, "run-b", wait=False):
                pass
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        record = home / "locks" / "benchmark.holder.json"
        stale = json.loads(record.read_text())
        record.write_text(json.dumps({**stale, "run_id": "run-old", "pid": gone.pid}))
        with pytest.raises(TurnRefused, match="another benchrun process holds") as refused:
            with benchmark_turn(home, "run-b", wait=False):
                pass
        assert "run-old" not in str(refused.value)
    finally:
        holder.kill()
        holder.wait()


def test_a_run_the_daemon_starts_while_the_turn_settles_is_seen_before_the_benchmark(tmp_path, monkeypatch):
    """Review 2026-12-08: `benchrun run` asked Dagster for a run in progress, then waited up to 300 s for the
    last run's figure worker inside the turn: a run the daemon dequeued meanwhile (it takes no lock) and the
    CLI's benchmark both ran. The wait (``settle``) now comes first, and the instance is asked after it."""
    import dagster as dg

    from benchrun.liveness import JOB_NAME, PARTITION_TAG
    from benchrun.runlock import TurnRefused, benchmark_turn

    monkeypatch.setenv("BENCHRUN_MACHINE_LOCK", "off")
    instance = dg.DagsterInstance.ephemeral()

    def the_daemon_starts_a_nightly() -> None:
        instance.add_run(dg.DagsterRun(job_name=JOB_NAME, run_id="d" * 8 + "-0000-0000-0000-000000000000",
                                       status=dg.DagsterRunStatus.STARTED, tags={PARTITION_TAG: "nightly-x"}))

    with pytest.raises(TurnRefused, match=r"run nightly-x \(Dagster run d+-0000-0000-0000-000000000000, STARTED\) "
                                          "holds the one-benchmark-at-a-time turn"):
        with benchmark_turn(tmp_path / "home", "cli-run", wait=False, instance=instance,
                            settle=the_daemon_starts_a_nightly):
            pytest.fail("the CLI's benchmark started beside the daemon's run")
