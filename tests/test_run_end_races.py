"""Races at the end of a run (review findings A and B).

A: `benchrun delete` raced the run's tail (finalize makes the phase final and drops the liveness claim
before the report, curation, signature and push) and the report figure worker: deleted under them,
their writes made the run directory again (``update_status`` made a fresh status.json), `runs` listed
a run that was only that status.json, and deleting it again was refused ("run X is None").

B: ``mark_run_canceled``/``mark_run_failed`` read the phase outside the status lock, then wrote three
times; and nothing kept a run that ended from being moved on: a cancel whose process did not settle
overwrote the Succeeded that process had just set, and that process's finalize overwrote Canceled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from benchrun.errors import BenchrunError
from benchrun.rundir import RunDir, list_runs

ROOT = Path(__file__).resolve().parent.parent
RUN = "race-20261202000000-aaaaaaaa"


def _finished(home: Path, run_id: str = RUN, **status) -> RunDir:
    from benchrun.stats.synthetic import make_run

    make_run(home, run_id, {("gemm", "", "tflops"): ([1.0, 1.1, 1.0], "TFLOP/s", "higher")}, manifest=False,
             status=status)
    return RunDir(home, run_id)


def _python(code: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("BENCHRUN_SHARED_STATE", None)
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env, text=True, **kw)


def _sleeper(seconds: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])


def _worker_pid_file(home: Path, run_id: str, pid: int) -> None:
    (home / "report_workers").mkdir(exist_ok=True)
    (home / "report_workers" / f"{run_id}.pid").write_text(str(pid))


# -- A: delete waits for, or refuses, what still writes the run -------------------------------------

def test_delete_waits_for_the_runs_figure_worker_before_it_removes_the_run(tmp_path):
    from benchrun.runctl import delete_run

    rd = _finished(tmp_path)
    worker = _sleeper(0.8)
    _worker_pid_file(tmp_path, RUN, worker.pid)
    try:
        delete_run(RUN, home=tmp_path, figures_wait_s=30)
        assert worker.poll() is not None  # it had ended before the directory went
    finally:
        worker.kill()
    assert not rd.path.exists() and list_runs(tmp_path) == []


def test_delete_refuses_while_the_figure_worker_still_draws_after_the_wait(tmp_path):
    from benchrun.runctl import delete_run

    rd = _finished(tmp_path)
    worker = _sleeper(30)
    _worker_pid_file(tmp_path, RUN, worker.pid)
    try:
        with pytest.raises(BenchrunError, match=rf"report figures of run {RUN} are still being drawn \(pid "
                                                rf"{worker.pid}\).*wait for that worker to end"):
            delete_run(RUN, home=tmp_path, figures_wait_s=0.3)
    finally:
        worker.kill()
        worker.wait()
    assert rd.exists() and not (tmp_path / "warehouse" / "_deleted" / f"{RUN}.json").exists()  # nothing done
    delete_run(RUN, home=tmp_path, figures_wait_s=5)  # the worker gone (killed): deleted
    assert not rd.path.exists()


def test_delete_refuses_a_finished_run_its_process_still_claims(tmp_path):
    """finalize makes the phase final before the run's tail ends: the phase alone let delete go on."""
    from benchrun.liveness import beat, liveness_path
    from benchrun.runctl import delete_run

    rd = _finished(tmp_path)
    beat(tmp_path, RUN)  # this process executes the run
    with pytest.raises(BenchrunError, match=rf"run {RUN} is still claimed by its process \(pid {os.getpid()} "):
        delete_run(RUN, home=tmp_path)
    assert rd.exists()
    liveness_path(tmp_path, RUN).unlink()
    delete_run(RUN, home=tmp_path)
    assert not rd.path.exists()


def test_delete_refuses_while_a_dagster_run_of_it_is_in_progress(bench_home):
    """Between finalize (claim dropped) and the figure worker's start, only the run's Dagster run says
    that its tail (report, warehouse rows, signature, push) still writes it."""
    import dagster as dg

    from benchrun import submit as sub
    from benchrun.liveness import TAG_HOST, TAG_PID, TAG_PID_START
    from benchrun.runctl import delete_run

    rd = _finished(bench_home)
    instance = sub.get_instance()

    def started(pid: int):
        tags = {"dagster/partition": RUN, TAG_HOST: os.uname().nodename, TAG_PID: str(pid), TAG_PID_START: "None"}
        from bench_assets.definitions import defs

        run = instance.create_run_for_job(job_def=defs.resolve_job_def(sub.JOB_NAME), run_id=None, tags=tags)
        instance.handle_run_event(run.run_id, dg.DagsterEvent(event_type_value="PIPELINE_START",
                                                              job_name=run.job_name, message="started"))
        return run.run_id

    tail = started(os.getpid())
    with pytest.raises(BenchrunError, match=rf"Dagster run\(s\) {tail} of it are still in progress"):
        delete_run(RUN, home=bench_home, instance=instance)
    assert rd.exists()
    instance.report_run_failed(instance.get_run_by_id(tail), "ended")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    started(dead.pid)  # its executor is gone: in progress only until the reaper fails it
    delete_run(RUN, home=bench_home, instance=instance)
    assert not rd.path.exists()


