"""The operator's liveness heartbeat: a file its loop touches, and the probe that checks its age.

The operator is one process with one loop and no HTTP server; a loop blocked on a call that never
returns (a half-open connection) leaves the process alive but doing nothing. The loop touches the
file on every pass and between objects (:class:`Heartbeat`); the Deployment's exec liveness probe
runs ``python -m benchrun.controller.heartbeat FILE MAX_AGE_S``, which exits 1 when the file is
missing or older than ``MAX_AGE_S``, and the kubelet restarts the container. Only the standard
library is imported: the probe runs every period in the container.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)


class Heartbeat:
    """Touch ``path`` at most once every ``every_s`` seconds; ``None`` touches nothing."""

    def __init__(self, path: Path | None, every_s: float = 1.0) -> None:
        self.path, self.every_s = path, every_s
        self._last = float("-inf")

    def beat(self) -> None:
        if self.path is None or time.monotonic() - self._last < self.every_s:
            return
        self._last = time.monotonic()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.touch()
            os.utime(self.path)  # touch() on an existing file: set the time explicitly
        except OSError as exc:  # the work goes on; the probe, finding no fresh file, says so
            log.warning("could not touch the heartbeat file %s: %s", self.path, exc)


def age_s(path: Path) -> float | None:
    """Seconds since ``path`` was last touched; None when it does not exist."""
    try:
        return max(0.0, time.time() - path.stat().st_mtime)
    except FileNotFoundError:
        return None


def main(argv: list[str]) -> int:
    """The liveness probe: 0 when the heartbeat file is younger than the limit, else 1."""
    if len(argv) != 2:
        print("usage: python -m benchrun.controller.heartbeat FILE MAX_AGE_S", file=sys.stderr)
        return 2
    path, limit = Path(argv[0]), float(argv[1])
    age = age_s(path)
    if age is None or age > limit:
        print(f"operator heartbeat {path}: " + ("missing" if age is None else f"{age:.0f} s old, over {limit:.0f} s"),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
