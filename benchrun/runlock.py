"""The one-benchmark-at-a-time lock: benchmarks must not share a machine with themselves.

Dagster's queue (``max_concurrent_runs: 1``) admits one benchmark run at a time among the
runs it launches, and counts every in-progress run in the instance, CLI runs included. A CLI
run takes the same turn: an OS lock (``<home>/locks/benchmark.lock``, released by the kernel
when its holder dies, so a killed run never keeps it) serialises CLI runs, and under it the
instance must have no other benchmark run in progress. Waiting or refusing, the message names
the run that holds the turn.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from benchrun.errors import BenchrunError
from benchrun.fsio import atomic_write_json

POLL_S = 2.0


def _holder_text(home: Path) -> str:
    try:
        h = json.loads((home / "locks" / "benchmark.holder.json").read_text(encoding="utf-8"))
        return f"run {h.get('run_id')} (pid {h.get('pid')} on {h.get('host')}, since {h.get('since_utc')})"
    except (OSError, json.JSONDecodeError):
        return "another benchrun process"




class TurnRefused(BenchrunError):
    """Another benchmark holds the turn and the caller asked not to wait: nothing ran."""

@contextlib.contextmanager
def benchmark_turn(home: Path, run_id: str, *, wait: bool = True, instance: Any = None,
                   on_wait: Callable[[str], None] | None = None,
                   timeout_s: float | None = None) -> Iterator[None]:
    """Hold the one-benchmark-at-a-time turn for ``run_id`` (wait for it, or refuse when
    ``wait`` is false) while the body runs."""
    from benchrun.liveness import identity, in_progress_holder, reap_dead_runs
    from benchrun.rundir import utc_now

    home = Path(home)
    (home / "locks").mkdir(parents=True, exist_ok=True)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    fh = open(home / "locks" / "benchmark.lock", "a+")
    try:
        told = False
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                holder = None
            except BlockingIOError:
                holder = _holder_text(home)
            if holder is None and instance is not None:
                reap_dead_runs(home, instance)
                holder = in_progress_holder(instance)
                if holder is not None:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
            if holder is None:
                break
            message = f"{holder} holds the one-benchmark-at-a-time turn (max_concurrent_runs: 1)"
            if not wait:
                raise TurnRefused(f"run {run_id} not started: {message}; wait for it, or run again without --no-wait")
            if deadline is not None and time.monotonic() > deadline:
                raise BenchrunError(f"run {run_id} not started after {timeout_s:.0f}s: {message}")
            if not told and on_wait is not None:
                on_wait(f"waiting: {message}")
                told = True
            time.sleep(POLL_S)
        atomic_write_json(home / "locks" / "benchmark.holder.json",
                          {"run_id": run_id, **identity(), "since_utc": utc_now()})
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.unlink(home / "locks" / "benchmark.holder.json")
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    finally:
        fh.close()
