"""The one-benchmark-at-a-time lock: benchmarks must not share a machine with themselves.

Dagster's queue (``max_concurrent_runs: 1``) admits one benchmark run at a time among the
runs it launches, and counts every in-progress run in the instance, CLI runs included. A CLI
run takes the same turn: an OS lock (``<home>/locks/benchmark.lock``, released by the kernel
when its holder dies, so a killed run never keeps it) serialises CLI runs, and under it the
instance must have no other benchmark run in progress. Homes do not see each other's locks or
instances, so a second, machine-wide lock is held for the same span (``BENCHRUN_MACHINE_LOCK``,
default ``/tmp/benchrun-benchmark.lock``; ``off`` or empty: none): two homes on one machine
measured at once before (found in review). Waiting or refusing, the message names the run that
holds the turn (and, for the machine's lock, its home).
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
MACHINE_LOCK_ENV = "BENCHRUN_MACHINE_LOCK"
MACHINE_LOCK = Path("/tmp/benchrun-benchmark.lock")  # fixed: every user's and home's runs meet there


def _holder_text(record: Path) -> str:
    """The run a holder record names (the home's or the machine's; the machine's names the run's home
    too). A record whose process is gone (a run killed holding the turn, or another user's record,
    never replaced) is not believed."""
    from benchrun.liveness import alive

    try:
        h = json.loads(record.read_text(encoding="utf-8"))
        if isinstance(h, dict) and alive(h):
            of_home = f" of home {h['home']}" if h.get("home") else ""
            return f"run {h.get('run_id')}{of_home} (pid {h.get('pid')} on {h.get('host')}, since {h.get('since_utc')})"
    except (OSError, ValueError):
        pass
    return "another benchrun process"


def machine_lock_path() -> Path | None:
    """The machine-wide lock's path (``BENCHRUN_MACHINE_LOCK``); None when set to ``off`` or empty."""
    raw = os.environ.get(MACHINE_LOCK_ENV)
    if raw is None:
        return MACHINE_LOCK
    return None if raw.strip().lower() in ("", "off") else Path(raw)


def _machine_holder_path(lock: Path) -> Path:
    return lock.with_name(lock.name + ".holder.json")


def _open_machine_lock(lock: Path) -> int:
    """A descriptor to flock the machine lock by: made 0666 whatever the umask, so every user's runs
    can take it; one another user made (a sticky /tmp refuses opening it for writing) is opened
    read-only, which is enough for flock."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:
        return os.open(lock, os.O_RDONLY)
    with contextlib.suppress(OSError):  # not the owner: its owner made it 0666 already
        os.fchmod(fd, 0o666)
    return fd


def _flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


class TurnRefused(BenchrunError):
    """Another benchmark holds the turn and the caller asked not to wait: nothing ran."""

@contextlib.contextmanager
def benchmark_turn(home: Path, run_id: str, *, wait: bool = True, instance: Any = None,
                   on_wait: Callable[[str], None] | None = None,
                   timeout_s: float | None = None, settle: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold the one-benchmark-at-a-time turn for ``run_id`` (wait for it, or refuse when
    ``wait`` is false) while the body runs. ``settle`` (the last run's figure worker, up to minutes)
    runs once the locks are held and before the Dagster instance is asked for a run in progress:
    asked first, a run the daemon dequeued during that wait (it takes no lock) measured beside this
    one (review 2026-12-08)."""
    from benchrun.liveness import identity, in_progress_holder, reap_dead_runs
    from benchrun.rundir import utc_now

    home = Path(home)
    (home / "locks").mkdir(parents=True, exist_ok=True)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    machine = machine_lock_path()
    try:
        mfd = _open_machine_lock(machine) if machine is not None else None
    except OSError as exc:
        raise BenchrunError(f"run {run_id} not started: the machine-wide benchmark lock {machine} cannot be opened "
                            f"({exc}); point {MACHINE_LOCK_ENV} at a file every benchrun user here can open, or set "
                            f"{MACHINE_LOCK_ENV}=off to rely on the home's lock alone") from None
    try:
        fh = open(home / "locks" / "benchmark.lock", "a+")
    except OSError:
        if mfd is not None:
            os.close(mfd)
        raise
    try:
        told = False
        while True:
            message = None if _flock(fh.fileno()) else (f"{_holder_text(home / 'locks' / 'benchmark.holder.json')} "
                                                         "holds the one-benchmark-at-a-time turn (max_concurrent_runs: 1)")
            if message is None and mfd is not None and not _flock(mfd):
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
                message = (f"{_holder_text(_machine_holder_path(machine))} holds this machine's "
                           f"one-benchmark-at-a-time turn ({MACHINE_LOCK_ENV}={machine})")
            if message is None and settle is not None:
                settle()
            if message is None and instance is not None:
                reap_dead_runs(home, instance)
                holder = in_progress_holder(instance)
                if holder is not None:
                    _unlock(fh.fileno(), mfd)
                    message = f"{holder} holds the one-benchmark-at-a-time turn (max_concurrent_runs: 1)"
            if message is None:
                break
            if not wait:
                raise TurnRefused(f"run {run_id} not started: {message}; wait for it, or run again without --no-wait")
            if deadline is not None and time.monotonic() > deadline:
                raise BenchrunError(f"run {run_id} not started after {timeout_s:.0f}s: {message}")
            if not told and on_wait is not None:
                on_wait(f"waiting: {message}")
                told = True
            time.sleep(POLL_S)
        me = {"run_id": run_id, **identity(), "since_utc": utc_now()}
        atomic_write_json(home / "locks" / "benchmark.holder.json", me)
        if machine is not None:
            with contextlib.suppress(OSError):  # another user's stale record in a sticky /tmp: not replaced
                atomic_write_json(_machine_holder_path(machine), {**me, "home": str(home.resolve())})
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.unlink(home / "locks" / "benchmark.holder.json")
            if machine is not None:
                with contextlib.suppress(OSError):
                    os.unlink(_machine_holder_path(machine))
            _unlock(fh.fileno(), mfd)
    finally:
        fh.close()
        if mfd is not None:
            os.close(mfd)


def _unlock(home_fd: int, machine_fd: int | None) -> None:
    if machine_fd is not None:
        fcntl.flock(machine_fd, fcntl.LOCK_UN)
    fcntl.flock(home_fd, fcntl.LOCK_UN)
