"""A warm orchestrator: ``benchrun serve`` imports benchrun, Dagster and the analysis stack
once, then runs every ``benchrun`` command handed to it in a fork of itself.

Why: a ``benchrun run`` of the canary spends about 3 s importing (dagster 1.5 s, scipy.stats
0.5 s, pandas, pyarrow, duckdb; benchmarks/README.md) before its first suite starts, which
alone is 5 % of the run. With a server running, the ``benchrun`` entry point (benchrun.entry,
which imports nothing heavy) hands its command over a Unix socket: argv, the environment, the
working directory, the umask and its stdin/stdout/stderr themselves (SCM_RIGHTS). The server
forks; the child takes all of those on, starts a session of its own and runs the command
exactly as the entry point would have (benchrun.cli.main), in a fresh process each time, so no
state is shared between commands. The server reaps the child and sends its exit status back;
the client exits with it (or dies of the same signal). Signals the client gets (Ctrl-C,
SIGTERM, SIGHUP, Ctrl-Z and `fg`) reach the child; signals the client ignores (nohup, a
background job) the child ignores too; a client that dies without a word (kill -9) hangs the
child up (SIGHUP), as a closed terminal would.

What a benchmark depends on is the client's, not the server's: CPU affinity (taskset), nice
value and scheduling policy (chrt), resource limits, as well as the environment, directory
and umask. The child takes those on; where it cannot (a lower nice value than the server's,
a raised hard limit), or where the client lives in another cgroup, namespace or group list
than the server, the command is not started there and runs in the client's own process.

The same pattern as Mercurial's chg and Rails' Spring. Written by hand because no maintained
Python library does it: multiprocessing's forkserver forks only its own Process objects and
passes neither a terminal nor an environment.

Safety:
- A server serves one version of the code: the socket's name is a digest of the interpreter,
  where benchrun is imported from, every source file's size and mtime, the installed
  packages' directories and the environment variables read at import (PYTHON*, locale,
  BLAS threads, DAGSTER_*, matplotlib's, and every BENCHRUN_* except the home and these
  settings). Edit a file or `pip install` and the next command finds no server for the
  new code and runs on its own; the old server exits when idle.
- The socket lives in a directory of the user's own (mode 0700, checked, never followed if
  another user owns it), and the server answers only peers of its own uid (SO_PEERCRED).
  The environment it receives is never logged: the log has the command's name, pid, status
  and time.
- A command the server did not start (refused, stopping, another cgroup) runs in-process
  instead; once one was started it is never run twice.

Environment: ``BENCHRUN_WARM=0`` never uses a server; ``BENCHRUN_WARM=require`` fails (exit
2) when none serves this code (tests, and the overhead benchmark, which must not measure a
cold start by mistake). ``BENCHRUN_WARM_DIR`` overrides the socket directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

# The packages a server imports and digests: benchrun's own, beside each other in the repo.
CODE_PACKAGES = ("benchrun", "bench_assets", "resources", "schedules", "sensors")
# Environment read by the interpreter or by libraries at import time: a server started under
# other values would not behave as a fresh process would, so they are part of its key.
KEY_ENV_PREFIXES = ("PYTHON", "LC_", "LANG", "OMP_", "OPENBLAS_", "MKL_", "LD_", "DAGSTER_", "MPL", "BENCHRUN_")
KEY_ENV_NAMES = frozenset({"TERMINAL_WIDTH", "FORCE_COLOR", "PY_COLORS", "NO_COLOR", "GITHUB_ACTIONS"})
# Read per command, never at import: a server serves every home.
KEY_ENV_EXCLUDED = frozenset({"BENCHRUN_HOME", "BENCHRUN_WARM", "BENCHRUN_WARM_DIR"})
DEFAULT_IDLE_S = 1800.0
FRAME = struct.Struct(">I")
MAX_FRAME = 16 << 20
REQUEST_TIMEOUT_S = 5.0
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# What CPython itself ignores at start-up (a fresh process of the command would too).
PYTHON_IGNORES = (signal.SIGPIPE, signal.SIGXFSZ)


class WarmError(Exception):
    """The warm path cannot be used; the message says why and what to do."""


class NotStarted(Exception):
    """The server will not start this command (it runs in the client's own process)."""


# --- where a server for this code listens ------------------------------------------------

def code_root() -> Path:
    """The directory benchrun is imported from (the repo root for an editable install)."""
    return Path(__file__).resolve().parent.parent


def code_key(environ: dict[str, str] | None = None, root: Path | None = None) -> str:
    """Digest of everything a fresh ``benchrun`` process would depend on at import time."""
    environ = os.environ if environ is None else environ
    root = code_root() if root is None else root
    h = hashlib.sha256()
    h.update(os.fsencode(f"{sys.executable}\0{sys.version}\0{root}\0"))
    for name in sorted(environ):
        if (name.startswith(KEY_ENV_PREFIXES) or name in KEY_ENV_NAMES) and name not in KEY_ENV_EXCLUDED:
            h.update(os.fsencode(f"{name}={environ[name]}\0"))
    for pkg in CODE_PACKAGES:
        for dirpath, dirnames, filenames in os.walk(root / pkg):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for fn in sorted(filenames):
                if fn.endswith(".py"):
                    st = os.stat(os.path.join(dirpath, fn))
                    h.update(os.fsencode(f"{dirpath}/{fn}\0{st.st_size}\0{st.st_mtime_ns}\0"))
    import sysconfig

    for key in ("purelib", "platlib"):  # a pip install changes these directories' mtimes
        path = sysconfig.get_paths().get(key)
        if path and os.path.isdir(path):
            h.update(os.fsencode(f"{path}\0{os.stat(path).st_mtime_ns}\0"))
    return h.hexdigest()[:24]


def socket_dir(environ: dict[str, str] | None = None, create: bool = False) -> Path:
    """``$BENCHRUN_WARM_DIR``, else ``$XDG_RUNTIME_DIR/benchrun``, else ``/tmp/benchrun-<uid>``;
    it must be ours and closed to others (0700), else WarmError names it."""
    environ = os.environ if environ is None else environ
    if environ.get("BENCHRUN_WARM_DIR"):
        path = Path(environ["BENCHRUN_WARM_DIR"])
    elif environ.get("XDG_RUNTIME_DIR"):
        path = Path(environ["XDG_RUNTIME_DIR"]) / "benchrun"
    else:
        path = Path("/tmp") / f"benchrun-{os.getuid()}"
    if create:
        try:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise WarmError(f"{path}: cannot create the warm orchestrator's directory ({exc.strerror})") from None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    import stat

    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise WarmError(f"{path}: not a directory owned by uid {os.getuid()}; remove it or set BENCHRUN_WARM_DIR")
    if st.st_mode & 0o077:
        raise WarmError(f"{path}: open to other users (mode {st.st_mode & 0o777:o}); chmod 700 it or remove it")
    return path


def socket_path(environ: dict[str, str] | None = None, create: bool = False) -> Path:
    return socket_dir(environ, create) / f"{code_key(environ)}.sock"


# --- framing: a 4-byte length, then JSON ---------------------------------------------------

def send_frame(sock: socket.socket, doc: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(doc).encode()
    payload = FRAME.pack(len(data)) + data
    if fds:
        sent = socket.send_fds(sock, [payload], fds)
        payload = payload[sent:]
    if payload:
        sock.sendall(payload)


class FrameReader:
    """Frames from a stream socket, keeping what arrived beyond the current frame and any
    file descriptors that came with the bytes (close-on-exec; the caller owns them)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        self.fds: list[int] = []

    def read(self, timeout_s: float | None = None) -> Any:
        """The next frame, or None when the peer closed the connection first; with
        ``timeout_s`` the whole frame must arrive within it (socket.timeout)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            if len(self.buf) >= FRAME.size:
                (n,) = FRAME.unpack_from(self.buf)
                if n > MAX_FRAME:
                    raise ValueError(f"a frame of {n} bytes: not a benchrun peer")
                if len(self.buf) >= FRAME.size + n:
                    data, self.buf = self.buf[FRAME.size:FRAME.size + n], self.buf[FRAME.size + n:]
                    return json.loads(data)
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout("the request did not arrive in time")
                self.sock.settimeout(left)
            chunk, fds, _flags, _addr = socket.recv_fds(self.sock, 65536, 8, socket.MSG_CMSG_CLOEXEC)
            self.fds.extend(fds)
            if not chunk:
                return None
            self.buf += chunk

    def close_fds(self) -> None:
        _close_all(self.fds)
        self.fds = []


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


# --- the client: the thin entry point's side --------------------------------------------------

def mode(environ: dict[str, str] | None = None) -> str:
    """``off`` (BENCHRUN_WARM=0), ``require`` or ``auto`` (the default: use one if it runs)."""
    raw = (os.environ if environ is None else environ).get("BENCHRUN_WARM", "").strip().lower()
    if raw in ("0", "off", "no", "false"):
        return "off"
    return "require" if raw == "require" else "auto"


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


# The served command's CPU seconds: its own (self_cpu_s) and with the processes it waited for
# (cpu_s), as the overhead benchmark reports them for a command run in-process.
last_usage: dict[str, Any] | None = None
# In a served command's process: the server it was forked from (its pid), for the command to
# say how it ran; None in a process of its own.
served_by: dict[str, Any] | None = None


def run_remote(argv: list[str], environ: dict[str, str] | None = None) -> int | None:
    """Hand the command to a warm server; its exit status, or None when no server serves this
    code or it did not start the command (run it here then). Raises WarmError when one was
    required, or when the server failed a command it had started."""
    environ = dict(os.environ if environ is None else environ)
    how = mode(environ)
    if how == "off":
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
    umask = os.umask(0)
    os.umask(umask)
    req = {"op": "run", "argv": argv, "env": environ, "cwd": cwd, "umask": umask, "sys_path": sys.path,
           "context": process_context()}
    try:  # not delivered (a closed stdin, say): nothing ran, so it may run here instead
        send_frame(sock, req, [0, 1, 2])
    except OSError as exc:
        sock.close()
        if how == "require":
            raise WarmError(f"cannot hand the command to the warm orchestrator at {path}: {exc}") from None
        return None
    try:
        with _Forwarding(req["context"]["ignored"]) as fwd:
            return _await_exit(sock, path, fwd, how)
    finally:
        sock.close()


class _Forwarding:
    """Signals the client gets go to the command's process (those it ignores stay ignored);
    the ones that arrive before the child's pid is known are delivered when it is."""

    def __init__(self, ignored: list[int]) -> None:
        self.pid: int | None = None
        self.pending: list[int] = []
        self.signals = [s for s in FORWARDED_SIGNALS if int(s) not in ignored]
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
        try:
            send_frame(sock, {"op": op})
            reader = FrameReader(sock)
            doc = reader.read(timeout_s)
            reader.close_fds()
            return doc if isinstance(doc, dict) else None
        except (OSError, ValueError):  # a listener that does not answer as a server: none
            return None


# --- the server -----------------------------------------------------------------------------

def preload() -> list[str]:
    """Import what commands use: the CLI and its commands, Dagster and the definitions, the
    instance's storages, the analysis stack. Suites are not imported: they run as processes
    of their own. Returns the modules that could not be imported (logged, not fatal)."""
    import importlib
    import pkgutil

    failed = []
    names = ["benchrun.cli", "dagster", "bench_assets.definitions", "benchrun.dagster_storage",
             "dagster._core.storage.runs.sqlite.sqlite_run_storage",
             "dagster._core.storage.schedules.sqlite.sqlite_schedule_storage",
             "dagster._core.storage.event_log.sqlite.sqlite_event_log",
             "dagster._core.storage.legacy_storage", "scipy.stats", "pandas", "duckdb", "pyarrow.parquet"]
    import benchrun

    for info in pkgutil.walk_packages(benchrun.__path__, "benchrun."):
        if not info.name.startswith(("benchrun.suites.", "benchrun.loadgen.", "benchrun.warmstart")):
            names.append(info.name)
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # an optional dependency missing: that command imports it itself
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    return failed


def _checked_request(req: Any) -> dict[str, Any]:
    """The run request's fields with their types, or ValueError."""
    ok = (isinstance(req, dict) and isinstance(req.get("argv"), list) and req["argv"]
          and all(isinstance(a, str) for a in req["argv"])
          and isinstance(req.get("env"), dict) and all(isinstance(k, str) and isinstance(v, str)
                                                       for k, v in req["env"].items())
          and isinstance(req.get("cwd"), str) and isinstance(req.get("umask"), int)
          and isinstance(req.get("sys_path"), list) and isinstance(req.get("context"), dict))
    if not ok:
        raise ValueError("a malformed run request")
    return req


class Server:
    """One listening socket; a fork per command; exit statuses sent back as children end."""

    def __init__(self, path: Path, idle_s: float = DEFAULT_IDLE_S, log: Any = None) -> None:
        self.path = path
        self.idle_s = idle_s
        self.log = log or sys.stderr
        self.children: dict[int, tuple[socket.socket, int, str, float]] = {}  # pid → conn, pidfd, cmd, t0
        self.stopping = False
        self.last_active = time.monotonic()
        self.pid = os.getpid()
        self.context = process_context()
        self.ino = -1

    def say(self, msg: str) -> None:
        print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} [pid {os.getpid()}] {msg}", file=self.log, flush=True)

    def bind(self) -> socket.socket:
        if request(self.path, "ping") is not None:
            raise WarmError(f"a warm orchestrator already serves this code at {self.path}")
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        tmp.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(tmp))
        os.chmod(tmp, 0o600)
        sock.listen(16)
        os.replace(tmp, self.path)  # atomic: a stale socket file is replaced, never half there
        self.ino = os.stat(self.path).st_ino
        return sock

    def owns_path(self) -> bool:
        """Only the server process itself, and only while the socket file is its own."""
        try:
            return os.getpid() == self.pid and os.stat(self.path).st_ino == self.ino
        except FileNotFoundError:
            return False

    def serve_forever(self, listener: socket.socket) -> None:
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(listener, selectors.EVENT_READ, ("listen", None))
        self.sel = sel
        while True:
            for key, _ in sel.select(timeout=1.0):
                kind, pid = key.data
                try:
                    if kind == "listen":
                        self.accept(listener)
                    elif kind == "exit":
                        self.reap(pid)
                    elif kind == "client" and pid in self.children:  # (reaped in this batch: nothing to do)
                        self.client_event(pid)
                except Exception as exc:  # one command's trouble must not end the server
                    self.say(f"{kind} event of child {pid}: {type(exc).__name__}: {exc}")
            if not self.children:
                idle = time.monotonic() - self.last_active
                if self.stopping or idle > self.idle_s or not self.owns_path():
                    why = ("asked to stop" if self.stopping else "socket replaced" if not self.owns_path()
                           else f"idle {idle:.0f} s")
                    self.say(f"exiting ({why})")
                    self.close(listener)
                    return

    def close(self, listener: socket.socket) -> None:
        """Stop listening; whoever connected meanwhile is told to run the command itself."""
        if self.owns_path():
            self.path.unlink(missing_ok=True)
        listener.setblocking(False)
        while True:
            try:
                conn, _ = listener.accept()
            except (BlockingIOError, OSError):
                return
            with conn:
                try:
                    send_frame(conn, {"error": "the warm orchestrator is stopping", "not_started": True})
                except OSError:
                    pass

    def accept(self, listener: socket.socket) -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        self.last_active = time.monotonic()
        reader = FrameReader(conn)
        try:
            _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                  struct.calcsize("3i")))
            if uid != os.getuid():
                self.say(f"refused a peer of uid {uid}")
                conn.close()
                return
            req = reader.read(REQUEST_TIMEOUT_S)
            op = req.get("op") if isinstance(req, dict) else None
            if op == "ping":
                send_frame(conn, {"pid": os.getpid(), "path": str(self.path), "running": len(self.children),
                                  "code_root": str(code_root())})
            elif op == "stop":
                self.stopping = True
                send_frame(conn, {"pid": os.getpid(), "stopping": True, "running": len(self.children)})
            elif op == "run":
                try:
                    if self.stopping:
                        raise NotStarted("the warm orchestrator is stopping")
                    if len(reader.fds) != 3:
                        raise NotStarted("a run request must carry stdin, stdout and stderr")
                    req = _checked_request(req)
                    mismatch = identity_mismatch(req["context"], self.context)
                    if mismatch:
                        raise NotStarted(mismatch)
                except NotStarted as exc:
                    self.say(f"not started: {exc}")
                    send_frame(conn, {"error": str(exc), "not_started": True})
                else:
                    conn.settimeout(None)
                    fds, reader.fds = reader.fds, []
                    self.fork(conn, req, fds, listener)  # owns conn and fds from here
                    return
            elif req is not None:
                send_frame(conn, {"error": f"unknown request {op!r}", "not_started": True})
            conn.close()
        except Exception as exc:  # a bad peer must never take the server down
            self.say(f"a request failed before it started: {type(exc).__name__}: {exc}")
            conn.close()
        finally:
            reader.close_fds()

    def fork(self, conn: socket.socket, req: dict[str, Any], fds: list[int], listener: socket.socket) -> None:
        argv = req["argv"]
        command = argv[1] if len(argv) > 1 else "(none)"
        sys.stdout.flush()
        sys.stderr.flush()
        # Signals wait until the child has the client's dispositions (take_on restores the mask).
        held = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        try:
            pid = os.fork()
        except OSError as exc:  # out of memory or processes: nothing ran, the client may run it itself
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            self.say(f"{command}: cannot fork: {exc}")
            _close_all(fds)
            send_frame(conn, {"error": f"the warm orchestrator cannot fork: {exc}", "not_started": True})
            conn.close()
            return
        if pid == 0:
            self.child(conn, req, fds, listener)  # never returns
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        _close_all(fds)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError as exc:  # cannot watch it: end it now rather than leave it unreaped
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            self.say(f"{command}: child {pid} killed, it could not be watched: {exc}")
            send_frame(conn, {"error": f"the warm orchestrator could not watch its child: {exc}"})
            conn.close()
            return
        self.children[pid] = (conn, pidfd, command, time.monotonic())
        import selectors

        self.sel.register(pidfd, selectors.EVENT_READ, ("exit", pid))
        self.sel.register(conn, selectors.EVENT_READ, ("client", pid))
        self.say(f"{command}: child {pid}")
        try:
            send_frame(conn, {"pid": pid})
        except OSError:
            pass  # the client went away already: the client event hangs the child up

    def child(self, conn: socket.socket, req: dict[str, Any], fds: list[int], listener: socket.socket) -> None:
        """The forked child: become the client's command, report, and exit — never return
        into the server's frames, whatever is raised."""
        code = 1
        try:
            try:
                listener.close()
                self.sel.close()
                for other, other_pidfd, *_ in self.children.values():
                    other.close()
                    os.close(other_pidfd)
                code = become_command(req, fds, conn)
            except NotStarted as exc:
                send_frame(conn, {"error": str(exc), "not_started": True})
                os._exit(0)
            except SystemExit as exc:
                code = exit_status(exc.code)
            except BaseException:
                import traceback

                traceback.print_exc()
            code = finish_like_interpreter(code)
            signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())  # nothing interrupts the report
            import resource

            ru = resource.getrusage(resource.RUSAGE_SELF)
            send_frame(conn, {"self_cpu_s": round(ru.ru_utime + ru.ru_stime, 3), "child_exit": code})
        except BaseException:
            pass
        finally:
            os._exit(code)

    def client_event(self, pid: int) -> None:
        """The client sends nothing after its request: readable means it went away."""
        conn = self.children[pid][0]
        try:
            gone = conn.recv(65536) == b""  # (anything it did send is dropped)
        except OSError:
            gone = True
        if gone:
            self.sel.unregister(conn)
            self.say(f"child {pid}: its client went away; SIGHUP")
            try:  # (and SIGCONT: a command stopped by Ctrl-Z would never see the hang-up)
                os.kill(pid, signal.SIGHUP)
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def reap(self, pid: int) -> None:
        conn, pidfd, command, t0 = self.children.pop(pid)
        _, status, usage = os.wait4(pid, 0)
        self.sel.unregister(pidfd)
        os.close(pidfd)
        try:
            self.sel.unregister(conn)
        except KeyError:
            pass
        signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        code = 128 + signum if signum else os.waitstatus_to_exitcode(status)
        self.last_active = time.monotonic()
        self.say(f"{command}: child {pid} exited {code} after {time.monotonic() - t0:.2f} s")
        try:
            send_frame(conn, {"exit": code, "signal": signum, "cpu_s": round(usage.ru_utime + usage.ru_stime, 3)})
        except OSError:
            pass
        conn.close()


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def exit_status(code: Any) -> int:
    """What the interpreter would exit with for ``sys.exit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def finish_like_interpreter(code: int) -> int:
    """What the interpreter does at exit, for a forked child that must not unwind into the
    server's frames: join non-daemon threads, run atexit handlers, flush the streams."""
    import atexit
    import threading

    try:
        threading._shutdown()  # type: ignore[attr-defined]  # CPython's own exit step
        atexit._run_exitfuncs()
    except BaseException:
        import traceback

        traceback.print_exc()
        code = code or 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    return code