def test_the_tail_of_a_deleted_run_does_not_make_it_again(tmp_path):
    """The run's last step after a delete: its signing, with no envelope, wrote final_signature=None
    through update_status, which made a status.json (after a report write had made the directory)."""
    from benchrun.lifecycle import sign_publication
    from benchrun.runctl import delete_run

    rd = _finished(tmp_path, final_signature="pending")
    delete_run(RUN, home=tmp_path)
    with pytest.raises(BenchrunError, match=f"no such run '{RUN}'"):
        sign_publication(rd)
    with pytest.raises(BenchrunError, match=f"no such run '{RUN}'"):
        rd.write_status({"run_id": RUN, "phase": "Succeeded"})
    assert not rd.path.exists()
    (rd.path / "reports").mkdir(parents=True)  # a report the tail wrote made the directory again
    with pytest.raises(BenchrunError, match=f"run {RUN} was deleted"):
        rd.update_status(final_signature=None)
    assert not rd.status_path.exists() and list_runs(tmp_path) == []


def test_what_the_tail_wrote_after_a_delete_is_removed_by_deleting_again(tmp_path):
    """Files a step of the run wrote after it was deleted (no status.json): `delete` said "no such run"."""
    from benchrun.runctl import delete_run

    rd = _finished(tmp_path)
    delete_run(RUN, home=tmp_path)
    (rd.path / "reports").mkdir(parents=True)
    (rd.path / "reports" / f"{RUN}_report.html").write_text("written after the delete")
    out = delete_run(RUN, home=tmp_path)
    assert out.removed == [f"what the run wrote after an earlier delete (runs/{RUN})"]
    assert not rd.path.exists()


def test_the_deletion_record_rundir_reads_is_the_one_delete_writes(tmp_path):
    from benchrun.liveness import liveness_path
    from benchrun.rundir import claim_path
    from benchrun.warehouse.removed import tombstone_path

    assert tombstone_path(tmp_path, RUN) == tmp_path / "warehouse" / "_deleted" / f"{RUN}.json"
    assert liveness_path(tmp_path, RUN) == claim_path(tmp_path, RUN)


def test_a_run_that_is_only_a_status_json_is_deleted(tmp_path):
    """What the race left (no phase): delete said "run X is None; cancel it first" for good."""
    from benchrun.runctl import delete_run

    left = tmp_path / "runs" / RUN
    left.mkdir(parents=True)
    (left / "status.json").write_text(json.dumps({"run_id": RUN, "conditions": [], "final_signature": None,
                                                  "status_seq": 1}))
    assert [r.run_id for r in list_runs(tmp_path)] == [RUN]
    delete_run(RUN, home=tmp_path)
    assert not left.exists() and list_runs(tmp_path) == []


def test_the_figure_worker_of_a_deleted_run_writes_nothing(tmp_path):
    from benchrun.report import worker

    run_dir = tmp_path / "runs" / RUN
    _worker_pid_file(tmp_path, RUN, os.getpid())
    assert worker.main([str(run_dir), str(tmp_path)]) == 0
    assert not run_dir.exists() and not (tmp_path / "report_workers" / f"{RUN}.pid").exists()


# -- B: an end is written whole, and the attempt it ended does not move it on -------------------------

def test_a_cancel_does_not_overwrite_a_run_that_succeeded_while_it_waited(tmp_path):
    """The cancel read Analyzing, the run's process then set Succeeded (holding the status lock), and the
    cancel wrote Canceled over it: the check now happens under the lock."""
    from benchrun.rundir import mark_run_canceled

    rd = _finished(tmp_path, phase="Analyzing")
    finisher = _python(f"""
        import time
        from pathlib import Path
        from benchrun.rundir import RunDir
        rd = RunDir(Path({str(tmp_path)!r}), {RUN!r})
        with rd.status_lock():
            print("held", flush=True)
            time.sleep(1.0)
            rd.set_phase("Succeeded")
    """, stdout=subprocess.PIPE)
    try:
        assert finisher.stdout.readline().strip() == "held"
        changed = mark_run_canceled(tmp_path, RUN, "canceled by `benchrun cancel` (it did not settle)")
        assert finisher.wait(timeout=60) == 0
    finally:
        finisher.kill()
    st = rd.read_status()
    assert not changed and (st["phase"], st.get("outcome")) == ("Succeeded", None)
    assert "Canceled" not in {c["type"] for c in st["conditions"]}


