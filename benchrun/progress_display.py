"""Live progress of ``benchrun run``: a rich progress bar in a terminal, plain periodic lines
otherwise, both read from ``progress/run_progress.json`` while Dagster executes the run.

Dagster captures each step's output by pointing file descriptors 1 and 2 at a log file
(``dup2``) and mirroring it back with ``tail -F``; anything written through ``sys.stdout``
during a step therefore reaches the terminal late, interleaved, or not at all. The display
writes to its own duplicate of the original descriptor, taken before the run starts, so the
capture never touches it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any


@dataclass(frozen=True)
class Snapshot:
    """What the display shows at one moment."""

    done: int
    total: int | None
    failed: int
    where: str  # "micro/gemm r2/6", "analysing", "starting"
    elapsed_s: float
    eta_s: float | None

    def line(self) -> str:
        """One plain line (the non-terminal form)."""
        total = "?" if self.total is None else str(self.total)
        eta = "-" if self.eta_s is None else _dur(self.eta_s)
        return (f"progress {self.done}/{total} launches, {self.failed} failed | {self.where} | "
                f"elapsed {_dur(self.elapsed_s)} | ETA {eta}")


def _dur(seconds: float) -> str:
    s = int(round(max(seconds, 0.0)))
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def snapshot(progress: dict[str, Any] | None, now: float | None = None,
             confirming: dict[str, Any] | None = None) -> Snapshot:
    """The display state from a run_progress.json document (None before the run began) and, once
    every launch is done, status.json's ``confirmation_progress`` (``confirming``): the launches
    of a confirmation round, made after the evidence was sealed (so not in the progress file)."""
    now = time.time() if now is None else now
    if not progress:
        return Snapshot(0, None, 0, "starting", 0.0, None)
    started = float(progress.get("started_epoch") or now)
    done, total = int(progress.get("done", 0)), progress.get("total")
    cur = progress.get("current") or {}
    eta = progress.get("eta_s")
    if cur:
        planned = (progress.get("planned") or {}).get(f"{cur.get('layer')}/{cur.get('suite')}")
        where = f"{cur.get('layer')}/{cur.get('suite')} r{cur.get('replicate')}" + (f"/{planned}" if planned else "")
        if eta is not None and cur.get("since_epoch"):
            # The file's ETA was computed when the last launch finished; the current one has run since.
            eta = max(float(eta) - (now - float(cur["since_epoch"])), 0.0)
    elif total is not None and done >= int(total):
        where, eta = "analysing (statistics, warehouse, report)", 0.0
        if confirming and float(confirming.get("since_epoch") or 0) >= started:
            where, eta = (f"confirming a suspected regression: {int(confirming.get('launches', 0))} launches "
                          f"(last {confirming.get('last', '?')})"), None
    else:
        where = "between launches" if done else "starting"
    return Snapshot(done, None if total is None else int(total), int(progress.get("failed", 0)), where,
                    max(now - started, 0.0), None if eta is None else float(eta))


def read_progress(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None  # not written yet, or caught between write and rename on some filesystems


def read_confirming(progress_file: Path) -> dict[str, Any] | None:
    """status.json's ``confirmation_progress`` beside the run's progress directory, else None."""
    status = read_progress(progress_file.parent.parent / "status.json")
    value = status.get("confirmation_progress") if isinstance(status, dict) else None
    return value if isinstance(value, dict) else None


def interval_from_env() -> float:
    """``BENCHRUN_PROGRESS_INTERVAL_S`` (10 s by default): how often a non-terminal gets a line."""
    raw = os.environ.get("BENCHRUN_PROGRESS_INTERVAL_S", "10")
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        from benchrun.errors import BenchrunError

        raise BenchrunError(f"BENCHRUN_PROGRESS_INTERVAL_S={raw!r}: expected a positive number of seconds",
                            exit_code=2)
    return value


def original_stdout() -> IO[str]:
    """A text stream on a duplicate of fd 1, immune to Dagster's per-step redirection."""
    try:
        fd = os.dup(sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # no real descriptor (e.g. captured in tests)
        return sys.stdout
    return os.fdopen(fd, "w", buffering=1, encoding=sys.stdout.encoding or "utf-8", errors="replace")


class ProgressDisplay:
    """Watch a run's progress file in a thread and show it on ``stream`` until stopped.

    A terminal gets a bar (suite, replicate, elapsed, ETA) redrawn a few times a second; a
    pipe or file gets one plain line every ``interval_s`` seconds (``$BENCHRUN_PROGRESS_INTERVAL_S``,
    default 10) and a last one when the run ends.
    """

    def __init__(self, progress_file: Path, stream: IO[str] | None = None, *, interval_s: float | None = None,
                 poll_s: float = 0.25, force_terminal: bool | None = None) -> None:
        self.progress_file = progress_file
        self.stream = stream or original_stdout()
        self.interval_s = interval_s if interval_s is not None else interval_from_env()
        self.poll_s = poll_s
        self.tty = self.stream.isatty() if force_terminal is None else force_terminal
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="benchrun-progress", daemon=True)

    def __enter__(self) -> "ProgressDisplay":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        try:
            self._bar() if self.tty else self._lines()
        except Exception as exc:  # a display must never fail the run it watches
            print(f"progress display stopped: {exc}", file=sys.stderr)

    def _snapshot(self) -> Snapshot:
        return snapshot(read_progress(self.progress_file), confirming=read_confirming(self.progress_file))

    def _lines(self) -> None:
        last_at = -float("inf")
        while True:
            stopping = self._stop.wait(self.poll_s)
            now = time.monotonic()
            if now - last_at >= self.interval_s or stopping:
                self.stream.write(self._snapshot().line() + "\n")
                self.stream.flush()
                last_at = now
            if stopping:
                return

    def _bar(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        console = Console(file=self.stream, force_terminal=True, highlight=False)
        columns = (TextColumn("[bold]{task.fields[where]:<36}"), BarColumn(bar_width=30), MofNCompleteColumn(),
                   TextColumn("{task.fields[failed]}"), TextColumn("elapsed {task.fields[elapsed]}"),
                   TextColumn("ETA {task.fields[eta]}"))
        # Leave sys.stdout alone: Dagster's capture works on it while the bar is shown.
        with Progress(*columns, console=console, refresh_per_second=4, transient=False,
                      redirect_stdout=False, redirect_stderr=False) as bar:
            task = bar.add_task("run", total=None, where="starting", failed="", elapsed="0s", eta="-")
            while True:
                stopping = self._stop.wait(self.poll_s)
                snap = self._snapshot()
                bar.update(task, total=snap.total, completed=snap.done, where=snap.where,
                           failed=f"[red]{snap.failed} failed[/]" if snap.failed else "0 failed",
                           elapsed=_dur(snap.elapsed_s), eta="-" if snap.eta_s is None else _dur(snap.eta_s))
                if stopping:
                    return
