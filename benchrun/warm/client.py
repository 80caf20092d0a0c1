"""The warm orchestrator's client, the thin entry point's side: hand a command over, forward
signals to it, and exit as it exited."""

from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from benchrun.warm.context import _ignored, process_context
from benchrun.warm.frames import FrameReader, send_frame
from benchrun.warm.key import WarmError, socket_path

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# How long a client waits for the server's greeting before it runs the command itself (a server
# that is stopped, swapped out or stuck must not hold the command up); with BENCHRUN_WARM=require
# it waits longer, and then fails.
HELLO_WAIT_S = 1.5
HELLO_WAIT_REQUIRED_S = 30.0


# --- the client: the thin entry point's side --------------------------------------------------

def mode(environ: dict[str, str] | None = None) -> str:
    """``off`` (BENCHRUN_WARM=0), ``require`` or ``auto`` (the default: use one if it runs)."""
    raw = (os.environ if environ is None else environ).get("BENCHRUN_WARM", "").strip().lower()
    if raw in ("0", "off", "no", "false"):
        return "off"
    if raw in ("", "1", "auto", "on", "yes", "true"):
        return "auto"
    if raw == "require":
        return "require"
    # a typo (`requir`) was read as the default, and a command meant to fail without a warm server ran cold
    raise WarmError(f"BENCHRUN_WARM={raw!r}: expected 0 (never use a warm orchestrator), require (fail when none "
                    "serves this code) or unset (use one when it runs)")


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def connect(path: Path, timeout_s: float = 2.0) -> socket.socket | None:
    """A connection to the server at ``path``; None when none listens there."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        sock.connect(str(path))
    except OSError:  # none there, refused, or no answer
        sock.close()
        return None
    sock.settimeout(None)
    return sock


def await_hello(sock: socket.socket, timeout_s: float) -> bool:
    """Whether the server greeted this connection within ``timeout_s``: it does so as soon as it
    accepts one, so nothing is sent to a server that is not reading (and cannot start it later)."""
    reader = FrameReader(sock)
    try:
        doc = reader.read(timeout_s)
    except (OSError, ValueError):
        return False
    finally:
        reader.close_fds()
        sock.settimeout(None)
    return isinstance(doc, dict) and "hello" in doc


# The served command's CPU seconds: its own (self_cpu_s) and with the processes it waited for
# (cpu_s), as the overhead benchmark reports them for a command run in-process.
last_usage: dict[str, Any] | None = None


def run_remote(argv: list[str], environ: dict[str, str] | None = None) -> int | None:
    """Hand the command to a warm server; its exit status, or None when no server serves this
    code or it did not start the command (run it here then). Raises WarmError when one was
    required, or when the server failed a command it had started."""
    environ = dict(os.environ if environ is None else environ)
    how = mode(environ)
    if how == "off":
        return None
    closed = [fd for fd in (0, 1, 2) if not _is_open(fd)]
    if closed:
        # the control socket would take the lowest free descriptor and go to the command as its stdin or
        # stdout (its frames read as input, its hang-up never seen): such a command runs here (review 2026-12-08)
        if how == "require":
            raise WarmError(f"file descriptor(s) {', '.join(map(str, closed))} (stdin/stdout/stderr) are closed: "
                            "a command is handed to the warm orchestrator with its three standard streams open")
        return None
    try:
        path = socket_path(environ)
        cwd = os.getcwd()
    except (WarmError, OSError, ValueError) as exc:  # a directory we must not use, a file gone mid-walk, no cwd
        if how == "require":
            raise WarmError(f"no warm orchestrator can be used: {exc}") from None
        return None
    sock = connect(path)
    if sock is None:
        if how == "require":
            raise WarmError(f"no warm orchestrator serves this code at {path} (BENCHRUN_WARM=require); "
                            "start one with `benchrun serve --detach`")
        return None
    if not await_hello(sock, HELLO_WAIT_REQUIRED_S if how == "require" else HELLO_WAIT_S):
        sock.close()  # nothing was sent: the command cannot start there
        if how == "require":
            raise WarmError(f"the warm orchestrator at {path} did not answer (BENCHRUN_WARM=require); "
                            f"see its log, {path.with_suffix('.log')}")
        return None
    umask = os.umask(0)
    os.umask(umask)
    req = {"op": "run", "argv": argv, "env": environ, "cwd": cwd, "umask": umask, "sys_path": sys.path,
           "context": process_context()}
    # Forwarding is in place before the command is handed over: the command can print (to our
    # stdout, which it holds) and be signalled before this process would otherwise have installed
    # it, and a SIGTERM in that gap killed this client instead of reaching the command.
    fwd = _Forwarding()
    status: int | None = None
    try:
        with fwd:
            try:  # not delivered (a closed stdin, say): nothing ran, so it may run here instead
                send_frame(sock, req, [0, 1, 2])
            except OSError as exc:
                if how == "require":
                    raise WarmError(f"cannot hand the command to the warm orchestrator at {path}: {exc}") from None
            else:
                status = _await_exit(sock, path, fwd, how)
    finally:
        sock.close()
    if status is None and fwd.pid is None:  # it runs here: the signals held for it are ours
        for signum in fwd.pending:
            os.kill(os.getpid(), signum)
    return status


class _Forwarding:
    """Signals the client gets go to the command's process, those the client was started ignoring too:
    the command starts with them ignored (``context.take_on``), as a cold process would, and one that
    installs its own handler (refserver, the operator) then gets them; not forwarded, `kill -INT` of a
    backgrounded served refserver never stopped it (review 2026-12-08). The ones that arrive before the
    child's pid is known are delivered when it is."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.pending: list[int] = []
        self.signals = list(FORWARDED_SIGNALS)
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> "_Forwarding":
        for s in self.signals:
            self.previous[s] = signal.signal(s, self._forward)
        if not _ignored(signal.SIGTSTP):
            self.previous[signal.SIGTSTP] = signal.signal(signal.SIGTSTP, self._suspend)
        return self

    def __exit__(self, *exc: Any) -> None:
        for s, h in self.previous.items():
            signal.signal(s, h)

    def child(self, pid: int) -> None:
        self.pid = pid
        for s in self.pending:
            self._send(s)
        self.pending = []

    def _send(self, signum: int) -> None:
        try:
            os.kill(self.pid, signum)  # type: ignore[arg-type]
        except (ProcessLookupError, TypeError):
            pass

    def _forward(self, signum: int, _frame: Any) -> None:
        if self.pid is None:
            self.pending.append(signum)
        else:
            self._send(signum)

    def _suspend(self, signum: int, _frame: Any) -> None:
        """Ctrl-Z: stop the command, then this client (the shell's job); `fg` resumes both."""
        if self.pid is not None:
            self._send(signal.SIGSTOP)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)  # stops here until SIGCONT
        signal.signal(signal.SIGTSTP, self._suspend)
        if self.pid is not None:
            self._send(signal.SIGCONT)


