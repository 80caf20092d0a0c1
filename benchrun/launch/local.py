"""The local launcher: each invocation is a subprocess in its own process group.

stdout and stderr go to ``raw/<run_id>_<suite>_r<k>.log``; a hang past the timeout kills the
whole process group (suites fork workers: allreduce ranks, load-generator workers, the
reference server), first politely, then with SIGKILL.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Mapping

from benchrun.launch.base import LaunchResult, prepare_outputs
from benchrun.plan import Invocation
from benchrun.suites.result import read_result

log = logging.getLogger(__name__)

GRACE_S = 3.0


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left after a grace period."""
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            if sig == signal.SIGTERM:
                # The leader is gone; make sure no child in the group outlives it.
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return
        except subprocess.TimeoutExpired:
            continue


class LocalLauncher:
    """Runs invocations as subprocesses on this machine (the embedded default)."""

    def launch(
        self, inv: Invocation, run_dir: Path, *, extra_env: Mapping[str, str] | None = None
    ) -> LaunchResult:
        log_path, result_path = prepare_outputs(inv, run_dir)
        env = {**inv.env, **(extra_env or {})}
        t_request = time.time()
        t0 = time.perf_counter()
        timed_out = False
        with log_path.open("wb") as logf:
            try:
                proc = subprocess.Popen(
                    list(inv.argv),
                    env=env,
                    cwd=run_dir,
                    stdin=subprocess.DEVNULL,
                    stdout=logf,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group, killable as one
                )
            except OSError as exc:
                wall = time.perf_counter() - t0
                logf.write(f"benchrun: cannot start {inv.argv[0]!r}: {exc}\n".encode())
                return self._result(inv, "failed", f"cannot start {inv.argv[0]!r}: {exc.strerror or exc}",
                                    None, wall, t_request, t_request, log_path, None)
            t_spawned = time.time()
            try:
                code = proc.wait(timeout=inv.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc)
                code = proc.wait()
            else:
                # The leader exited; children it left in its group are not ours to keep.
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        wall = time.perf_counter() - t0
        doc = None
        doc_error = None
        if result_path.is_file():
            try:
                doc = read_result(result_path)
            except ValueError as exc:
                doc_error = str(exc)
        if timed_out:
            status, reason = "failed", f"timed out after {inv.timeout_s:g}s; process group killed"
        elif code < 0:
            status, reason = "failed", f"killed by {_signal_name(-code)}"
        elif code != 0:
            detail = doc.get("reason") if doc and doc.get("reason") else None
            status, reason = "failed", f"exited with code {code}" + (f": {detail}" if detail else "")
        elif doc is None:
            status = "failed"
            reason = doc_error or f"exited 0 but wrote no result document ({inv.result_relpath()})"
        else:
            status, reason = doc["status"], doc.get("reason")
        if status == "failed":
            log.warning("%s r%d failed: %s (log: %s)", inv.suite, inv.replicate, reason, log_path)
        return self._result(inv, status, reason, code, wall, t_request, t_spawned, log_path,
                            result_path if doc is not None else None,
                            doc.get("metrics", []) if doc and status == "ok" else [])

    @staticmethod
    def _result(inv: Invocation, status: str, reason: str | None, code: int | None, wall: float,
                t_request: float, t_spawned: float, log_path: Path, result_path: Path | None,
                metrics: list | None = None) -> LaunchResult:
        run_dir = log_path.parent.parent
        return LaunchResult(
            run_id=inv.run_id,
            layer=inv.layer,
            suite=inv.suite,
            replicate=inv.replicate,
            benchmark_case_id=inv.benchmark_case_id,
            status=status,
            reason=reason,
            exit_code=code,
            wall_s=round(wall, 6),
            t_request=t_request,
            t_spawned=t_spawned,
            t_finished=time.time(),
            log=log_path.relative_to(run_dir).as_posix(),
            result=result_path.relative_to(run_dir).as_posix() if result_path else None,
            metrics=list(metrics or []),
        )
