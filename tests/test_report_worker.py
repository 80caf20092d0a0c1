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
