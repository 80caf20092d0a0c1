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

The parts, in benchrun/warm/: key (the code key, the socket directory), frames (the wire
format), context (what the command's process shares with the client), client, server.
This module re-exports them and adds ``benchrun serve``.
"""


from __future__ import annotations

from typing import Any

from benchrun.warm.client import FORWARDED_SIGNALS, connect, mode, request, run_remote  # noqa: F401
from benchrun.warm.context import (  # noqa: F401
    PYTHON_IGNORES, SHARED_IDENTITY, NotStarted, identity_mismatch, process_context, take_on)
from benchrun.warm.frames import FRAME, MAX_FRAME, FrameReader, send_frame  # noqa: F401
from benchrun.warm.key import (  # noqa: F401
    CODE_PACKAGES, KEY_ENV_EXCLUDED, KEY_ENV_NAMES, KEY_ENV_PREFIXES, WarmError, code_key, code_root, socket_dir,
    socket_path)
from benchrun.warm.server import (  # noqa: F401
    DEFAULT_IDLE_S, REQUEST_TIMEOUT_S, Server, become_command, exit_status, finish_like_interpreter, preload, serve,
    start_detached)


def __getattr__(name: str) -> Any:
    """``served_by`` (set in a served command's process) and ``last_usage`` (the client's, after
    a served command) live in the modules that set them."""
    if name == "served_by":
        from benchrun.warm import server

        return server.served_by
    if name == "last_usage":
        from benchrun.warm import client

        return client.last_usage
    raise AttributeError(name)


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