def become_command(req: dict[str, Any], fds: list[int], conn: socket.socket) -> int:
    """In the forked child: take on the client's session, run the command, return its status."""
    global served_by
    served_by = {"server_pid": os.getppid()}
    os.setsid()  # its own session: no controlling terminal, so reading the client's never stops it
    take_on(req["context"])  # NotStarted before anything of the command ran
    for target, fd in enumerate(fds):
        if fd != target:
            os.dup2(fd, target)
        os.set_inheritable(target, True)  # (received close-on-exec; the suites inherit 0-2)
    _close_all([fd for fd in fds if fd > 2])
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    time.tzset()  # local time as the client's TZ says, as a fresh process would read it
    if os.environ.get("PYTHONFAULTHANDLER"):  # take_on reset the fatal signals' handlers
        import faulthandler

        faulthandler.enable()
    os.umask(int(req["umask"]))
    sys.argv = list(req["argv"])
    sys.path[:] = [str(p) for p in req["sys_path"]]  # later imports resolve as the client's would
    # The standard streams were opened for the server's own (a log file, or none): as a fresh
    # process would have them for these fds, line-buffered on a terminal.
    for name, fd, mode_ in (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w")):
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode_, closefd=False, line_buffering=mode_ == "w" and os.isatty(fd)))
    sys.stdout.reconfigure(line_buffering=os.isatty(1))
    from benchrun import cli

    try:
        cli.main()
    except SystemExit as exc:
        return exit_status(exc.code)
    return 0