def test_the_process_of_a_run_canceled_under_it_does_not_finish_it(bench_home, canary_doc, write_spec):
    """`benchrun cancel` marked the run Canceled after SIGTERM did not settle its process; that process
    went on and finalize set Succeeded (outcome, conditions and a pending signature with it)."""
    from benchrun import lifecycle
    from benchrun import submit as sub
    from benchrun.liveness import beat, liveness_path

    rd = RunDir.for_run(sub.prepare(write_spec(canary_doc)).run_id)
    rd.update_status(phase="Analyzing", outcome="succeeded")
    beat(rd.home, rd.run_id)  # this process executes the run
    try:
        canceler = _python(f"""
            from benchrun.rundir import mark_run_canceled
            assert mark_run_canceled({str(rd.home)!r}, {rd.run_id!r}, "canceled by `benchrun cancel` (did not settle)")
        """)
        assert canceler.wait(timeout=60) == 0
        with pytest.raises(BenchrunError, match=f"run {rd.run_id} was ended by another process while this one "
                                                 "still ran it"):
            lifecycle.finalize(rd)
        with pytest.raises(BenchrunError):
            rd.set_phase("Analyzing")
        st = rd.read_status()
        assert (st["phase"], st["outcome"], st["outcome_measured"]) == ("Canceled", "canceled", "succeeded")
        assert {c["type"]: c["status"] for c in st["conditions"]}.get("Canceled") == "True"
        assert not st.get("final_signature")
        # a new attempt (another process: admit, resume_attempt) runs it again, and this process may write then
        again = _python(f"""
            from pathlib import Path
            from benchrun.rundir import RunDir
            RunDir(Path({str(rd.home)!r}), {rd.run_id!r}).set_phase("Running")
        """)
        assert again.wait(timeout=60) == 0
        assert not rd.read_status().get("ended_under")
        rd.update_status(outcome="succeeded")
    finally:
        liveness_path(rd.home, rd.run_id).unlink(missing_ok=True)


def test_a_run_that_ended_is_started_again_never_continued(tmp_path):
    rd = _finished(tmp_path, phase="Canceled")
    for phase in ("Analyzing", "Admitted", "Pending"):
        with pytest.raises(BenchrunError, match=f"already ended in phase Canceled; it stays Canceled, not {phase}"):
            rd.set_phase(phase)
    assert rd.read_status()["phase"] == "Canceled"
    assert rd.set_phase("Analyzing", allow_final_exit=True)["phase"] == "Analyzing"  # asked for explicitly
    rd.update_status(phase="Canceled")
    assert rd.set_phase("Running")["phase"] == "Running"  # a new attempt (lifecycle.admit, resume_attempt)


def test_a_cancel_that_lands_while_the_run_is_admitted_is_kept(bench_home, canary_doc, write_spec, monkeypatch):
    """Found in review: admit checked for a cancel first, then wrote the plan and the environment and only
    then removed the Canceled condition and set the run Running: a `benchrun cancel` landing in between
    was undone. The check is made again, and the attempt begun, under one hold of the status lock."""
    import time

    from benchrun import submit as sub
    from benchrun.execute import Progress
    from benchrun.lifecycle import admit, load_pinned
    from benchrun.rundir import mark_run_canceled

    prepared = sub.prepare(write_spec(canary_doc))
    rd = RunDir.for_run(prepared.run_id)
    created = time.time() - 1.0  # the admitting Dagster run was made before the cancel
    begin = Progress.begin_run

    def canceled_meanwhile(self, plans):  # noqa: ANN001
        begin(self, plans)
        assert mark_run_canceled(rd.home, rd.run_id, "canceled by the user while it was being admitted")

    monkeypatch.setattr(Progress, "begin_run", canceled_meanwhile)
    with pytest.raises(BenchrunError, match="was canceled .* this attempt does not run it"):
        admit(rd, load_pinned(rd), dagster_run_id="d-1", dagster_run_created=created)
    st = rd.read_status()
    assert st["phase"] == "Canceled"  # was: Running, the Canceled condition removed
    assert any(c["type"] == "Canceled" and c["status"] == "True" for c in st["conditions"])
