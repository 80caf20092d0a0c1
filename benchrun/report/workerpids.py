"""Which runs' report figures a detached worker is drawing now: the worker's pid files under
``$BENCHRUN_HOME/report_workers`` (written by benchrun.report.worker, read by the report's
HTML to say that figures follow), so neither of those two modules imports the other."""

from __future__ import annotations

import os
from pathlib import Path

from benchrun.paths import validate_run_id


def pid_dir(home: Path) -> Path:
    return Path(home) / "report_workers"


def pending(home: Path, run_id: str) -> bool:
    """A worker is drawing this run's figures now."""
    path = pid_dir(home) / f"{validate_run_id(run_id)}.pid"
    try:
        return alive(int(path.read_text().strip()))
    except (FileNotFoundError, ValueError):
        return False


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A finished child of this process stays a zombie until reaped; reap it if it is ours.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True
