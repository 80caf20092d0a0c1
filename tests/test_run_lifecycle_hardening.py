"""Issue 16 B, C, D, E, K, M: run liveness, unique run ids, the one-at-a-time turn, storage
errors, concurrent first use, failure reasons and stale conditions, damaged status.json."""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from benchrun import submit as sub
from benchrun.errors import BenchrunError
from benchrun.liveness import TAG_HOST, TAG_PID, TAG_PID_START, alive, beat, in_progress_holder, reap_dead_runs
from benchrun.rundir import RunDir
from benchrun.runlock import benchmark_turn
from helpers import tiny_spec

REPO = Path(__file__).resolve().parents[1]
SLEEPER = {"name": "sleeper", "repoCommand": "python -c 'import time; time.sleep(60)'", "timeoutSeconds": 120}


class _FrozenClock(dt.datetime):
    @classmethod
    def now(cls, tz=None):  # every submission lands in the same second
        return dt.datetime(2026, 12, 1, 0, 0, 0, tzinfo=dt.timezone.utc)


def test_identical_submissions_in_the_same_second_are_two_runs(bench_home, canary_doc, write_spec, monkeypatch):
    monkeypatch.setattr(sub.dt, "datetime", _FrozenClock)
    spec = write_spec(canary_doc)
    a, b = sub.prepare(spec), sub.prepare(spec)
    assert a.run_id != b.run_id and a.run_dir != b.run_dir
    assert b.run_id == a.run_id + "-2" and len(b.run_id) <= 63
    assert RunDir.for_run(a.run_id).read_status()["run_id"] == a.run_id
    assert RunDir.for_run(b.run_id).read_status()["run_id"] == b.run_id
    # A tick with an explicit time stays idempotent (schedules and sensors rely on it).
    now = dt.datetime(2026, 12, 1, 1, 0, 0, tzinfo=dt.timezone.utc)
    assert sub.prepare(spec, now=now).run_id == sub.prepare(spec, now=now).run_id


def test_long_names_keep_the_suffix_inside_63_chars() -> None:
    rid = sub.mint_run_id("x" * 80, dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), "sha256:" + "a" * 64, 12)
    assert len(rid) <= 63 and rid.endswith("-aaaaaaaa-12")


def test_the_turn_is_refused_naming_the_holder(tmp_path: Path) -> None:
    with benchmark_turn(tmp_path, "run-a"):
        with pytest.raises(BenchrunError, match=r"run run-a \(pid \d+ on .*\) holds the one-benchmark-at-a-time"):
            with benchmark_turn(tmp_path, "run-b", wait=False):
                pass
    with benchmark_turn(tmp_path, "run-b", wait=False):  # released: the next one gets it
        pass


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _started_run(instance, run_id: str, pid: int, start: float | None):
    import dagster as dg

    tags = {"dagster/partition": run_id, TAG_HOST: os.uname().nodename, TAG_PID: str(pid), TAG_PID_START: repr(start)}
    run = instance.create_run_for_job(job_def=_job(), run_id=None, tags=tags)
    instance.handle_run_event(run.run_id, dg.DagsterEvent(
        event_type_value="PIPELINE_START", job_name=run.job_name, message="started"))
    return instance.get_run_by_id(run.run_id)


def _job():
    from bench_assets.definitions import defs

    return defs.resolve_job_def(sub.JOB_NAME)


@pytest.mark.slow
def test_a_dagster_run_in_progress_holds_the_turn_and_a_dead_one_is_reaped(bench_home, canary_doc, write_spec):
    import dagster as dg

    instance = sub.get_instance()
    prepared = sub.prepare(write_spec(canary_doc))
    live = _started_run(instance, prepared.run_id, os.getpid(), None)
    assert live.status == dg.DagsterRunStatus.STARTED
    with pytest.raises(BenchrunError, match=f"run {prepared.run_id} \\(Dagster run {live.run_id}"):
        with benchmark_turn(bench_home, "run-x", wait=False, instance=instance):
            pass
    instance.report_run_failed(live, "test over")
    dead = _started_run(instance, prepared.run_id, _dead_pid(), None)
    with benchmark_turn(bench_home, "run-x", wait=False, instance=instance):  # the dead run is reaped first
        assert instance.get_run_by_id(dead.run_id).status == dg.DagsterRunStatus.FAILURE
    st = RunDir.for_run(prepared.run_id).read_status()
    assert st["phase"] == "Failed" and "is gone without finishing" in st["message"]


