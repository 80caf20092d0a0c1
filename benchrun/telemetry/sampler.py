"""The sampler: a background thread that reads the host (and the GPUs, when NVML sees any) at a
fixed rate and streams the samples into a parquet file, renamed into place when it stops.

A thread rather than a process: it shares the launcher's interpreter, costs no start-up, and its
own CPU time is measurable exactly (``time.thread_time``), which is how its cost is reported.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from benchrun.telemetry.host import HostProbe
from benchrun.telemetry.samples import SAMPLE_SCHEMA, Sample, samples_table

log = logging.getLogger(__name__)

MIN_RATE_HZ = 0.1
MAX_RATE_HZ = 10.0
FLUSH_EVERY = 64  # samples per row group: bounds memory on long suites


class Sampler:
    """Samples at ``rate_hz`` from ``start()`` to ``stop()`` into ``path`` (written atomically).

    ``gpus``: ``"auto"`` samples NVML when it initialises and sees a GPU; ``False`` never does.
    ``visible_devices``: the suite's ``CUDA_VISIBLE_DEVICES`` (None: unset), so that only its GPUs
    are sampled (see :func:`benchrun.telemetry.nvml.suite_devices`).
    ``gpu_reason`` says why no GPU is sampled (None when some are); a GPU probe that cannot be
    built (NVML initialises but cannot open the GPUs: lost, no permission) leaves the host sampled
    alone, saying so there, rather than no sampler at all.
    """

    def __init__(self, path: Path, rate_hz: float = 1.0, *, gpus: bool | str = "auto",
                 node_name: str | None = None, metadata: dict[str, str] | None = None,
                 visible_devices: str | None = None, device_order: str | None = None) -> None:
        if not (MIN_RATE_HZ <= rate_hz <= MAX_RATE_HZ):
            raise ValueError(f"telemetry rate {rate_hz} Hz is outside [{MIN_RATE_HZ}, {MAX_RATE_HZ}]")
        self.path = Path(path)
        self.rate_hz = float(rate_hz)
        self.node_name = node_name or os.environ.get("BENCHRUN_NODE_NAME") or socket.gethostname()
        self.metadata = dict(metadata or {})
        self.host = HostProbe(self.node_name)
        self.gpu_reason: str | None = None
        self._gpu: Any = None
        if gpus:
            from benchrun.telemetry import nvml

            self.gpu_reason = nvml.unavailable_reason()
            if self.gpu_reason is None:
                try:
                    self._gpu = nvml.NvmlProbe(self.node_name, visible_devices, device_order)
                except Exception as exc:  # until 2026-12-07 this took the whole sampler (host samples, contention verdict) with it
                    log.warning("telemetry sampler %s: GPUs not sampled: %s", self.path.name, exc)
                    self.gpu_reason = (f"unavailable: the NVML probe could not be built ({type(exc).__name__}: {exc}); "
                                       "the host alone is sampled")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._buffer: list[Sample] = []
        self._writer: pq.ParquetWriter | None = None
        self._tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        self.cpu_s = 0.0  # the sampler thread's own CPU time
        self.n_ticks = 0
        self.started: float | None = None
        self.stopped: float | None = None
        self.error: str | None = None

    @property
    def gpu_count(self) -> int:
        return self._gpu.gpu_count if self._gpu is not None else 0

    @property
    def gpu_devices(self) -> list[int]:
        """The NVML indices of the GPUs sampled (the suite's when known)."""
        return list(self._gpu.devices) if self._gpu is not None else []

    @property
    def gpu_selection(self) -> str | None:
        """How the sampled GPUs were chosen (None without NVML)."""
        return self._gpu.selection if self._gpu is not None else None

    @property
    def gpu_xid_reason(self) -> str | None:
        """Which sampled GPUs' XID events are not recorded, and why (None: every one's is, or no GPU)."""
        return self._gpu.xid_reason if self._gpu is not None else None

    def watch(self, pid: int) -> None:
        """A suite process (tree leader): its tree's CPU is the suite's, not background."""
        self.host.watch(pid)

    def start(self) -> "Sampler":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.started = time.time()
        self._tick()  # the baseline that the first rates are measured against
        self._thread = threading.Thread(target=self._loop, name=f"telemetry:{self.path.name}", daemon=True)
        self._thread.start()
        return self

    def _tick(self) -> None:
        c0 = time.thread_time()
        try:
            self._buffer.extend(self.host.sample())
            if self._gpu is not None:
                self._buffer.extend(self._gpu.sample())
            self.n_ticks += 1
            if self.n_ticks % FLUSH_EVERY == 0:
                self._flush()
        except Exception as exc:  # a probe bug must never take the suite down with it
            if self.error is None:
                log.warning("telemetry sampler %s: %s", self.path.name, exc)
            self.error = f"{type(exc).__name__}: {exc}"
        self.cpu_s += time.thread_time() - c0

    def _loop(self) -> None:
        period = 1.0 / self.rate_hz
        deadline = time.monotonic() + period
        while not self._stop.wait(max(0.0, deadline - time.monotonic())):
            self._tick()
            deadline += period
            now = time.monotonic()
            if deadline < now:  # fell behind (a loaded machine): skip ticks, never burst
                deadline = now + period

    def _flush(self) -> None:
        if not self._buffer:
            return
        table = samples_table(self._buffer)
        self._buffer = []
        if self._writer is None:
            schema = SAMPLE_SCHEMA.with_metadata({k.encode(): v.encode() for k, v in self.metadata.items()})
            self._writer = pq.ParquetWriter(self._tmp, schema, compression="zstd")
        self._writer.write_table(table.replace_schema_metadata(self._writer.schema.metadata))

    def stop(self) -> Path:
        """Take a last sample, stop the thread, and rename the file into place."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._tick()
        self.stopped = time.time()
        try:
            self.metadata.update(window_start=f"{self.started:.6f}", window_end=f"{self.stopped:.6f}",
                                 rate_hz=str(self.rate_hz), sampler_cpu_s=f"{self.cpu_s:.6f}")
            meta = {k.encode(): v.encode() for k, v in self.metadata.items()}
            if self._writer is None:
                # Nothing streamed yet (a suite shorter than FLUSH_EVERY ticks, the usual case): the
                # file is written once, with the final window and cost already in its footer.
                table = samples_table(self._buffer)
                self._buffer = []
                pq.write_table(table.replace_schema_metadata(meta), self._tmp, compression="zstd")
            else:
                self._flush()
                self._writer.close()
                self._rewrite_metadata()
            with open(self._tmp, "rb") as fh:  # on disk before it takes the name (a power loss: old or new, never empty)
                os.fsync(fh.fileno())
            self._tmp.chmod(0o644)
            os.replace(self._tmp, self.path)
        finally:
            if self._tmp.exists():
                self._tmp.unlink()
            if self._gpu is not None:
                self._gpu.close()
        return self.path

    def _rewrite_metadata(self) -> None:
        """The window and cost are known only at the end; the footer is rewritten to carry them."""
        table = pq.read_table(self._tmp)
        meta = {k.encode(): v.encode() for k, v in self.metadata.items()}
        pq.write_table(table.replace_schema_metadata(meta), self._tmp, compression="zstd")

    def __enter__(self) -> "Sampler":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
