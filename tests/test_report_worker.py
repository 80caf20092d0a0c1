"""The report's figure worker bookkeeping (benchrun.report.worker)."""

import subprocess
import sys

import pytest

from benchrun.errors import BenchrunError
from benchrun.report import worker


def test_mode_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(worker.ENV, raising=False)
    assert not worker.background()
    monkeypatch.setenv(worker.ENV, "background")
    assert worker.background()
    monkeypatch.setenv(worker.ENV, "later")
    with pytest.raises(BenchrunError, match="BENCHRUN_REPORT_FIGURES"):
        worker.background()


def test_pending_until_the_worker_ends_and_wait_returns_who_it_waited_for(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    (tmp_path / "report_workers").mkdir()
    (tmp_path / "report_workers" / "r-1.pid").write_text(str(proc.pid))
    assert worker.pending(tmp_path, "r-1") and not worker.pending(tmp_path, "r-2")
    assert worker.wait_for_workers(tmp_path, timeout_s=30) == ["r-1"]
    assert not worker.pending(tmp_path, "r-1")
    assert not (tmp_path / "report_workers" / "r-1.pid").exists()
    assert worker.wait_for_workers(tmp_path) == []


def _signed_run(home, spec):
    import numpy as np

    from benchrun.stats.synthetic import lognormal_replicates, make_run

    rng = np.random.default_rng(3)
    return make_run(home, "run-fig", {("gemm", "", "gflops"): (
        lognormal_replicates(rng, 100, 0.02, 5), "GFLOP/s", "higher")}, spec=spec,
                    status={"spec_digest": ""})  # its pinned spec is the canary, not a digest of it


def _envelope(rd):
    return (rd / "reports" / f"{rd.name}_provenance.dsse.json").read_bytes()


def test_the_worker_re_signs_what_it_drew(tmp_path, monkeypatch, capsys, canary_doc):
    from benchrun.provenance.keys import local_key_paths
    from benchrun.provenance.signing import verify_run

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    rd = _signed_run(tmp_path, canary_doc)
    before = _envelope(rd)
    assert worker.main([str(rd), str(tmp_path)]) == 0
    assert _envelope(rd) != before  # signed again: the report and the figures it drew are covered
    verify_run(rd, local_key_paths(tmp_path)[1], home=tmp_path)


@pytest.mark.parametrize("edit", ["status name", "result"])
def test_the_worker_does_not_sign_over_an_edit_made_since_the_run_signed(tmp_path, monkeypatch, capsys, canary_doc,
                                                                        edit):
    """The worker re-signed unconditionally: an edit in the seconds between the run's signature
    and the worker's came out signed, and `verify` passed."""
    import json

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    rd = _signed_run(tmp_path, canary_doc)
    if edit == "status name":
        st = json.loads((rd / "status.json").read_text())
        (rd / "status.json").write_text(json.dumps({**st, "name": "someone-else"}))
    else:
        p = sorted((rd / "structured").glob("run-fig_gemm_r1.json"))[0]
        doc = json.loads(p.read_text())
        doc["metrics"][0]["value"] *= 2
        p.write_text(json.dumps(doc))
    before = _envelope(rd)
    assert worker.main([str(rd), str(tmp_path)]) == 0
    assert _envelope(rd) == before
    assert "not signed again" in capsys.readouterr().out


@pytest.mark.slow
def test_promote_compare_and_report_wait_for_a_figure_worker(tmp_path, monkeypatch, canary_doc):
    """`promote` straight after `benchrun run` refused the run: the worker was rewriting its report
    (then signs again), and promote saw the report differ from its signature. verify already waited.
    The stand-in worker ends as a real one does, removing its pid file (one that only slept 0.5 s and left
    it read "killed before it ended" whenever the command took longer than that to start, under load)."""
    from typer.testing import CliRunner

    from benchrun.cli import app

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    rd = _signed_run(tmp_path, canary_doc)
    (tmp_path / "report_workers").mkdir()
    for args in (["promote", rd.name, "--alias", "t"], ["compare", "published/t", rd.name], ["report", rd.name]):
        pid_file = tmp_path / "report_workers" / f"{rd.name}.pid"
        proc = subprocess.Popen([sys.executable, "-c", "import pathlib, sys, time; time.sleep(2.5); "
                                 "pathlib.Path(sys.argv[1]).unlink()", str(pid_file)])
        pid_file.write_text(str(proc.pid))
        out = CliRunner().invoke(app, args)
        assert f"run {rd.name}: waited for its report figures" in out.output, (args, out.output, out.exception)
        assert not pid_file.exists(), args  # it had ended (a worker's last act) before the command went on
        proc.wait(timeout=10)


def test_a_figure_worker_killed_before_it_finished_is_said_not_silently_dropped(tmp_path):
    """kill -9 of the detached worker left its pid file and a report without figures; settle() removed
    the pid file and said nothing, so `promote`, `compare` and `report` went on as if all was drawn."""
    import subprocess
    import sys

    from benchrun.report import worker

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / "report_workers").mkdir()
    (tmp_path / "report_workers" / "run-a.pid").write_text(str(dead.pid))
    said: list[str] = []
    assert worker.settle(tmp_path, said.append) == []
    assert said == ["run run-a: its report figures were never finished (the figure worker is gone, killed before "
                    "it ended): the report has none; `benchrun report run-a` draws them"]
    assert not (tmp_path / "report_workers" / "run-a.pid").exists()
    said.clear()
    worker.settle(tmp_path, said.append)  # said once
    assert said == []
