"""What a served command's process must share with its client (identity, affinity,
scheduling, limits, signal dispositions), and taking those on in the forked child."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

# What CPython itself ignores at start-up (a fresh process of the command would too).
PYTHON_IGNORES = (signal.SIGPIPE, signal.SIGXFSZ)


class NotStarted(Exception):
    """The server will not start this command (it runs in the client's own process)."""


# --- what the command's process must share with the client ---------------------------------

SHARED_IDENTITY = ("uid", "gid", "groups", "cgroup", "namespaces", "personality", "oom_score_adj", "ionice")


def process_context() -> dict[str, Any]:
    """This process's attributes a command (and every suite it starts) inherits."""
    import resource

    ctx: dict[str, Any] = {
        "uid": os.getuid(), "gid": os.getgid(), "groups": sorted(os.getgroups()),
        "affinity": sorted(os.sched_getaffinity(0)),
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "sched": [os.sched_getscheduler(0), os.sched_getparam(0).sched_priority],
        "rlimits": {n: list(resource.getrlimit(getattr(resource, n))) for n in dir(resource) if n.startswith("RLIMIT_")},
        "ignored": sorted(int(s) for s in signal.valid_signals() if _ignored(s)),
        "sigmask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    }
    for key, read in (("cgroup", lambda: Path("/proc/self/cgroup").read_text()),
                      ("namespaces", lambda: {n: os.stat(f"/proc/self/ns/{n}").st_ino
                                              for n in sorted(os.listdir("/proc/self/ns"))}),
                      ("personality", lambda: Path("/proc/self/personality").read_text().strip()),
                      ("oom_score_adj", lambda: Path("/proc/self/oom_score_adj").read_text().strip()),
                      ("ionice", _io_priority)):
        try:
            ctx[key] = read()
        except OSError:
            ctx[key] = None
    return ctx


def _io_priority() -> list[int]:
    """(class, level) of this process's I/O priority (ionice): what fio's numbers depend on."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    sys_ioprio_get = {"x86_64": 252, "aarch64": 31}.get(os.uname().machine)
    if sys_ioprio_get is None:
        raise OSError("ioprio_get: unknown system call number on this machine")
    value = libc.syscall(sys_ioprio_get, 1, 0)  # IOPRIO_WHO_PROCESS, this process
    if value < 0:
        raise OSError(ctypes.get_errno(), "ioprio_get")
    return [value >> 13, value & 0x1FFF]


def _ignored(signum: int) -> bool:
    try:
        return signal.getsignal(signum) == signal.SIG_IGN
    except (ValueError, OSError):
        return False


def identity_mismatch(client: dict[str, Any], mine: dict[str, Any]) -> str | None:
    """Why a fork of this server cannot be the client's process; None when it can."""
    for key in SHARED_IDENTITY:
        if client.get(key) != mine.get(key):
            return f"the client's {key} differs from the warm orchestrator's"
    return None


def take_on(ctx: dict[str, Any]) -> None:
    """In the forked child: the client's affinity, scheduling, nice value, limits and signal
    dispositions; NotStarted when one of them cannot be had."""
    import resource

    try:
        for name, (soft, hard) in ctx["rlimits"].items():  # first: RLIMIT_NICE/RTPRIO may allow what follows
            which = getattr(resource, name, None)
            if which is not None and resource.getrlimit(which) != (soft, hard):
                resource.setrlimit(which, (soft, hard))
        used = _memory_in_use()
        for name, key in (("RLIMIT_AS", "VmSize"), ("RLIMIT_DATA", "VmData")):
            soft = ctx["rlimits"].get(name, [-1])[0]
            if soft != resource.RLIM_INFINITY and soft >= 0 and used.get(key, 0) >= soft:
                raise NotStarted(f"the client's {name} ({soft} bytes) is below what the warm orchestrator "
                                 f"already holds ({used[key]} bytes)")
        os.sched_setaffinity(0, ctx["affinity"])
        policy, priority = ctx["sched"]
        if [os.sched_getscheduler(0), os.sched_getparam(0).sched_priority] != [policy, priority]:
            os.sched_setscheduler(0, policy, os.sched_param(priority))
        if os.getpriority(os.PRIO_PROCESS, 0) != ctx["nice"]:
            os.setpriority(os.PRIO_PROCESS, 0, ctx["nice"])
    except (OSError, ValueError) as exc:
        raise NotStarted(f"the client's CPU affinity, scheduling, nice value or limits cannot be taken on ({exc})")
    ignored = set(ctx["ignored"])
    for s in signal.valid_signals():
        if s in (signal.SIGKILL, signal.SIGSTOP):
            continue
        if s in ignored or s in PYTHON_IGNORES:
            handler = signal.SIG_IGN
        elif s == signal.SIGINT:
            handler = signal.default_int_handler
        else:
            handler = signal.SIG_DFL
        try:
            signal.signal(s, handler)
        except (OSError, ValueError, RuntimeError):
            pass
    signal.pthread_sigmask(signal.SIG_SETMASK, ctx["sigmask"])  # signals held since the fork arrive now


def _memory_in_use() -> dict[str, int]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmSize", "VmData"):
            out[key] = int(rest.split()[0]) * 1024
    return out
