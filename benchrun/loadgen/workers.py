"""Worker processes of a multi-worker sweep: framed pickles over each child's stdin/stdout."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from typing import Any, Callable

from benchrun.loadgen.config import SweepConfig

CLOCK = time.perf_counter_ns


def _send(fh: Any, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    fh.write(len(data).to_bytes(8, "big") + data)
    fh.flush()


def _recv(fh: Any) -> Any:
    head = fh.read(8)
    if len(head) < 8:
        raise EOFError("load generator worker closed its pipe")
    n = int.from_bytes(head, "big")
    data = fh.read(n)
    if len(data) < n:
        raise EOFError("load generator worker closed its pipe mid-message")
    return pickle.loads(data)


class _Workers:
    """Worker subprocesses (argv lists, no shell) for a multi-worker sweep."""

    def __init__(self, cfg: SweepConfig, nonce: str, first: int = 0, total: int | None = None, resolved: Any = None) -> None:
        """``cfg.workers`` processes, global worker indexes ``first ..`` of ``total`` (the workers
        of every load pod of a load Job, :mod:`benchrun.loadgen.loadpods`; default this host's);
        ``resolved`` (:class:`benchrun.loadgen.conn.Resolved`): the sweep's one lookup of the
        endpoint's host, which the workers connect to instead of looking it up themselves."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("DAGSTER_PIPES")}
        total = cfg.workers if total is None else total
        self.procs = []
        try:
            for w in range(first, first + cfg.workers):
                p = subprocess.Popen(
                    [sys.executable, "-m", "benchrun.loadgen.runner", "--worker"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    env=env,
                )
                self.procs.append(p)
                _send(p.stdin, (cfg, w, total, nonce, resolved))
            for p in self.procs:
                _recv(p.stdout)  # ("ready",): imports done
        except BaseException:
            self.close()
            raise

    def run_point(self, point_index: int, barrier: Callable[[], int] | None = None) -> list[dict[str, Any]]:
        """One point on every worker; ``barrier`` (the load pods' go time, once all are warm) or a
        go time 20 ms after the last worker is warm."""
        start_at = CLOCK() + 50_000_000  # all workers start the warm-up together
        for p in self.procs:
            _send(p.stdin, (point_index, start_at))
        first = [_recv(p.stdout) for p in self.procs]
        waiting = [i for i, m in enumerate(first) if isinstance(m, tuple) and m == ("warm",)]
        go = barrier() if barrier is not None else CLOCK() + 20_000_000
        for i in waiting:
            _send(self.procs[i].stdin, ("go", go))
        results = [_recv(self.procs[i].stdout) if i in waiting else first[i] for i in range(len(self.procs))]
        fatal = [r["fatal"] for r in results if "fatal" in r]
        if fatal:
            raise RuntimeError(f"load generator worker failed: {fatal[0]}")
        return results

    def close(self) -> None:
        for p in self.procs:
            try:
                _send(p.stdin, None)
                p.stdin.close()
            except (OSError, ValueError):
                pass
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
            if p.stdout is not None:
                p.stdout.close()

