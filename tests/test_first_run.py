"""What a first experiment meets (issue 26, item 7): messages, the baseline hint, Ctrl-C,
cancel and delete."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _cli(*args: str, home: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "BENCHRUN_HOME": str(home), "PYTHONPATH": str(ROOT)}
    env.pop("DAGSTER_HOME", None)
    return subprocess.run([sys.executable, "-m", "benchrun.cli", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=timeout)


def test_error_messages_say_it_once_and_name_what_is_missing(tmp_path):
    r = _cli("runz", home=tmp_path)
    assert r.returncode == 2 and r.stderr.count("Did you mean") == 1, r.stderr
    assert "'run', 'runs'" in r.stderr
    r = _cli("rebuild-warehouse", "nosuch", home=tmp_path)
    assert r.returncode != 0 and "${RUN_ID}" not in r.stderr, r.stderr
    assert f"{tmp_path}/objects/nosuch/" in r.stderr
    r = _cli("lineage", "nosuch", "tflops", home=tmp_path)
    assert r.returncode != 0 and "no such run 'nosuch'" in r.stderr and "no rows of metric" not in r.stderr, r.stderr


def test_the_baseline_hint_names_the_alias_only_while_it_is_unset(tmp_path):
    from benchrun.commands import baseline_hint
    from benchrun.stats.baseline import promote
    from benchrun.stats.synthetic import make_run

    rd = make_run(tmp_path, "first-20261202000000-aaaaaaaa", {("gemm", "", "tflops"): ([1.0, 1.1, 1.0], "TFLOP/s",
                                                                                        "higher")},
                  spec={"spec": {"comparison": {"baseline": {"artifactRef": "local/published/canary"}}}},
                  sealed=True)  # stored and signed as a real run is: promote verifies it
    hint = baseline_hint(rd, rd.name, {"phase": "Succeeded"})
    assert hint and "local/published/canary" in hint and f"benchrun promote {rd.name} --alias canary" in hint
    assert baseline_hint(rd, rd.name, {"phase": "Failed"}) is None  # a failed run is no baseline
    promote(rd.name, tmp_path, alias="canary")
    assert baseline_hint(rd, rd.name, {"phase": "Succeeded"}) is None


def test_delete_refuses_a_run_that_promote_published(tmp_path):
    """promote writes the run id and, on a second line, its record: delete read the whole file as
    the run id, so a promoted baseline was deleted (the alias left pointing at nothing)."""
    from benchrun.errors import BenchrunError
    from benchrun.runctl import delete_run
    from benchrun.stats.baseline import promote
    from benchrun.stats.synthetic import make_run

    rd = make_run(tmp_path, "kept-20261202000000-aaaaaaaa", {("gemm", "", "tflops"): ([1.0, 1.1, 1.0], "TFLOP/s",
                                                                                       "higher")}, sealed=True)
    promote(rd.name, tmp_path, alias="canary")
    assert len((tmp_path / "published" / "canary").read_text().splitlines()) == 2  # id, then the record
    with pytest.raises(BenchrunError, match="is the baseline published/canary"):
        delete_run(rd.name, home=tmp_path)
    assert rd.is_dir()


@pytest.mark.slow
def test_ctrl_c_ends_canceled_keeps_the_finished_launches_and_says_which(tmp_path, canary_doc):
    import json
    import signal
    import time

    import yaml
    from helpers import tiny_spec

    canary_doc["metadata"]["name"] = "ctrl-c"
    canary_doc["spec"]["trials"]["minReplicates"] = 3
    tiny_spec(canary_doc, [
        {"name": "gemm", "repoCommand": "python -m benchrun.suites.gemm", "parameters": {"sizes": [64], "iterations": 3}},
        {"name": "membw", "repoCommand": "python -m benchrun.suites.membw",
         "parameters": {"elements": 5_000_000, "iterations": 4}},  # long enough to be interrupted in
    ])
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(canary_doc, sort_keys=False))
    home = tmp_path / "home"
    env = {**os.environ, "BENCHRUN_HOME": str(home), "PYTHONPATH": str(ROOT), "BENCHRUN_WARM": "0"}
    env.pop("DAGSTER_HOME", None)
    proc = subprocess.Popen([sys.executable, "-m", "benchrun.cli", "run", str(spec)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 240
    progress = None
    while time.monotonic() < deadline and proc.poll() is None:
        found = list((home / "runs").glob("*/progress/run_progress.json")) if (home / "runs").is_dir() else []
        if found:
            try:
                progress = json.loads(found[0].read_text())
            except ValueError:
                progress = None
            if progress and progress.get("done", 0) >= 3 and (progress.get("current") or {}).get("suite") == "membw":
                break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends: the whole foreground group
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (out[-3000:], err[-3000:])
    [run_dir] = (home / "runs").iterdir()
    status = json.loads((run_dir / "status.json").read_text())
    assert status["phase"] == "Canceled" and status["outcome"] == "canceled", status
    from benchrun.commands import finished_launches

    # Replicates interleave (gemm r1, membw r1, gemm r2, then membw r2 was interrupted).
    launches = json.loads((run_dir / "structured" / f"{run_dir.name}_launches.json").read_text())
    assert [(r["suite"], r["replicate"], r["status"]) for r in launches][:3] == [
        ("gemm", 1, "ok"), ("membw", 1, "ok"), ("gemm", 2, "ok")]  # their results are kept
    said = finished_launches(run_dir, run_dir.name)
    assert said.startswith("gemm r1-r2 ok, membw r1") and said in status["message"]
    assert "canceled:" in out and said in out and "DagsterExecutionInterruptedError" not in out + err
    # review 2026-12-07: Dagster's compute-log mirror (tail -F and its orphan watcher, a Python process)
    # shared the terminal's process group and printed a KeyboardInterrupt traceback each
    assert "Traceback" not in out + err, err[-3000:]
    assert "gemm" in out and "tflops" in out  # the table shows what was measured
    assert "phase Canceled" in out
    import psutil

    # The interrupted suite ran in its own session (the terminal's signal never reached it): it
    # must not outlive the run.
    left = [p for p in psutil.process_iter(["cmdline", "cwd"]) if p.info["cwd"] == str(run_dir)]
    assert left == [], [p.info["cmdline"] for p in left]


@pytest.mark.slow
def test_cancel_and_delete_a_submitted_run_and_refuse_a_baseline(tmp_path):
    r = _cli("submit", str(ROOT / "specs/local/canary.yaml"), home=tmp_path)
    assert r.returncode == 0, r.stderr
    run_id = r.stdout.strip()
    r = _cli("cancel", run_id, home=tmp_path)
    assert r.returncode == 0 and f"{run_id}: phase Canceled (not started" in r.stdout, r.stderr
    import json

    st = json.loads((tmp_path / "runs" / run_id / "status.json").read_text())
    assert st["phase"] == "Canceled" and st["outcome"] == "canceled" and st["finished_utc"]
    r = _cli("cancel", run_id, home=tmp_path)  # again: idempotent
    assert r.returncode == 0 and "already canceled" in r.stdout
    (tmp_path / "published").mkdir()
    (tmp_path / "published" / "canary").write_text(run_id + "\n")
    r = _cli("delete", run_id, home=tmp_path)
    assert r.returncode == 1 and "is the baseline published/canary" in r.stderr and "promote" in r.stderr
    assert (tmp_path / "runs" / run_id).is_dir()
    (tmp_path / "published" / "canary").unlink()
    r = _cli("delete", run_id, home=tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"removed run directory runs/{run_id}" in r.stdout and "Dagster partition benchmark_run/" in r.stdout
    # canceled before it started: it stored nothing, and says so (not "kept its evidence")
    assert "kept nothing in the artifact store: the run never sealed its evidence" in r.stdout, r.stdout
    assert not (tmp_path / "runs" / run_id).exists()
    r = _cli("delete", run_id, home=tmp_path)
    assert r.returncode == 1 and f"no such run {run_id!r}" in r.stderr


def test_cancel_interrupts_the_process_that_executes_the_run_and_waits_for_it(tmp_path):
    """A live claim on this host: SIGINT to its process, which settles the run as Ctrl-C does."""
    import json
    import textwrap
    import time

    from benchrun.rundir import RunDir
    from benchrun.runctl import cancel_run

    rd = RunDir(tmp_path, "busy-20261202000000-aaaaaaaa")
    rd.create()
    rd.write_status({"run_id": rd.run_id, "phase": "Running", "conditions": []})
    executor = textwrap.dedent(f"""
        import signal, sys, time
        from benchrun.liveness import start_heartbeat
        from benchrun.rundir import mark_run_canceled
        start_heartbeat({str(tmp_path)!r}, {rd.run_id!r})
        try:
            print("ready", flush=True)  # inside the try: the interrupt may come at once
            time.sleep(60)
        except KeyboardInterrupt:
            mark_run_canceled({str(tmp_path)!r}, {rd.run_id!r}, "interrupted; launches finished before it: none")
    """)
    proc = subprocess.Popen([sys.executable, "-c", executor], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout.readline().strip() == "ready"
        t0 = time.monotonic()
        out = cancel_run(rd.run_id, home=tmp_path, grace_s=20)
        assert proc.wait(timeout=20) == 0 and time.monotonic() - t0 < 15
    finally:
        proc.kill()
    assert out.phase == "Canceled" and f"interrupted its process (pid {proc.pid})" in out.how
    st = json.loads(rd.status_path.read_text())
    assert st["phase"] == "Canceled" and "launches finished before it: none" in st["message"]  # the executor's own
    from benchrun.errors import BenchrunError

    rd.update_status(phase="Succeeded")
    with pytest.raises(BenchrunError, match="already ended in phase Succeeded; nothing to cancel"):
        cancel_run(rd.run_id, home=tmp_path)


def test_a_pending_run_past_its_deadline_is_marked_failed_unless_something_will_start_it(tmp_path, monkeypatch):
    import time

    from benchrun.liveness import liveness_path
    from benchrun.rundir import RunDir
    from benchrun.runctl import expire_pending

    def pending(run_id: str, created: str) -> RunDir:
        rd = RunDir(tmp_path, run_id)
        rd.create()
        rd.write_status({"run_id": run_id, "phase": "Pending", "created_utc": created, "conditions": []})
        return rd

    old = pending("old-20261130000000-aaaaaaaa", "2026-11-30T00:00:00.000000Z")
    fresh = pending("fresh-20261202000000-aaaaaaaa", time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime()))
    claimed = pending("claimed-20261130000000-aaaaaaaa", "2026-11-30T00:00:00.000000Z")
    liveness_path(tmp_path, claimed.run_id).parent.mkdir(parents=True, exist_ok=True)
    liveness_path(tmp_path, claimed.run_id).write_text("{}")  # a process claims it: the reaper's business
    marked = expire_pending(tmp_path)
    assert [r for r, _ in marked] == [old.run_id]
    st = old.read_status()
    assert st["phase"] == "Failed" and "never started within 86400 s (BENCHRUN_PENDING_TIMEOUT_S)" in st["message"]
    assert fresh.read_status()["phase"] == claimed.read_status()["phase"] == "Pending"
    assert expire_pending(tmp_path) == []  # idempotent
    monkeypatch.setenv("BENCHRUN_PENDING_TIMEOUT_S", "soon")
    with pytest.raises(Exception, match="BENCHRUN_PENDING_TIMEOUT_S='soon': not a number"):
        expire_pending(tmp_path)


def test_a_damaged_home_or_status_is_an_error_that_names_it_not_a_traceback(tmp_path):
    a_file = tmp_path / "home.yaml"
    a_file.write_text("not a directory\n")
    r = _cli("runs", home=a_file)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"benchrun home {a_file} (BENCHRUN_HOME) cannot be used as a directory" in r.stderr
    home = tmp_path / "home"
    bad = home / "runs" / "bad-20261202000000-aaaaaaaa"
    bad.mkdir(parents=True)
    (bad / "status.json").write_text("[1, 2]")
    r = _cli("show", bad.name, home=home)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"{bad / 'status.json'}: not a JSON object (a list)" in r.stderr



def test_a_baseline_alias_whose_run_is_gone_is_said_not_skipped(tmp_path):
    """A run whose spec names a set alias pointing at a deleted run was compared with nothing and
    said nothing; `compare published/x` said "run not found" without naming the alias."""
    from benchrun.commands import baseline_hint
    from benchrun.stats.load import resolve_run
    from benchrun.stats.synthetic import make_run

    rd = make_run(tmp_path, "next-20261202000000-aaaaaaaa", {("gemm", "", "tflops"): ([1.0, 1.1, 1.0], "TFLOP/s",
                                                                                       "higher")},
                  spec={"spec": {"comparison": {"baseline": {"artifactRef": "local/published/canary"}}}})
    (tmp_path / "published").mkdir()
    (tmp_path / "published" / "canary").write_text("gone-20261201000000-aaaaaaaa\n{}\n")
    with pytest.raises(Exception, match="baseline alias published/canary points at run 'gone-20261201000000-aaaaaaaa', "
                                        "which no longer exists"):
        resolve_run("published/canary", home=tmp_path)
    hint = baseline_hint(rd, rd.name, {"phase": "Succeeded"})
    assert hint and hint.startswith("not compared with a baseline: baseline alias published/canary points at run")
    assert "benchrun promote RUN_ID --alias canary" in hint


def test_a_run_whose_status_is_damaged_can_be_deleted_as_its_error_says(tmp_path):
    bad = tmp_path / "runs" / "bad-20261202000000-aaaaaaaa"
    bad.mkdir(parents=True)
    for text in ("[]", "{not json"):
        bad.mkdir(exist_ok=True)
        (bad / "status.json").write_text(text)
        r = _cli("show", bad.name, home=tmp_path)
        assert r.returncode == 1 and "delete the run" in r.stderr, r.stderr
        r = _cli("delete", bad.name, home=tmp_path)
        assert r.returncode == 0 and not bad.exists(), r.stderr


def test_a_delete_cut_short_inside_its_last_step_is_finished_by_deleting_again(tmp_path, monkeypatch):
    """Review: the run directory was removed in place; a crash after status.json went left files that no
    command could name (`delete` again: "no such run")."""
    import shutil

    from benchrun.rundir import list_runs
    from benchrun.runctl import delete_run
    from benchrun.stats.synthetic import make_run

    rd = make_run(tmp_path, "gone-20261202000000-aaaaaaaa", {("s", "c", "tps"): ([1.0, 2.0], "tok/s", "higher")})
    real = shutil.rmtree

    def crash_inside(path, *a, **k):
        if str(path).endswith(rd.name) and (path / "status.json").exists():
            (path / "status.json").unlink()  # the removal got that far
            raise KeyboardInterrupt("killed")
        return real(path, *a, **k)

    monkeypatch.setattr(shutil, "rmtree", crash_inside)
    with pytest.raises(KeyboardInterrupt):
        delete_run(rd.name, home=tmp_path)
    monkeypatch.setattr(shutil, "rmtree", real)
    assert not rd.exists() and [r.name for r in list_runs(tmp_path)] == []  # never listed half-removed
    out = delete_run(rd.name, home=tmp_path)
    assert "what an earlier delete left" in out.removed[0] and not list((tmp_path / "runs").iterdir())


def test_delete_takes_the_runs_change_points_out_of_the_fact(tmp_path):
    """A deleted run's breaks stayed in change_point_fact until the next change-points pass, naming a
    run no other table held."""
    import pandas as pd

    from benchrun.runctl import delete_run
    from benchrun.stats.changepoint import FACT_COLUMNS
    from benchrun.stats.cpfact import read_change_point_fact, write_change_point_fact
    from benchrun.stats.synthetic import make_run
    from benchrun.warehouse import query

    rid = "gone-20261202000000-bbbbbbbb"
    make_run(tmp_path, rid, {("s", "c", "tps"): ([1.0, 2.0], "tok/s", "higher")})
    rows = [{c: None for c in FACT_COLUMNS} | {"series_id": f"s{i}", "run_id": r, "alarm_run_id": rid, "metric": "tps"}
            for i, r in enumerate((rid, "kept-20261202000000-cccccccc"))]
    write_change_point_fact(pd.DataFrame(rows, columns=FACT_COLUMNS), tmp_path)
    out = delete_run(rid, home=tmp_path)
    assert "1 change point(s) of change_point_fact that start at the run" in out.removed
    assert read_change_point_fact(tmp_path)["run_id"].tolist() == ["kept-20261202000000-cccccccc"]
    assert query("SELECT run_id FROM change_point_fact", tmp_path).table.to_pylist() == [
        {"run_id": "kept-20261202000000-cccccccc"}]