def serve(idle_s: float = DEFAULT_IDLE_S) -> int:
    """Run a server in this process until it is idle for ``idle_s``, stopped, or replaced."""
    path = socket_path(create=True)
    if request(path, "ping") is not None:  # say so before spending seconds on imports
        raise WarmError(f"a warm orchestrator already serves this code at {path}")
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError) as exc:
        raise WarmError(f"this kernel cannot watch processes by pidfd (Linux >= 5.3 needed): {exc}") from None
    server = Server(path, idle_s)
    t0 = time.perf_counter()
    failed = preload()
    from benchrun.gcpolicy import freeze_long_lived

    # Shared with every child, never collected again in any of them (and pages stay shared).
    freeze_long_lived(collect=True)
    # The key again after the imports: code edited while they ran must not be served as this.
    if socket_path() != path:
        raise WarmError("benchrun's code changed while the server started; start it again")
    listener = server.bind()
    server.say(f"serving {code_root()} at {path}; imports took {time.perf_counter() - t0:.2f} s"
               + (f"; not imported: {'; '.join(failed)}" if failed else ""))

    def terminate(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    try:
        with listener:
            server.serve_forever(listener)
    except (KeyboardInterrupt, SystemExit):  # Ctrl-C or SIGTERM: the running commands go on
        server.say(f"exiting (signal); {len(server.children)} command(s) still running on their own")
        raise
    finally:
        if server.owns_path():
            path.unlink(missing_ok=True)
    return 0


def start_detached(idle_s: float = DEFAULT_IDLE_S, timeout_s: float = 120.0) -> dict[str, Any]:
    """Start ``benchrun serve`` in the background (its own session, output to its log) and
    wait until it answers; the ping answer (pid, path). Already running: its answer."""
    import subprocess

    path = socket_path(create=True)
    found = request(path, "ping")
    if found is not None:
        return {**found, "already": True}
    log_path = path.with_suffix(".log")
    with open(log_path, "ab") as log, open(os.devnull, "rb") as devnull:
        proc = subprocess.Popen([sys.executable, "-m", "benchrun.entry", "serve", "--idle-timeout", str(idle_s)],
                                stdin=devnull, stdout=log, stderr=log, start_new_session=True,
                                env={**os.environ, "BENCHRUN_WARM": "0"}, cwd="/")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        answer = request(path, "ping")
        if answer is not None:
            return answer
        if proc.poll() is not None:
            raise WarmError(f"the warm orchestrator exited ({proc.returncode}) while starting; see {log_path}")
        time.sleep(0.1)
    proc.kill()
    raise WarmError(f"the warm orchestrator did not answer within {timeout_s:.0f} s; see {log_path}")


def register(app: Any) -> None:
    """Add ``serve`` to the benchrun CLI."""
    import typer

    from benchrun.errors import BenchrunError

    @app.command("serve")
    def serve_cmd(
        detach: bool = typer.Option(False, "--detach", help="start in the background and return once it answers"),
        stop: bool = typer.Option(False, "--stop", help="stop the server for this code (after its running commands)"),
        status: bool = typer.Option(False, "--status", help="say whether a server serves this code; exit 1 if none"),
        idle_timeout: float = typer.Option(DEFAULT_IDLE_S, "--idle-timeout",
                                           help="seconds without a command after which the server exits"),
    ) -> None:
        """Keep benchrun warm: later `benchrun` commands run in a fork of this process instead of
        starting Python and importing Dagster each time (~3 s less per command).

        Each command still runs in a fresh process of its own, with your environment, working
        directory and terminal; the server serves one version of the code, so after an edit or
        a `pip install` commands run on their own until you start another. BENCHRUN_WARM=0
        turns it off for a command.
        """
        try:
            if idle_timeout <= 0:
                raise BenchrunError("--idle-timeout must be > 0 seconds")
            path = socket_path(create=not (stop or status))
            if stop or status:
                answer = request(path, "stop" if stop else "ping")
                if answer is None:
                    print(f"no warm orchestrator serves this code ({path})")
                    raise typer.Exit(1 if status else 0)
                verb = "stopping" if stop else "serving"
                print(f"warm orchestrator pid {answer['pid']} {verb} at {path}; "
                      f"{answer['running']} command(s) running")
                return
            if detach:
                answer = start_detached(idle_timeout)
                state = "already running" if answer.get("already") else "started"
                print(f"warm orchestrator {state}: pid {answer['pid']} at {path} (log {path.with_suffix('.log')}); "
                      f"it exits after {idle_timeout:.0f} s without a command, or `benchrun serve --stop`")
                return
            serve(idle_timeout)
        except WarmError as exc:
            raise BenchrunError(str(exc)) from None
