"""Whether a pid still names the process a record (a run's claim, an ``ended_under`` fence) saw.

psutil's ``create_time`` is derived from the wall clock (the boot time the kernel reports moves with
it), so an NTP step or a VM resume of more than a second during a long run made a live run's
executor read as a different, later process: dead, and reaped (found in review). On Linux the record
also keeps the process's start in clock ticks since boot (``/proc/<pid>/stat`` field 22, which no
clock step changes) and the boot's id (``/proc/sys/kernel/random/boot_id``); where the record and
this machine have both, they decide. Records without them, and other systems, keep the
``create_time`` rule (within ``TOLERANCE_S``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TOLERANCE_S = 1.0


def create_time(pid: int) -> float | None:
    """The pid's start time (seconds since the epoch), None when it is gone or a zombie (killed and
    not yet waited for: dead, not running)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc.create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def start_ticks(pid: int) -> int | None:
    """The pid's start in clock ticks since boot (Linux; None elsewhere or when it is gone). Field 22
    of ``/proc/<pid>/stat``, counted after the last ``)``: the command name before it may hold spaces
    and parentheses."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
        return int(text[text.rindex(")") + 1:].split()[19])  # fields 3.. follow the name: 22 is [19]
    except (OSError, ValueError, IndexError):
        return None


def boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def stamp(pid: int) -> dict[str, Any]:
    """What a record keeps of ``pid``: ``pid_start`` always, ``start_ticks`` and ``boot_id`` on Linux."""
    out: dict[str, Any] = {"pid_start": create_time(pid)}
    ticks, boot = start_ticks(pid), boot_id()
    if ticks is not None and boot is not None:
        out.update(start_ticks=ticks, boot_id=boot)
    return out


def same_process(record: dict[str, Any], pid: int) -> bool:
    """Whether ``pid`` on this host is still the process ``record`` stamped: it exists (not a zombie)
    and, where the record has ticks and boot id and this machine reads them, started at those ticks
    in this boot; else its ``create_time`` is within ``TOLERANCE_S`` of ``pid_start`` (no
    ``pid_start``: any process with the pid counts)."""
    started = create_time(pid)
    if started is None:
        return False
    ticks, boot = record.get("start_ticks"), record.get("boot_id")
    if ticks is not None and boot:
        now_ticks, now_boot = start_ticks(pid), boot_id()
        if now_ticks is not None and now_boot is not None:
            try:
                return now_boot == boot and now_ticks == int(ticks)
            except (TypeError, ValueError):
                pass  # a damaged field: the create_time rule below
    expected = record.get("pid_start")
    return expected is None or abs(float(expected) - started) < TOLERANCE_S
