"""The ``benchrun`` command line: one typer app; each area registers its commands."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

from typing import TYPE_CHECKING

import typer

from benchrun.errors import BenchrunError

if TYPE_CHECKING:
    import click

app = typer.Typer(
    name="benchrun",
    help="Declarative benchmark service for AI systems: validate, run, curate, compare.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # click already says "(Did you mean one of: ...)" for a misspelt command; typer's own
    # suggestion would say it a second time.
    suggest_commands=False,
    # Rich's boxed help suits a terminal; piped (`benchrun run --help | less`, docs) it wraps
    # every option into an 80-column box, so a pipe gets click's plain help instead.
    rich_markup_mode="rich" if sys.stdout is not None and sys.stdout.isatty() else None,
)

# Each module defines ``register(app: typer.Typer) -> None``. Heavy imports (dagster,
# pandas) stay inside the command functions so `benchrun validate` starts fast.
COMMAND_MODULES = (
    "benchrun.spec.commands",  # validate, digest, crd
    "benchrun.commands",  # run, submit, runs, show, cancel, delete
    "benchrun.loadgen.commands",  # loadgen, refserver
    "benchrun.warehouse.commands",  # query, lineage, retention
    "benchrun.warehouse.rebuild_commands",  # rebuild-warehouse
    "benchrun.stats.commands",  # compare, promote, report
    "benchrun.automation.commands",  # cadence
    "benchrun.provenance.commands",  # verify
    "benchrun.playbooks.commands",  # playbook
    "benchrun.launch.render",  # render
    "benchrun.preflight",  # preflight
    "benchrun.warmstart",  # serve
    "benchrun.controller.commands",  # operator
)



def _present(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


for _name in COMMAND_MODULES:
    if _present(_name):
        importlib.import_module(_name).register(app)


_RICH = typer.core.HAS_RICH


def _interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is DuckDB's answer to a Ctrl-C: its InterruptException,
    or the RuntimeError("Query interrupted") some of its calls raise instead (it printed a traceback, exit 1)."""
    seen = 0
    while exc is not None and seen < 10:
        if type(exc).__name__ == "InterruptException" or (isinstance(exc, RuntimeError)
                                                          and str(exc).strip() == "Query interrupted"):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def main() -> None:
    """Console entry point: user errors become one line on stderr and a non-zero exit."""
    from benchrun import gcpolicy

    gcpolicy.skip_the_final_collection()  # 0.9 s of a run's exit (benchrun.gcpolicy)
    gcpolicy.in_command = True
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:  # started with it closed (`>&-`): Python leaves None, and the first
            setattr(sys, name, open(os.devnull, "w"))  # print raised AttributeError; the output goes nowhere, as asked
    try:
        _main()
    finally:
        gcpolicy.in_command = False


def _stdout_file() -> tuple[int, int] | None:
    """What stdout's descriptor (1: a warm server's child writes the client's there too) refers to
    (device, inode), or None where it has none."""
    import os

    try:
        st = os.fstat(1)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _broken_pipe(exc: BaseException | None, stdout_was: tuple[int, int] | None) -> bool:
    """Whether ``exc`` (or what it was raised from: click turns EPIPE into ``sys.exit(1)``, rich into
    ``SystemExit(1)`` after pointing stdout at /dev/null) is a write to stdout's pipe whose reader is
    gone (`benchrun query --csv | head`): stdout then polls as an error, or is no longer ``stdout_was``."""
    import errno
    import select

    chain, seen = [], exc
    while seen is not None and len(chain) < 10:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    if not any(isinstance(e, OSError) and e.errno == errno.EPIPE for e in chain):
        return False
    if _stdout_file() != stdout_was:
        return True
    try:
        poller = select.poll()
        poller.register(1, select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except OSError:
        return stdout_was is None  # no descriptor 1 to ask: the EPIPE was stdout's


def _quiet_stdout() -> None:
    """Point stdout at /dev/null: the interpreter's last flush of what is still buffered then fails nowhere."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass


# A reader of stdout that stopped reading: the status of a Unix filter killed by SIGPIPE (128 + 13), as
# `yes | head` gives it. Not 0: `benchrun compare --json | head` must not turn a regression's exit 3 into
# a pass under `set -o pipefail`; not the silent 1 click and rich made of it, an error's.
EXIT_READER_GONE = 141


def _main() -> None:
    """Run the command; a reader of stdout that stopped reading (`| head`) ends it quietly with
    EXIT_READER_GONE, as SIGPIPE ends any Unix filter, not with a traceback or an error's exit 1."""
    stdout_was = _stdout_file()
    try:
        _run()
    except SystemExit as exc:
        if _broken_pipe(exc, stdout_was):
            _quiet_stdout()
            sys.exit(EXIT_READER_GONE)
        try:  # what is still buffered, flushed while a reader that left can still be told from an error
            sys.stdout.flush()
        except BrokenPipeError:
            _quiet_stdout()
            sys.exit(EXIT_READER_GONE)  # the reader left before the last of the output: as any other such end
        raise
    except BaseException as exc:
        if _broken_pipe(exc, stdout_was):
            _quiet_stdout()
            sys.exit(EXIT_READER_GONE)
        raise


def _usage_error_json(exc: "click.UsageError") -> None:
    """``benchrun compare ... --json``: a usage error click found before the command ran (a missing
    CANDIDATE, ``--variable`` without its value) is written as the JSON object compare writes for its
    other errors (``--json`` always says why), besides click's lines on stderr."""
    from benchrun.stats.commands import usage_error_json

    out = usage_error_json(exc, sys.argv[1:])
    if out is not None:
        print(out)


def _run() -> None:
    # Decided per command, not at import: a warm orchestrator imported this module with its
    # own (redirected) stdout, and the command's stdout may be a terminal.
    tty = sys.stdout is not None and sys.stdout.isatty()  # None: started with fd 1 closed (`>&-`)
    app.rich_markup_mode = "rich" if tty else None
    # Typer escapes "[default: …]" / "[required]" for rich whenever rich is installed, which a
    # pipe would show as "\[required]": plain help is written without rich at all.
    typer.core.HAS_RICH = tty and _RICH
    try:
        # Without standalone mode click returns a command's typer.Exit code instead of exiting.
        # The program's name as users type it: a command the detached warm server (`python -m benchrun.entry`)
        # runs said "Usage: python -m benchrun.benchrun ..." (click's guess from __main__'s package)
        rc = app(standalone_mode=False, prog_name="benchrun")
    except BenchrunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # click usage errors and the like
        import click

        if isinstance(exc, click.exceptions.ClickException):
            if isinstance(exc, click.UsageError):
                _usage_error_json(exc)
            exc.show()
            sys.exit(exc.exit_code)
        if _interrupted(exc):  # Ctrl-C inside a DuckDB query: DuckDB turns SIGINT into its own error
            print("aborted", file=sys.stderr)
            sys.exit(130)
        from benchrun.storage_errors import describe_storage_error

        message = describe_storage_error(exc)  # a full disk anywhere: one line, not a traceback
        if message is not None:
            print(f"error: {message}", file=sys.stderr)
            sys.exit(1)
        raise
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
