"""The warm orchestrator's server: one listening socket, a fork per command that becomes the
client's process, exit statuses sent back as children end."""

from __future__ import annotations

import os
import signal
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

from benchrun.warm.client import request
from benchrun.warm.context import NotStarted, identity_mismatch, process_context, take_on
from benchrun.warm.frames import FrameReader, _close_all, send_frame
from benchrun.warm.key import WarmError, code_root, socket_path

DEFAULT_IDLE_S = 1800.0
# A peer has this long, from its connection, to send its whole request; one that is silent
# delays no other (the server reads every request as it comes, in one selector).
REQUEST_TIMEOUT_S = 2.0
# In a served command's process: the server it was forked from (its pid), for the command to
# say how it ran; None in a process of its own.
served_by: dict[str, Any] | None = None


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
        self.requests: dict[socket.socket, tuple[FrameReader, float]] = {}  # being read: reader, deadline

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
            now = time.monotonic()
            wait = min([1.0, *(max(0.0, d - now) for _r, d in self.requests.values())])
            for key, _ in sel.select(timeout=wait):
                kind, pid = key.data
                try:
                    if kind == "listen":
                        self.accept(listener)
                    elif kind == "request":
                        self.request_event(pid, listener)
                    elif kind == "exit":
                        self.reap(pid)
                    elif kind == "client" and pid in self.children:  # (reaped in this batch: nothing to do)
                        self.client_event(pid)
                except Exception as exc:  # one command's trouble must not end the server
                    self.say(f"{kind} event of child {pid}: {type(exc).__name__}: {exc}")
            self.expire_requests()
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
        for conn in list(self.requests):
            self._drop_request(conn, "the warm orchestrator is stopping")
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
        """Take a connection, greet it and read its request as it arrives (request_event)."""
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        self.last_active = time.monotonic()
        try:
            _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                  struct.calcsize("3i")))
            if uid != os.getuid():
                self.say(f"refused a peer of uid {uid}")
                conn.close()
                return
            conn.setblocking(False)
            send_frame(conn, {"hello": os.getpid()})  # a few bytes into an empty buffer: never blocks
        except OSError as exc:
            self.say(f"a connection failed before its request: {exc}")
            conn.close()
            return
        import selectors

        self.requests[conn] = (FrameReader(conn), time.monotonic() + REQUEST_TIMEOUT_S)
        self.sel.register(conn, selectors.EVENT_READ, ("request", conn))

    def _drop_request(self, conn: socket.socket, why: str | None = None) -> None:
        reader, _deadline = self.requests.pop(conn)
        self.sel.unregister(conn)
        reader.close_fds()
        if why:
            try:
                conn.settimeout(0.1)
                send_frame(conn, {"error": why, "not_started": True})
            except OSError:
                pass
        conn.close()

    def expire_requests(self) -> None:
        """End the connections whose request did not arrive in time (nothing was started)."""
        now = time.monotonic()
        for conn, (_reader, deadline) in list(self.requests.items()):
            if now >= deadline:
                self.say(f"a peer sent no whole request within {REQUEST_TIMEOUT_S:.0f} s; closed")
                self._drop_request(conn, "the request did not arrive in time")

    def request_event(self, conn: socket.socket, listener: socket.socket) -> None:
        if conn not in self.requests:  # (dropped earlier in this batch)
            return
        reader, _deadline = self.requests[conn]
        try:
            done, req = reader.poll()
        except Exception as exc:  # a bad peer must never take the server down
            self.say(f"a request failed before it started: {type(exc).__name__}: {exc}")
            self._drop_request(conn)
            return
        if not done:
            return
        del self.requests[conn]
        self.sel.unregister(conn)
        try:
            conn.settimeout(REQUEST_TIMEOUT_S)  # the answers: a peer that reads nothing is dropped
            self.handle(conn, reader, req, listener)
        finally:
            reader.close_fds()

    def handle(self, conn: socket.socket, reader: FrameReader, req: Any, listener: socket.socket) -> None:
        """Answer one whole request: ping, stop, or run (a fork that becomes the command)."""
        try:
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
                for pending, (pending_reader, _deadline) in self.requests.items():
                    pending.close()
                    _close_all(pending_reader.fds)
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
