"""The ``benchrun`` console entry point: hand the command to a warm orchestrator when one
serves this code (benchrun.warmstart), else run it in this process (benchrun.cli).

It imports only the standard library before deciding, so a served command starts in tens of
milliseconds instead of the seconds Dagster's imports take.
"""

from __future__ import annotations

import sys

# Commands that must run in this process: the server itself.
LOCAL_ONLY = frozenset({"serve"})


def main() -> None:
    argv = list(sys.argv)
    argv[0] = "benchrun"
    if len(argv) > 1 and argv[1] not in LOCAL_ONLY:
        from benchrun import warmstart

        try:
            code = warmstart.run_remote(argv)
        except warmstart.WarmError as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)
        if code is not None:
            sys.exit(code)
    from benchrun.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