def _await_exit(sock: socket.socket, path: Path, fwd: _Forwarding, how: str) -> int | None:
    global last_usage
    reader = FrameReader(sock)
    usage: dict[str, Any] = {}
    while True:
        why = "closed the connection"
        try:
            doc = reader.read()
        except (OSError, ValueError) as exc:
            doc, why = None, f"failed ({type(exc).__name__}: {exc})"
        if not isinstance(doc, dict):
            if "child_exit" in usage:  # the server went away, but the command had ended
                last_usage = usage
                return int(usage["child_exit"])
            # handed over: never run again here, whatever became of it
            pid = f" (child pid {fwd.pid})" if fwd.pid else ""
            raise WarmError(f"the warm orchestrator at {path} {why} before the command ended{pid}; "
                            f"see its log, {path.with_suffix('.log')}")
        if "error" in doc:
            if doc.get("not_started") and how != "require":
                return None  # refused before anything ran: run it here
            raise WarmError(doc["error"])
        if "pid" in doc:
            fwd.child(int(doc["pid"]))
        if "child_exit" in doc:
            usage.update(self_cpu_s=doc.get("self_cpu_s"), child_exit=doc["child_exit"])
        if "exit" in doc:
            last_usage = {**usage, "cpu_s": doc.get("cpu_s")}
            signum = doc.get("signal")
            if signum:  # it died of a signal: so does this client, as the shell expects
                _die_of(signum)
            return int(doc["exit"])


def _die_of(signum: int) -> None:
    """End this client by ``signum`` (its core, if any, is the command's: none here)."""
    import resource

    sys.stdout.flush()
    sys.stderr.flush()
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
        if signum not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
    except (OSError, ValueError):
        pass
    os.kill(os.getpid(), signum)


def request(path: Path, op: str, timeout_s: float = 5.0) -> dict[str, Any] | None:
    """A control request (``ping``, ``stop``) to the server at ``path``; None if none listens."""
    sock = connect(path, timeout_s)
    if sock is None:
        return None
    with sock:
        if not await_hello(sock, timeout_s):
            return None
        try:
            send_frame(sock, {"op": op})
            reader = FrameReader(sock)
            doc = reader.read(timeout_s)
            reader.close_fds()
            return doc if isinstance(doc, dict) else None
        except (OSError, ValueError):  # a listener that does not answer as a server: none
            return None