def test_liveness_of_a_claim(tmp_path: Path) -> None:
    me = beat(tmp_path, "run-a")
    assert alive(me)
    assert not alive({**me, "pid": _dead_pid()})
    # the pid was reused by another program: its start differs (ticks where the claim has them, else the time)
    assert not alive({**me, "pid_start": me["pid_start"] - 1000, "start_ticks": None})
    if me.get("start_ticks") is not None:
        assert not alive({**me, "start_ticks": me["start_ticks"] - 1000})
    old = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)).isoformat()
    assert not alive({"host": "elsewhere", "pid": 1, "heartbeat_utc": old})
    assert alive({"host": "elsewhere", "pid": 1, "heartbeat_utc": dt.datetime.now(dt.timezone.utc).isoformat()})


def test_a_killed_executor_not_yet_waited_for_is_dead() -> None:
    """kill -9 leaves a zombie until its parent waits; the soak test's run worker was one."""
    import socket
    import time

    import psutil

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        record = {"host": socket.gethostname(), "pid": child.pid, "pid_start": psutil.Process(child.pid).create_time()}
        assert alive(record)
        child.kill()
        deadline = time.monotonic() + 10
        while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.05)
        assert psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE  # not waited for yet
        assert not alive(record)
    finally:
        child.kill()
        child.wait()


def _cli(home: Path, *args: str, env_extra: dict[str, str] | None = None, **kw) -> subprocess.Popen:
    env = {**os.environ, "BENCHRUN_HOME": str(home), "PYTHONPATH": str(REPO), "COLUMNS": "200", **(env_extra or {})}
    env.pop("DAGSTER_HOME", None)
    return subprocess.Popen([sys.executable, "-m", "benchrun.cli", *args], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


@pytest.mark.slow
def test_kill_9_mid_run_is_failed_at_the_next_cli_start_and_frees_the_queue(bench_home, canary_doc, write_spec):
    """`benchrun run SPEC & sleep; kill -9 $!` left status Running and the Dagster run STARTED for ever."""
    import dagster as dg

    tiny_spec(canary_doc, [SLEEPER])
    spec = write_spec(canary_doc)
    proc = _cli(bench_home, "run", str(spec), start_new_session=True)
    deadline = time.monotonic() + 120
    run_dir = None
    while time.monotonic() < deadline:
        runs = list((bench_home / "runs").glob("*/status.json")) if (bench_home / "runs").is_dir() else []
        if runs and json.loads(runs[0].read_text()).get("phase") == "Running":
            run_dir = runs[0].parent
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.5)
    assert run_dir is not None, "the run never reached Running"
    while time.monotonic() < deadline and not _suite_processes(run_dir):  # the sleeper suite has started
        time.sleep(0.5)
    assert _suite_processes(run_dir), "the suite never started"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert json.loads((run_dir / "status.json").read_text())["phase"] == "Running"
    # `benchrun runs` (the next CLI start) shows it Failed with the reason.
    out = _cli(bench_home, "runs", "--json")
    stdout, stderr = out.communicate(timeout=120)
    assert out.returncode == 0, stderr
    [row] = json.loads(stdout)
    assert row["phase"] == "Failed"
    st = json.loads((run_dir / "status.json").read_text())
    assert "is gone without finishing" in st["message"] and f"pid {proc.pid}" in st["message"]
    # Its suite (in its own process group, so the kill did not reach it) is ended too.
    assert _suite_processes(run_dir) == [] and "1 orphaned suite process(es) of the run were killed" in st["message"]
    # The Dagster run no longer holds the queue once an instance-aware pass ran (CLI run or sensor).
    instance = sub.get_instance()
    started = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
    assert len(started) == 1
    reap_dead_runs(bench_home, instance)
    assert instance.get_run_by_id(started[0].run_id).status == dg.DagsterRunStatus.FAILURE
    assert in_progress_holder(instance) is None


def _suite_processes(run_dir: Path) -> list[int]:
    import psutil

    out = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("BENCHRUN_RUN_DIR") == str(run_dir) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


_FIRST_USE = """
import sys
from benchrun import submit
inst = submit.get_instance(sys.argv[1])
submit.register_partition(inst, sys.argv[2])
print("ok")
"""


