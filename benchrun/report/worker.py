"""Drawing the report's figures off the critical path of `benchrun run`.

With ``BENCHRUN_REPORT_FIGURES=background`` (what `benchrun run` sets for itself), the run
writes its report's text at once and, once ``run_status`` has made the status final, a
detached worker (``python -m benchrun.report.worker RUN_DIR``) draws the figures and writes
the report again — from the final status, so it is never stale. Until then the report says
that its figures are being drawn. Anywhere else (the UI, sensors, a Kubernetes run pod that
ends with the run) the figures are drawn inline, before the status is final.

The next `benchrun run` waits for such a worker before it starts (benchmarks must not share
the machine with anything of ours), and so do tests, through :func:`wait_for_workers`.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError
from benchrun.fsio import atomic_write_text
from benchrun.paths import validate_run_id
# ``worker.pending`` is what the CLI asks (whether a run's figures follow); html.py reads workerpids.
from benchrun.report.workerpids import alive as _alive, pending, pid_dir as _pid_dir  # noqa: F401

log = logging.getLogger(__name__)

ENV = "BENCHRUN_REPORT_FIGURES"


def background() -> bool:
    """Whether figures are drawn by a detached worker (``background``) or inline (default)."""
    mode = os.environ.get(ENV, "inline")
    if mode not in ("inline", "background"):
        raise BenchrunError(f"{ENV}={mode!r}: expected 'inline' or 'background'")
    return mode == "background"


def start(run_dir: Path, home: Path) -> int:
    """Start the detached worker for ``run_dir``; return its pid."""
    run_dir = Path(run_dir)
    from benchrun.provenance.statement import figures_log_relpath

    rid = validate_run_id(run_dir.name)
    log = run_dir / figures_log_relpath(rid)  # never signed: written after the run is
    log.parent.mkdir(parents=True, exist_ok=True)
    pids = _pid_dir(home)
    pids.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "benchrun.report.worker", str(run_dir), str(home)],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
                                env={**os.environ, ENV: "inline"})
    atomic_write_text(pids / f"{rid}.pid", str(proc.pid))
    return proc.pid


def wait_for_workers(home: Path, timeout_s: float = 300.0, gone: list[str] | None = None) -> list[str]:
    """Wait until no figure worker of ``home`` runs; return the run ids waited for. ``gone`` gets
    the runs whose worker had died without finishing (its pid file left behind: a worker that
    ends, even by an error, removes it)."""
    pids = _pid_dir(home)
    waited = []
    deadline = time.monotonic() + timeout_s
    for path in sorted(pids.glob("*.pid")) if pids.is_dir() else []:
        try:
            pid = int(path.read_text().strip())
        except (FileNotFoundError, ValueError):
            continue
        if _alive(pid):
            waited.append(path.stem)
        elif gone is not None:
            gone.append(path.stem)
        while _alive(pid):
            if time.monotonic() > deadline:
                raise BenchrunError(f"report figures of run {path.stem} (pid {pid}) still drawing after "
                                    f"{timeout_s:.0f} s; see its reports/*_figures.log")
            time.sleep(0.1)
        path.unlink(missing_ok=True)
    return waited


def wait_for_run(home: Path, run_id: str, timeout_s: float = 60.0) -> bool:
    """Wait up to ``timeout_s`` for the figure worker of ``run_id`` only (``benchrun delete``: the
    worker rewrites the run's report and signs it again, and would write into a run deleted under it);
    True when one was drawing. A worker still drawing after that is a BenchrunError naming it."""
    path = _pid_dir(home) / f"{validate_run_id(run_id)}.pid"
    try:
        pid = int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return False
    drawing = _alive(pid)
    deadline = time.monotonic() + timeout_s
    while _alive(pid):
        if time.monotonic() > deadline:
            raise BenchrunError(f"the report figures of run {run_id} are still being drawn (pid {pid}) after "
                                f"{timeout_s:.0f} s; wait for that worker to end (its log: reports/*_figures.log), "
                                "then try again")
        time.sleep(0.1)
    path.unlink(missing_ok=True)
    return drawing


def settle(home: Path, say: Any = None, timeout_s: float = 300.0) -> list[str]:
    """Before a command reads or signs a run's files: wait for the home's figure workers, which
    rewrite a just-finished run's report and then sign it again (read in between, the report
    differs from its signature: `promote` straight after `benchrun run` refused the run);
    ``say(line)`` is told of each run waited for."""
    if not Path(home).is_dir():
        return []
    gone: list[str] = []
    waited = wait_for_workers(Path(home), timeout_s=timeout_s, gone=gone)
    for run_id in gone:
        line = (f"run {run_id}: its report figures were never finished (the figure worker is gone, killed "
                f"before it ended): the report has none; `benchrun report {run_id}` draws them")
        log.warning(line)
        if say is not None:
            say(line)
    for run_id in waited if say is not None else ():
        say(f"run {run_id}: waited for its report figures (they are written, then signed again)")
    return waited


def main(argv: list[str]) -> int:
    run_dir, home = Path(argv[0]), Path(argv[1])
    from benchrun.report.html import render_figures, report_outputs, write_report

    import json
    import resource

    from benchrun import lifecycle
    from benchrun.rundir import RunDir
    from benchrun.sharedstate import push_run

    t0 = time.monotonic()
    if not (run_dir / "status.json").is_file():  # deleted before the worker began: nothing is made again
        print(f"run {run_dir.name}: no longer in the home (deleted); no figures drawn", flush=True)
        (_pid_dir(home) / f"{run_dir.name}.pid").unlink(missing_ok=True)
        return 0
    try:
        render_figures(run_dir, home=home)
    finally:
        try:
            write_report(run_dir, figures_pending=False)  # from the final status, with whatever was drawn
            rd = RunDir(home, run_dir.name)
            # the signature then covers the figures and the report as written, but only if nothing
            # else changed since the run signed: an edit made meanwhile is never signed over
            why = lifecycle.resign_if_intact(rd.path, home, rewritten=tuple(report_outputs(rd.path)))
            if why:
                print(f"run {rd.run_id}: {why}", flush=True)
            push_run(rd.path, rd.home, merge=rd.merge_shared_status)
        finally:
            r = resource.getrusage(resource.RUSAGE_SELF)  # the log records what this cost
            print(json.dumps({"figures_worker_wall_s": round(time.monotonic() - t0, 2),
                              "figures_worker_cpu_s": round(r.ru_utime + r.ru_stime, 2)}), flush=True)
            (_pid_dir(home) / f"{run_dir.name}.pid").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
