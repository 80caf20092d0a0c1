"""The reference server in a child process on a free loopback port (for suites, tests and benchmarks)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from typing import Any

from benchrun.loadgen.refengine import Dialect, PerfModel


class ServerProcess:
    """A reference server in a child process on a free loopback port (for suites and tests)."""

    def __init__(
        self,
        perf: PerfModel | None = None,
        *,
        model_name: str = "benchrun-synthetic",
        fault: str = "none",
        fault_every: int = 1,
        record_path: str | None = None,
        start_timeout_s: float = 20.0,
        dialect: Dialect | None = None,
        record_bodies: bool = False,
    ) -> None:
        perf = perf or PerfModel()
        argv = [
            sys.executable,
            "-m",
            "benchrun.loadgen.refserver",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--model",
            model_name,
            "--prefill-ms-per-token",
            repr(perf.prefill_ms_per_token),
            "--decode-base-ms",
            repr(perf.decode_base_ms),
            "--decode-ms-per-seq",
            repr(perf.decode_ms_per_seq),
            "--max-batch",
            str(perf.max_batch),
            "--max-batched-tokens",
            str(perf.max_batched_tokens),
            "--max-queue",
            str(perf.max_queue),
            "--fault",
            fault,
            "--fault-every",
            str(fault_every),
        ]
        if record_path:
            argv += ["--record", record_path]
        d = dialect or Dialect()
        argv += ["--stream-end", d.stream_end, "--chat-template-tokens", str(d.chat_template_tokens)]
        argv += ["--usage-in-last-chunk"] * d.usage_in_last_chunk + ["--reject-unknown-fields"] * d.reject_unknown_fields
        if d.prefix_cache_block:
            argv += ["--prefix-cache-block", str(d.prefix_cache_block)]
        argv += ["--stream-interval", str(d.stream_interval)] * (d.stream_interval != 1)
        argv += ["--record-bodies"] * record_bodies
        env = dict(os.environ)
        env.pop("DAGSTER_PIPES_CONTEXT", None)
        env.pop("DAGSTER_PIPES_MESSAGES", None)
        # stderr to a file: a pipe nobody drains would block the server once full
        self._stderr = tempfile.TemporaryFile(mode="w+", prefix="benchrun-refserver-", suffix=".log")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._stderr, env=env, text=True)
        self.info = self._read_announce(start_timeout_s)
        self.port = int(self.info["port"])
        self.url = f"http://127.0.0.1:{self.port}"
        self.perf = perf

    def _read_announce(self, timeout_s: float) -> dict[str, Any]:
        import selectors

        sel = selectors.DefaultSelector()
        assert self.proc.stdout is not None
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        ready = sel.select(timeout_s)
        sel.close()
        if not ready:
            raise RuntimeError(f"reference server did not start within {timeout_s:g} s: {self._stop_with_tail()}")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"reference server exited at start: {self._stop_with_tail()}")
        return json.loads(line)

    def _stop_with_tail(self) -> str:
        # the stderr file is read after the child has exited (all it wrote is there) and
        # before stop() closes it
        self._stop_process()
        lines = [ln.strip() for ln in self.stderr_tail().splitlines() if ln.strip()]
        self.stop()
        return " | ".join(lines[-3:]) or "(nothing on stderr)"

    def stderr_tail(self, n: int = 400) -> str:
        """The last ``n`` characters the server wrote to stderr."""
        try:
            self._stderr.seek(0)
            return self._stderr.read()[-n:].strip()
        except (OSError, ValueError):
            return ""

    def stop(self) -> None:
        """Terminate the child, wait for it, close its output files."""
        self._stop_process()
        self._stderr.close()

    def _stop_process(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