@pytest.mark.slow
def test_concurrent_first_use_of_a_new_home(tmp_path: Path) -> None:
    """Two runs on a brand-new home at once: one crashed with 'table alembic_version already exists'."""
    home = tmp_path / "fresh"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("DAGSTER_HOME", None)
    procs = [subprocess.Popen([sys.executable, "-c", _FIRST_USE, str(home), f"run-{i}"], env=env, cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0 and out.strip() == "ok", err[-2000:]


def _failure_result(*chain: tuple[str, str]):
    cause = None
    for cls_name, message in reversed(chain):
        cause = types.SimpleNamespace(cls_name=cls_name, message=message, cause=cause)
    event = types.SimpleNamespace(is_step_failure=True, step_key="run_evidence",
                                  step_failure_data=types.SimpleNamespace(error=cause))
    return types.SimpleNamespace(all_events=[event])


def test_failure_reason_keeps_benchruns_message() -> None:
    from benchrun.commands import _failure_reason

    result = _failure_result(
        ("DagsterExecutionStepExecutionError", "Error occurred while materializing asset run_evidence"),
        ("BenchrunError", "storing the evidence of run r in the artifact store failed: the S3 artifact store is unreachable"),
        ("EndpointConnectionError", 'Could not connect to the endpoint URL: "http://127.0.0.1:1/"'),
    )
    assert _failure_reason(result) == ("step run_evidence: storing the evidence of run r in the artifact store failed: "
                                       "the S3 artifact store is unreachable")
    plain = _failure_result(("DagsterExecutionStepExecutionError", "wrapper"), ("ValueError", "bad value"))
    assert _failure_reason(plain) == "step run_evidence: bad value"
    full = _failure_result(("DagsterExecutionStepExecutionError", "wrapper"),
                           ("OSError", "[Errno 28] No space left on device: '/h/runs/r/status.json'"))
    assert _failure_reason(full).startswith(
        "step run_evidence failed: the disk is full at /h/runs/r/status.json; nothing was half-written")
    ro = _failure_result(("DagsterExecutionStepExecutionError", "wrapper"),
                         ("OSError", "[Errno 30] Read-only file system: '/h/objects'"))
    assert "the file system is read-only at /h/objects" in _failure_reason(ro)


def test_a_successful_retry_clears_the_failed_condition(bench_home, canary_doc, write_spec):
    from benchrun.lifecycle import finalize
    from benchrun.rundir import mark_run_failed

    prepared = sub.prepare(write_spec(canary_doc))
    rd = RunDir.for_run(prepared.run_id)
    rd.update_status(phase="Analyzing", outcome="succeeded")
    mark_run_failed(rd.home, rd.run_id, "step run_evidence: S3 down")
    rd.update_status(phase="Analyzing")  # the retried step runs again and succeeds
    st = finalize(rd)
    assert st["phase"] == "Succeeded" and st.get("message") is None
    assert "Failed" not in {c["type"] for c in st["conditions"]}


def test_a_canceled_run_keeps_what_it_measured_for_a_retry(bench_home, canary_doc, write_spec):
    """Canceled after its evidence, then retried: the retry ends with what the suites measured (it
    ended Succeeded with outcome "canceled" and a Canceled=True condition)."""
    from benchrun.lifecycle import finalize
    from benchrun.rundir import mark_run_canceled

    prepared = sub.prepare(write_spec(canary_doc))
    rd = RunDir.for_run(prepared.run_id)
    rd.update_status(phase="Analyzing", outcome="succeeded")
    assert mark_run_canceled(rd.home, rd.run_id, "canceled by the user")
    st = rd.read_status()
    assert (st["phase"], st["outcome"], st["outcome_measured"]) == ("Canceled", "canceled", "succeeded")
    st = finalize(rd)  # the retried steps ran again and succeeded
    assert (st["phase"], st["outcome"]) == ("Succeeded", "succeeded")
    assert not {"Failed", "Canceled"} & {c["type"] for c in st["conditions"] if c["status"] == "True"}


@pytest.mark.parametrize("exc, text", [
    (OSError(errno.ENOSPC, "No space left on device", "/h/objects/x"), "the disk is full at /h/objects/x"),
    (OSError(errno.EROFS, "Read-only file system", "/h/runs"), "the file system is read-only at /h/runs"),
])
def test_storage_errors_become_benchruns_message(bench_home, canary_doc, write_spec, exc, text):
    from benchrun.lifecycle import load_pinned, record_evidence

    prepared = sub.prepare(write_spec(canary_doc))
    rd = RunDir.for_run(prepared.run_id)

    class Broken:
        def put_run_dir(self, *a, **k):
            raise exc

    with pytest.raises(BenchrunError) as info:
        record_evidence(rd, load_pinned(rd), open_store_for=lambda template, days: Broken())
    message = str(info.value)
    assert message.startswith(f"storing the evidence of run {rd.run_id} in the artifact store failed: {text}")
    assert "nothing was half-written" in message


def test_s3_down_is_named(bench_home) -> None:
    from botocore.exceptions import EndpointConnectionError

    from benchrun.storage_errors import describe_storage_error

    try:
        try:
            raise EndpointConnectionError(endpoint_url="http://127.0.0.1:1/")
        except EndpointConnectionError as inner:
            raise RuntimeError("upload failed") from inner
    except RuntimeError as exc:
        message = describe_storage_error(exc, "storing run r")
    assert message is not None and "S3 artifact store is unreachable" in message and "127.0.0.1:1" in message


def test_one_damaged_status_json_affects_only_its_run(bench_home, canary_doc, write_spec) -> None:
    """One truncated status.json made `benchrun runs` fail for every run."""
    from typer.testing import CliRunner

    from benchrun.cli import app

    a = sub.prepare(write_spec(canary_doc, "a.yaml"))
    canary_doc["metadata"]["name"] = "other"
    b = sub.prepare(write_spec(canary_doc, "b.yaml"))
    bad = RunDir.for_run(a.run_id).status_path
    bad.write_text('{"run_id": "trunc')
    result = CliRunner().invoke(app, ["runs", "--json"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    rows = json.loads(text[text.index("["):])
    by_id = {r["run_id"]: r for r in rows}
    assert by_id[b.run_id]["phase"] == "Pending"
    assert by_id[a.run_id]["phase"] == "Unknown" and str(bad) in by_id[a.run_id]["outcome"]


def test_a_full_disk_under_the_dagster_instance_ends_failed_with_benchruns_message(
        bench_home, canary_doc, write_spec, monkeypatch) -> None:
    """A full disk gave a raw sqlalchemy OperationalError traceback and left the run Running."""
    import sqlalchemy.exc
    from typer.testing import CliRunner

    from benchrun.cli import app

    def full_disk(prepared, **kw):
        RunDir.for_run(prepared.run_id).set_phase("Running")
        raise sqlalchemy.exc.OperationalError("INSERT INTO event_logs ...", {}, Exception("database or disk is full"))

    monkeypatch.setattr(sub, "execute", full_disk)
    result = CliRunner().invoke(app, ["run", str(write_spec(canary_doc))])
    assert isinstance(result.exception, BenchrunError), result.exception
    message = str(result.exception)
    assert "the Dagster instance database could not be written (the disk is full)" in message
    assert "nothing was half-written" in message
    [run_dir] = (bench_home / "runs").iterdir()
    st = json.loads((run_dir / "status.json").read_text())
    assert st["phase"] == "Failed" and "disk is full" in st["message"]
    assert not (bench_home / "liveness" / f"{run_dir.name}.json").exists()  # the claim is dropped


def test_cli_run_refuses_while_another_run_holds_the_turn(bench_home, canary_doc, write_spec) -> None:
    """CLI runs ignored max_concurrent_runs: different specs benchmarked at the same time."""
    from typer.testing import CliRunner

    from benchrun.cli import app

    with benchmark_turn(bench_home, "holder-run"):
        result = CliRunner().invoke(app, ["run", str(write_spec(canary_doc)), "--no-wait"])
    assert isinstance(result.exception, BenchrunError)
    assert "run holder-run (pid" in str(result.exception) and "holds the one-benchmark-at-a-time turn" in str(result.exception)
    assert "printed above, is removed: nothing ran" in str(result.exception)  # the path it printed is gone
    # Refused before anything ran: it leaves no run behind (issue 26: no Failed run, no claim).
    assert list((bench_home / "runs").iterdir()) == []
    assert list((bench_home / "liveness").glob("*.json")) == []


def test_cli_run_draws_figures_in_the_background_only_for_itself(bench_home, canary_doc, write_spec,
                                                                  monkeypatch) -> None:
    """`benchrun run` switched BENCHRUN_REPORT_FIGURES to background for the whole process: later
    in-process runs (tests, an embedding program) then raced the detached figure worker."""
    from typer.testing import CliRunner

    from benchrun.cli import app
    from benchrun.report import worker

    monkeypatch.delenv(worker.ENV, raising=False)
    seen = []

    def fake_execute(prepared, **kw):
        seen.append(os.environ.get(worker.ENV))
        raise BenchrunError("stop here")

    monkeypatch.setattr(sub, "execute", fake_execute)
    CliRunner().invoke(app, ["run", str(write_spec(canary_doc))])
    assert seen == ["background"]
    assert worker.ENV not in os.environ


def _backdate(run_id: str, seconds: float = 3600) -> None:
    rd = RunDir.for_run(run_id)
    created = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=seconds)
    rd.update_status(created_utc=created.isoformat().replace("+00:00", "Z"))


def test_a_run_that_never_wrote_its_liveness_claim_is_failed_and_a_submission_is_not(
        bench_home, canary_doc, write_spec) -> None:
    """Issue 28 item 5: with 20 KB free the run never wrote its claim and stayed Pending for ever
    (the reaper took it for a submission); a real submission (its partition registered) waits."""
    instance = sub.get_instance()
    lost = sub.prepare(write_spec(canary_doc))  # `benchrun run` admitted it, then could not claim it
    time.sleep(1.1)
    waiting = sub.submit(write_spec(canary_doc, "other.yaml"), instance=instance)
    young = sub.prepare(write_spec(canary_doc, "third.yaml"))  # between admission and its claim
    for prepared in (lost, waiting):
        _backdate(prepared.run_id)
    reaped = dict(reap_dead_runs(bench_home, instance))
    assert lost.run_id in reaped and waiting.run_id not in reaped and young.run_id not in reaped
    st = RunDir.for_run(lost.run_id).read_status()
    assert st["phase"] == "Failed" and st["outcome"] == "failed" and "no liveness claim" in st["message"]
    assert RunDir.for_run(waiting.run_id).read_status()["phase"] == "Pending"
    assert RunDir.for_run(young.run_id).read_status()["phase"] == "Pending"


def test_a_claim_that_cannot_be_written_fails_the_run_with_the_reason(bench_home, canary_doc, write_spec,
                                                                      monkeypatch) -> None:
    from typer.testing import CliRunner

    from benchrun import liveness
    from benchrun.cli import app

    def full(path, *a, **kw):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(liveness, "atomic_write_json", full)
    result = CliRunner().invoke(app, ["run", str(write_spec(canary_doc))])
    assert isinstance(result.exception, BenchrunError), result.exception
    assert "liveness claim could not be written (No space left on device)" in str(result.exception)
    [run_dir] = (bench_home / "runs").iterdir()
    st = json.loads((run_dir / "status.json").read_text())
    assert st["phase"] == "Failed" and st["outcome"] == "failed" and "liveness claim" in st["message"]


def test_a_failed_run_never_keeps_the_outcome_succeeded(bench_home, canary_doc, write_spec) -> None:
    """At 150-1500 KB free runs ended Failed with outcome "succeeded" (set before storing failed)."""
    from benchrun.rundir import mark_run_failed

    prepared = sub.prepare(write_spec(canary_doc))
    RunDir.for_run(prepared.run_id).update_status(outcome="succeeded", phase="Analyzing")
    assert mark_run_failed(bench_home, prepared.run_id, "storing the evidence: the disk is full")
    st = RunDir.for_run(prepared.run_id).read_status()
    assert (st["phase"], st["outcome"]) == ("Failed", "failed")


@pytest.mark.slow
def test_a_failed_step_prints_benchruns_reason_not_dagsters_stack_traces(bench_home, canary_doc, write_spec):
    """Issue 28 item 7: S3 dying mid-run ended correctly but printed 9 Dagster stack traces."""
    import dagster as dg

    canary_doc["spec"]["trials"]["minReplicates"] = 3
    tiny_spec(canary_doc, [{"name": "gemm", "repoCommand": "python -m benchrun.suites.gemm",
                                                 "parameters": {"sizes": [64], "iterations": 2}}])
    canary_doc["spec"]["sinks"]["rawArtifacts"]["pathTemplate"] = "s3://bucket/${RUN_ID}/"
    proc = _cli(bench_home, "run", str(write_spec(canary_doc)),
                env_extra={"BENCHRUN_S3_ENDPOINT_URL": "http://127.0.0.1:1", "AWS_ACCESS_KEY_ID": "x",
                           "AWS_SECRET_ACCESS_KEY": "y", "AWS_DEFAULT_REGION": "us-east-1"})
    out, err = proc.communicate(timeout=300)
    text = out + err
    assert proc.returncode == 1, text[-3000:]
    assert "Stack Trace" not in text and "dagster - ERROR" not in text and "Traceback" not in text, text[-3000:]
    [line] = [ln for ln in text.splitlines() if ln.startswith("orchestration failed:")]
    assert "S3 endpoint unreachable" in line
    instance = sub.get_instance()
    [run] = instance.get_runs(filters=dg.RunsFilter(job_name="benchmark_run_job"))
    assert run.status == dg.DagsterRunStatus.FAILURE
    failures = [e for e in instance.all_logs(run.run_id) if e.dagster_event and e.dagster_event.is_step_failure]
    assert failures  # the stack trace stays in the run log


def _benchmark_job():
    """The code location's benchmark job, for dg.reconstructable (re-execution needs one)."""
    from bench_assets.definitions import defs

    return defs.resolve_job_def("benchmark_run_job")


@pytest.mark.slow
def test_a_retry_from_failure_compares_the_run_as_a_first_attempt_does(bench_home, canary_doc, write_spec,
                                                                        monkeypatch):
    """A step after the evidence failed once, the run failure sensor marked the run Failed, and
    the Dagster run was re-executed from its failure: the run ended Succeeded but kept "not
    comparable: candidate ... is not Succeeded (phase Failed, outcome failed)" and a failed
    no_gating_regression check. The resumed run is compared as the run in progress."""
    import dagster as dg

    from bench_assets import stats_assets
    from benchrun.stats.baseline import promote
    from sensors.run_failure import run_failure_sensor

    canary_doc["spec"]["trials"]["minReplicates"] = 3
    tiny_spec(canary_doc, [{"name": "gemm", "repoCommand": "python -m benchrun.suites.gemm",
                                                 "parameters": {"sizes": [64], "iterations": 3}}])
    canary_doc["spec"]["metrics"]["inference"]["primary"].append("gemm/tflops")
    instance = sub.get_instance()
    base = sub.prepare(write_spec(canary_doc, "base.yaml"))
    assert sub.execute(base, instance=instance).success
    promote(base.run_id, alias="canary")
    cand = sub.prepare(write_spec(canary_doc, "cand.yaml"))
    sub.register_partition(instance, cand.run_id)
    job = dg.reconstructable(_benchmark_job)
    tags = {"dagster/partition": cand.run_id}
    real = stats_assets.analysis.trial_statistics_for_run

    def transient(*a, **k):
        raise RuntimeError("transient failure")

    monkeypatch.setattr(stats_assets.analysis, "trial_statistics_for_run", transient)
    with dg.execute_job(job, instance=instance, tags=tags, raise_on_error=False) as first:
        assert not first.success
        first_id = first.run_id
    monkeypatch.setattr(stats_assets.analysis, "trial_statistics_for_run", real)
    failure = next(e for e in instance.all_logs(first_id) if e.dagster_event
                   and e.dagster_event.event_type_value == "PIPELINE_FAILURE")
    context = dg.build_run_status_sensor_context(
        sensor_name="run_failure_sensor", dagster_instance=instance, dagster_run=instance.get_run_by_id(first_id),
        dagster_event=failure.dagster_event, context=None).for_run_failure()
    run_failure_sensor(context)
    rd = RunDir.for_run(cand.run_id)
    assert (rd.read_status()["phase"], rd.read_status()["outcome"]) == ("Failed", "failed")

    with dg.execute_job(job, instance=instance, tags=tags, raise_on_error=False,
                        reexecution_options=dg.ReexecutionOptions.from_failure(first_id, instance)) as retry:
        assert retry.success
        checks = {e.event_specific_data.check_name: e.event_specific_data for e in retry.all_events
                  if e.event_type_value == "ASSET_CHECK_EVALUATION"}
    st = rd.read_status()
    assert (st["phase"], st["outcome"]) == ("Succeeded", "succeeded")
    [cond] = [c for c in st["conditions"] if c["type"] == "RegressionDetected"]
    assert cond["reason"] != "NotComparable", cond["message"]
    assert checks["no_gating_regression"].passed, checks["no_gating_regression"].description


def test_cancel_while_its_dagster_run_starts_terminates_it_and_the_run_stays_canceled(bench_home, monkeypatch):
    """`benchrun cancel` of a run whose Dagster run is STARTING (no process claims it yet): the
    Dagster run is terminated too, and a worker that comes up all the same refuses to admit the
    run (was: only queued Dagster runs were cancelled, and admit moved the Canceled run to
    Running and dropped the Canceled condition: the benchmark ran)."""
    import dagster as dg
    from dagster._core.test_utils import create_run_for_test

    from bench_assets.definitions import defs
    from benchrun import lifecycle
    from benchrun.runctl import cancel_run
    from resources.launcher import LauncherResource

    spec = Path(__file__).resolve().parents[1] / "specs/local/canary.yaml"
    with dg.instance_for_test() as instance:
        run_id = sub.submit(spec, instance=instance).run_id
        starting = create_run_for_test(instance, job_name="benchmark_run_job", status=dg.DagsterRunStatus.STARTING,
                                       tags={"dagster/partition": run_id})
        out = cancel_run(run_id, home=bench_home, instance=instance)
        assert out.phase == "Canceled" and starting.run_id in out.how and "terminate" in out.how
        assert instance.get_run_by_id(starting.run_id).status in (dg.DagsterRunStatus.CANCELING,
                                                                 dg.DagsterRunStatus.CANCELED)
        # its worker comes up anyway: admit refuses, the run stays Canceled
        rd = RunDir.for_run(run_id)
        created = instance.get_run_record_by_id(starting.run_id).create_timestamp.timestamp()
        with pytest.raises(BenchrunError, match=f"run {run_id} was canceled .* after Dagster run {starting.run_id}"):
            lifecycle.admit(rd, lifecycle.load_pinned(rd), dagster_run_id=starting.run_id, dagster_run_created=created)
        st = rd.read_status()
        assert st["phase"] == "Canceled" and "Canceled" in {c["type"] for c in st["conditions"]}
        assert "Admitted" not in {c["type"] for c in st["conditions"]}

        # the same through the pinned_spec step: the user cancels while the step starts (before admit)
        offer = LauncherResource.admission_offer
        rd.update_status(phase="Pending")  # (a fresh attempt of the same run)
        rd.remove_conditions("Canceled")

        def cancel_then_offer(self, loaded):
            from benchrun.rundir import mark_run_canceled

            assert mark_run_canceled(bench_home, run_id, "canceled by `benchrun cancel`")
            return offer(self, loaded)

        monkeypatch.setattr(LauncherResource, "admission_offer", cancel_then_offer)
        job = defs.resolve_job_def("benchmark_run_job")
        res = job.execute_in_process(instance=instance, partition_key=run_id, raise_on_error=False,
                                     asset_selection=[dg.AssetKey("pinned_spec")])
        assert not res.success
        [failure] = [e for e in res.all_events if e.is_step_failure]
        error = failure.step_failure_data.error
        assert "was canceled" in (error.cause or error).message
        st = rd.read_status()
        assert st["phase"] == "Canceled" and "Admitted" not in {c["type"] for c in st["conditions"]}

        # a re-execution made after the cancel (a new Dagster run) runs it again, as before
        monkeypatch.setattr(LauncherResource, "admission_offer", offer)
        again = job.execute_in_process(instance=instance, partition_key=run_id, raise_on_error=False,
                                       asset_selection=[dg.AssetKey("pinned_spec")])
        assert again.success
        st = rd.read_status()
        assert st["phase"] == "Running" and "Canceled" not in {c["type"] for c in st["conditions"]}
        assert st["dagster_run_id"] == again.run_id


def test_a_failed_run_is_admitted_again_by_its_retry(bench_home, canary_doc, write_spec):
    """Refusing a canceled attempt leaves the retry of a Failed run as it was: admitted."""
    from benchrun import lifecycle
    from benchrun.rundir import mark_run_failed

    rd = RunDir.for_run(sub.prepare(write_spec(canary_doc)).run_id)
    created = time.time()  # the retry's Dagster run was made before the failure was recorded
    assert mark_run_failed(rd.home, rd.run_id, "Dagster run failed: node lost")
    st = lifecycle.admit(rd, lifecycle.load_pinned(rd), dagster_run_id="retry", dagster_run_created=created)
    assert st["phase"] == "Running" and "Failed" not in {c["type"] for c in st["conditions"]}


@pytest.mark.slow
def test_reaping_a_dead_run_frees_its_concurrency_slots(bench_home, canary_doc, write_spec):
    """A run killed in its warehouse step held the duckdb_writer pool's slot; the reaper failed the
    Dagster run but only Dagster's daemon (which the CLI never starts) frees slots, so every later
    run in the home waited on the pool for ever. Reaping frees the dead run's slots and pending
    steps, and those of any run that already ended (a home wedged before this fix recovers)."""
    instance = sub.get_instance()
    storage = instance.event_log_storage
    storage.set_concurrency_slots("duckdb_writer", 1)
    prepared = sub.prepare(write_spec(canary_doc))
    dead = _started_run(instance, prepared.run_id, _dead_pid(), None)
    assert storage.claim_concurrency_slot("duckdb_writer", dead.run_id, "warehouse_views").is_claimed

    def held_by() -> set[str]:
        return {s.run_id for s in storage.get_concurrency_info("duckdb_writer").claimed_slots}

    assert held_by() == {dead.run_id}
    reap_dead_runs(bench_home, instance)
    assert held_by() == set()
    # a run already failed (reaped by an earlier release) that still holds the slot
    ended = _started_run(instance, prepared.run_id, os.getpid(), None)
    assert storage.claim_concurrency_slot("duckdb_writer", ended.run_id, "warehouse_views").is_claimed
    instance.report_run_failed(ended, "reaped before slots were freed")
    waiting = _started_run(instance, prepared.run_id, os.getpid(), None)  # alive: its pending step is kept
    assert not storage.claim_concurrency_slot("duckdb_writer", waiting.run_id, "warehouse_views").is_claimed
    reap_dead_runs(bench_home, instance)
    assert ended.run_id not in held_by()
    assert storage.claim_concurrency_slot("duckdb_writer", waiting.run_id, "warehouse_views").is_claimed
    instance.report_run_failed(waiting, "test over")


def test_a_run_killed_after_curation_reads_failed_in_the_warehouse_too(tmp_path: Path) -> None:
    """A run killed after its facts were curated (Analyzing) was marked Failed in status.json by the
    reaper while benchmark_run_fact kept `Analyzing | succeeded` until someone rebuilt the warehouse:
    dashboards counting outcome 'succeeded' counted a dead run. The reaper re-curates the tables
    that read the final status."""
    from benchrun.warehouse import curate_run
    from benchrun.warehouse.views import query
    from test_warehouse_iceberg import _stored_run

    run_dir, manifest = _stored_run(tmp_path, "run-k", in_status=True)
    st = json.loads((run_dir / "status.json").read_text())
    (run_dir / "status.json").write_text(json.dumps({**st, "phase": "Analyzing", "outcome": "succeeded",
                                                       "finished_utc": None}))
    curate_run(run_dir, tmp_path, manifest)

    def fact() -> list[tuple]:
        sql = "SELECT phase, outcome FROM benchmark_run_fact WHERE run_id = 'run-k'"
        return [tuple(r.values()) for r in query(sql, tmp_path).table.to_pylist()]

    assert fact() == [("Analyzing", "succeeded")]
    (tmp_path / "liveness").mkdir()
    (tmp_path / "liveness" / "run-k.json").write_text(json.dumps(
        {"run_id": "run-k", "host": os.uname().nodename, "pid": _dead_pid(), "pid_start": None,
         "heartbeat_utc": dt.datetime.now(dt.timezone.utc).isoformat()}))
    [(run_id, _why)] = reap_dead_runs(tmp_path, None) or [("run-k", "")]
    assert RunDir(tmp_path, "run-k").read_status()["phase"] == "Failed"
    assert fact() == [("Failed", "failed")]


@pytest.mark.slow
def test_a_failed_benchmark_is_not_called_an_orchestration_failure(bench_home, canary_doc, write_spec):
    """The blocking run_succeeded check fails the Dagster run of a benchmark that failed (so the UI and
    alerting see it); the CLI says the benchmark's own reason, not 'orchestration failed' for that step."""
    import dagster as dg

    canary_doc["spec"]["trials"]["minReplicates"] = 3
    tiny_spec(canary_doc, [{"name": "broken", "repoCommand": "/bin/false"}])
    proc = _cli(bench_home, "run", str(write_spec(canary_doc)))
    out, err = proc.communicate(timeout=300)
    text = out + err
    assert proc.returncode == 1, text[-3000:]
    assert "orchestration failed" not in text and "run_succeeded" not in text, text[-3000:]
    instance = sub.get_instance()
    [run] = instance.get_runs(filters=dg.RunsFilter(job_name="benchmark_run_job"))
    assert run.status == dg.DagsterRunStatus.FAILURE  # red in the UI, as the benchmark is
    [rd] = [RunDir.for_run(p.name) for p in (bench_home / "runs").iterdir()]
    st = rd.read_status()
    assert st["phase"] == "Failed" and "orchestration" not in (st.get("message") or "")
