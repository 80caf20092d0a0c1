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
the client exits with it. Signals the client gets (Ctrl-C, SIGTERM, SIGHUP) are forwarded to
the child, and a client that dies without a word (kill -9) hangs the child up (SIGHUP), as a
closed terminal would.

The same pattern as Mercurial's chg and Rails' Spring. Written by hand because no maintained
Python library does it: multiprocessing's forkserver forks only its own Process objects and
passes neither a terminal nor an environment.

Safety:
- A server serves one version of the code: the socket's name is a digest of the interpreter,
  where benchrun is imported from, every source file's size and mtime, the installed
  packages' directories and the environment variables read at import (PYTHON*, locale,
  BLAS threads). Edit a file or `pip install` and the next command finds no server for the
  new code and runs on its own; the old server exits when idle.
- The socket lives in a directory of the user's own (mode 0700, checked, never followed if
  another user owns it), and the server answers only peers of its own uid (SO_PEERCRED).
  The environment it receives is never logged: the log has the command's name, pid, status
  and time.
- Only a refused connection falls back to running in-process; once a command was handed
  over it is never run twice.

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
KEY_ENV_PREFIXES = ("PYTHON", "LC_", "LANG", "OMP_", "OPENBLAS_", "MKL_", "LD_")
DEFAULT_IDLE_S = 1800.0
FRAME = struct.Struct(">I")
MAX_FRAME = 16 << 20
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class WarmError(Exception):
    """The warm path cannot be used; the message says why and what to do."""


# --- where a server for this code listens ------------------------------------------------

def code_root() -> Path:
    """The directory benchrun is imported from (the repo root for an editable install)."""
    return Path(__file__).resolve().parent.parent


def code_key(environ: dict[str, str] | None = None, root: Path | None = None) -> str:
    """Digest of everything a fresh ``benchrun`` process would depend on at import time."""
    environ = os.environ if environ is None else environ
    root = code_root() if root is None else root
    h = hashlib.sha256()
    h.update(f"{sys.executable}\0{sys.version}\0{root}\0".encode())
    for name in sorted(environ):
        if name.startswith(KEY_ENV_PREFIXES):
            h.update(f"{name}={environ[name]}\0".encode())
    for pkg in CODE_PACKAGES:
        for dirpath, dirnames, filenames in os.walk(root / pkg):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for fn in sorted(filenames):
                if fn.endswith(".py"):
                    st = os.stat(os.path.join(dirpath, fn))
                    h.update(f"{dirpath}/{fn}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    import sysconfig

    for key in ("purelib", "platlib"):  # a pip install changes these directories' mtimes
        path = sysconfig.get_paths().get(key)
        if path and os.path.isdir(path):
            h.update(f"{path}\0{os.stat(path).st_mtime_ns}\0".encode())
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
    file descriptors that came with the bytes."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        self.fds: list[int] = []

    def read(self) -> dict[str, Any] | None:
        """The next frame, or None when the peer closed the connection first."""
        while True:
            if len(self.buf) >= FRAME.size:
                (n,) = FRAME.unpack_from(self.buf)
                if n > MAX_FRAME:
                    raise WarmError(f"a frame of {n} bytes: not a benchrun peer")
                if len(self.buf) >= FRAME.size + n:
                    data, self.buf = self.buf[FRAME.size:FRAME.size + n], self.buf[FRAME.size + n:]
                    return json.loads(data)
            chunk, fds, _flags, _addr = socket.recv_fds(self.sock, 65536, 8)
            self.fds.extend(fds)
            if not chunk:
                return None
            self.buf += chunk


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
    except (FileNotFoundError, ConnectionRefusedError, socket.timeout):
        sock.close()
        return None
    except OSError:
        sock.close()
        return None
    sock.settimeout(None)
    return sock


def run_remote(argv: list[str], environ: dict[str, str] | None = None) -> int | None:
    """Hand the command to a warm server; its exit status, or None when no server serves this
    code (run it here then). Raises WarmError when one was required or the server failed it."""
    global last_usage
    environ = dict(os.environ if environ is None else environ)
    how = mode(environ)
    if how == "off":
        return None
    try:
        path = socket_path(environ)
    except WarmError:
        if how == "require":
            raise
        return None  # a directory we must not use: run here, as without a server
    sock = connect(path)
    if sock is None:
        if how == "require":
            raise WarmError(f"no warm orchestrator serves this code at {path} (BENCHRUN_WARM=require); "
                            "start one with `benchrun serve --detach`")
        return None
    umask = os.umask(0)
    os.umask(umask)
    req = {"op": "run", "argv": argv, "env": environ, "cwd": os.getcwd(), "umask": umask, "sys_path": sys.path}
    try:  # not delivered (a closed stdin, say): nothing ran, so it may run here instead
        send_frame(sock, req, [0, 1, 2])
    except OSError as exc:
        sock.close()
        if how == "require":
            raise WarmError(f"cannot hand the command to the warm orchestrator at {path}: {exc}") from None
        return None
    child: list[int] = []
    usage: dict[str, Any] = {}

    def forward(signum: int, _frame: Any) -> None:
        if child:
            try:
                os.kill(child[0], signum)
            except ProcessLookupError:
                pass

    previous = {s: signal.signal(s, forward) for s in FORWARDED_SIGNALS}
    try:
        reader = FrameReader(sock)
        while True:
            why = "closed the connection"
            try:
                doc = reader.read()
            except (OSError, ValueError) as exc:
                doc, why = None, f"failed ({type(exc).__name__}: {exc})"
            if doc is None:  # handed over: never run again here, whatever became of it
                pid = f" (child pid {child[0]})" if child else ""
                raise WarmError(f"the warm orchestrator at {path} {why} before the command ended{pid}; "
                                f"see its log, {path.with_suffix('.log')}")
            if "error" in doc:
                if doc.get("not_started") and how != "require":
                    return None  # refused before anything ran (a server stopping): run it here
                raise WarmError(doc["error"])
            if "pid" in doc:
                child.append(int(doc["pid"]))
            if "self_cpu_s" in doc:
                usage["self_cpu_s"] = doc["self_cpu_s"]
            if "exit" in doc:
                last_usage = {**usage, "cpu_s": doc.get("cpu_s"), "child_pid": child[0] if child else None}
                return int(doc["exit"])
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        sock.close()


# In a served command's process: the server it was forked from (its pid), for the command to
# say how it ran; None in a process of its own.
served_by: dict[str, Any] | None = None

# The served command's CPU seconds: its own (self_cpu_s) and with the processes it waited for
# (cpu_s), as the overhead benchmark reports them for a command run in-process.
last_usage: dict[str, Any] | None = None


def request(path: Path, op: str, timeout_s: float = 5.0) -> dict[str, Any] | None:
    """A control request (``ping``, ``stop``) to the server at ``path``; None if none listens."""
    sock = connect(path, timeout_s)
    if sock is None:
        return None
    with sock:
        sock.settimeout(timeout_s)
        try:
            send_frame(sock, {"op": op})
            return FrameReader(sock).read()
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


class Server:
    """One listening socket; a fork per command; exit statuses sent back as children end."""

    def __init__(self, path: Path, idle_s: float = DEFAULT_IDLE_S, log: Any = None) -> None:
        self.path = path
        self.idle_s = idle_s
        self.log = log or sys.stderr
        self.children: dict[int, tuple[socket.socket, int, str, float]] = {}  # pid → conn, pidfd, cmd, t0
        self.stopping = False
        self.last_active = time.monotonic()

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
        try:
            return os.stat(self.path).st_ino == self.ino
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
                if kind == "listen":
                    self.accept(listener)
                elif kind == "exit":
                    self.reap(pid)
                elif kind == "client":
                    self.client_event(pid)
            if not self.children:
                idle = time.monotonic() - self.last_active
                if self.stopping or idle > self.idle_s or not self.owns_path():
                    why = ("asked to stop" if self.stopping else "socket replaced" if not self.owns_path()
                           else f"idle {idle:.0f} s")
                    self.say(f"exiting ({why})")
                    if self.owns_path():
                        self.path.unlink(missing_ok=True)
                    return

    def accept(self, listener: socket.socket) -> None:
        conn, _ = listener.accept()
        self.last_active = time.monotonic()
        fds: list[int] = []
        try:
            _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                 struct.calcsize("3i")))
            if uid != os.getuid():
                self.say(f"refused a peer of uid {uid}")
                conn.close()
                return
            conn.settimeout(10)
            reader = FrameReader(conn)
            req = reader.read()
            fds = reader.fds
            if req is None:
                conn.close()
                return
            op = req.get("op")
            if op == "ping":
                send_frame(conn, {"pid": os.getpid(), "path": str(self.path), "running": len(self.children),
                                  "code_root": str(code_root())})
                conn.close()
            elif op == "stop":
                self.stopping = True
                send_frame(conn, {"pid": os.getpid(), "stopping": True, "running": len(self.children)})
                conn.close()
            elif op == "run":
                if self.stopping:
                    send_frame(conn, {"error": "the warm orchestrator is stopping", "not_started": True})
                    conn.close()
                    return
                if len(fds) != 3:
                    send_frame(conn, {"error": "a run request must carry stdin, stdout and stderr", "not_started": True})
                    conn.close()
                    return
                conn.settimeout(None)
                self.fork(conn, req, fds, listener)
            else:
                send_frame(conn, {"error": f"unknown request {op!r}", "not_started": True})
                conn.close()
        except (OSError, ValueError, WarmError) as exc:
            self.say(f"a request failed before it started: {type(exc).__name__}: {exc}")
            conn.close()
        finally:
            for fd in fds:
                os.close(fd)

    def fork(self, conn: socket.socket, req: dict[str, Any], fds: list[int], listener: socket.socket) -> None:
        argv = [str(a) for a in req.get("argv") or ["benchrun"]]
        command = argv[1] if len(argv) > 1 else "(none)"
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as exc:  # out of memory or processes: nothing ran, the client may run it itself
            self.say(f"{command}: cannot fork: {exc}")
            send_frame(conn, {"error": f"the warm orchestrator cannot fork: {exc}", "not_started": True})
            conn.close()
            return
        if pid == 0:  # the child: never returns
            code = 1
            try:
                listener.close()
                self.sel.close()
                for other, other_pidfd, *_ in self.children.values():
                    other.close()
                    os.close(other_pidfd)
                code = become_command(req, fds, conn)
            except SystemExit as exc:
                code = exit_status(exc.code)
            except BaseException:
                import traceback

                traceback.print_exc()
            finally:
                code = finish_like_interpreter(code)
                try:  # the child's own CPU (the server's wait4 adds its children's)
                    import resource

                    ru = resource.getrusage(resource.RUSAGE_SELF)
                    send_frame(conn, {"self_cpu_s": round(ru.ru_utime + ru.ru_stime, 3)})
                except OSError:
                    pass
                os._exit(code)
        pidfd = os.pidfd_open(pid)
        self.children[pid] = (conn, pidfd, command, time.monotonic())
        import selectors

        self.sel.register(pidfd, selectors.EVENT_READ, ("exit", pid))
        self.sel.register(conn, selectors.EVENT_READ, ("client", pid))
        self.say(f"{command}: child {pid}")
        try:
            send_frame(conn, {"pid": pid})
        except OSError:
            pass  # the client went away already: the client event hangs the child up

    def client_event(self, pid: int) -> None:
        """The client sent nothing after its request: readable means it went away."""
        conn = self.children[pid][0]
        try:
            gone = conn.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            gone = True
        if gone:
            self.sel.unregister(conn)
            self.say(f"child {pid}: its client went away; SIGHUP")
            try:
                os.kill(pid, signal.SIGHUP)
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
        code = os.waitstatus_to_exitcode(status)
        code = 128 - code if code < 0 else code  # killed by a signal: the shell's 128 + N
        self.last_active = time.monotonic()
        self.say(f"{command}: child {pid} exited {code} after {time.monotonic() - t0:.2f} s")
        try:
            send_frame(conn, {"exit": code, "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
                              "max_rss_kib": usage.ru_maxrss})
        except OSError:
            pass
        conn.close()


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
    for s in FORWARDED_SIGNALS + (signal.SIGCHLD,):
        signal.signal(s, signal.default_int_handler if s == signal.SIGINT else signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    time.tzset()  # local time as the client's TZ says, as a fresh process would read it
    os.umask(int(req["umask"]))
    sys.argv = list(req["argv"])
    sys.path[:] = [str(p) for p in req.get("sys_path") or sys.path]  # later imports resolve as the client's would
    # The standard streams were opened for the server's own (a log file); buffer them as a
    # fresh process would for these fds: line-buffered on a terminal.
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
    server = Server(path, idle_s)
    t0 = time.perf_counter()
    failed = preload()
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
            path = socket_path(create=stop is False and status is False)
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
