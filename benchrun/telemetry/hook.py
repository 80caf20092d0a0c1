"""What a launcher calls around one replicate: start the sampler just before the suite, stop it just
after, query Prometheus for the replicate's window when one is configured, and add the summaries
to the replicate's result document. Launcher-agnostic: it needs the invocation and the run
directory the replicate writes into (a pod runs it around its own suite, or a launcher skips it).
Telemetry never fails a replicate: its own errors are logged and recorded in the result.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Iterator, Mapping

from benchrun.plan import Invocation
from benchrun.suites.result import STATUSES
from benchrun.fsio import atomic_write_json
from benchrun.telemetry.samples import read_samples, telemetry_relpath
from benchrun.telemetry.sampler import MAX_RATE_HZ, MIN_RATE_HZ, Sampler
from benchrun.telemetry.summary import contention, contention_threshold_pct, in_window, summarise

log = logging.getLogger(__name__)

RATE_ENV = "BENCHRUN_TELEMETRY_HZ"  # set by the planner from spec.observability.telemetrySampling
DEFAULT_RATE_HZ = 1.0


def sample_rate_hz(env: Mapping[str, str]) -> float | None:
    """The sampling rate for an invocation (None: sampling off)."""
    raw = env.get(RATE_ENV)
    if raw is None or raw == "":
        return DEFAULT_RATE_HZ
    try:
        rate = float(raw)
    except ValueError:
        log.warning("%s=%r is not a number; sampling at %g Hz", RATE_ENV, raw, DEFAULT_RATE_HZ)
        return DEFAULT_RATE_HZ
    if rate <= 0:
        return None
    return min(max(rate, MIN_RATE_HZ), MAX_RATE_HZ)


def _suite_env(inv: Invocation, name: str) -> str | None:
    """A variable as the suite process sees it: its invocation's environment, else (a pod's runner,
    whose device plugin sets it) this process's."""
    return inv.env[name] if name in inv.env else os.environ.get(name)


class ReplicateTelemetry:
    """The sampler of one replicate plus what is done with its samples when it stops."""

    def __init__(self, inv: Invocation, run_dir: Path, rate_hz: float) -> None:
        self.inv = inv
        self.run_dir = Path(run_dir)
        self.relpath = telemetry_relpath(inv.run_id, inv.suite, inv.replicate)
        path = self.run_dir / self.relpath
        path.unlink(missing_ok=True)  # a file from an earlier attempt is not this one's
        self.sampler = Sampler(path, rate_hz, metadata={
            "run_id": inv.run_id, "suite": inv.suite, "replicate": str(inv.replicate), "layer": inv.layer,
            "benchmark_case_id": inv.benchmark_case_id},
            visible_devices=_suite_env(inv, "CUDA_VISIBLE_DEVICES"), device_order=_suite_env(inv, "CUDA_DEVICE_ORDER"))

    def watch(self, pid: int) -> None:
        """Tell the sampler the suite's process id (its tree is the suite, not background)."""
        self.sampler.watch(pid)

    def finish(self) -> dict[str, Any]:
        """Stop sampling, write the samples, query Prometheus, and return the telemetry record."""
        self.sampler.stop()
        s = self.sampler
        record: dict[str, Any] = {
            "samples": self.relpath, "rate_hz": s.rate_hz, "window_start": s.started, "window_end": s.stopped,
            "ticks": s.n_ticks, "sampler_cpu_s": round(s.cpu_s, 6), "node_name": s.node_name,
            "gpus": s.gpu_count, "gpu_devices": s.gpu_devices, "gpu_selection": s.gpu_selection,
            "gpu_reason": s.gpu_reason, "gpu_xid_reason": s.gpu_xid_reason, "error": s.error,
        }
        whole = read_samples(self.run_dir / self.relpath)
        table, record["summary_window"] = measured_samples(whole, self.run_dir / self.inv.result_relpath())
        rows = summarise(table)
        threshold = contention_threshold_pct()
        contended, why = contention(rows, threshold)
        if record["summary_window"].get("from") == "none":
            # Too short a window for the suite's own figures (no summaries), but the machine's background
            # load is the question of the replicate's whole process, which brackets the window: judged on
            # it, and said so (the canary's windows are 0.1-0.5 s at 1 Hz).
            contended, why = contention(summarise(whole), threshold)
            record["contention_from"] = "the whole process (the measured window is too short to sample)"
            if contended is None:
                why = f"not judged: {record['summary_window']['reason']}"
        record.update(summary=rows, contended=contended, contention_reason=why, contention_threshold_pct=threshold)
        from benchrun.telemetry.prometheus import configured_url, query_replicate

        try:
            url = configured_url()
        except ValueError as exc:
            url, record["prometheus"] = None, {"status": "unavailable", "reason": str(exc)}
        if url:
            record["prometheus"] = query_replicate(url, self.inv, self.run_dir, s.started or 0.0, s.stopped or 0.0,
                                                   node_name=s.node_name)
        return record


def measured_samples(table: Any, result_path: Path) -> tuple[Any, dict[str, Any]]:
    """The samples the summaries read: those describing the suite's measured window (its result's
    ``measured_window``, from ``ctx.measuring()``), each weighed by its part of it
    (:func:`benchrun.telemetry.summary.in_window`), else every sample of the process; and what was
    used. Before, every sample was: imports, CUDA start-up and allocation at 0 % GPU beside the timed
    calls at 95 % read as a starved GPU (the low_gpu_utilization playbook).

    A window that fewer than 2 samples of any one series describe (shorter than a sampling period)
    gets no samples, ``from: none`` and a ``reason``: no summaries and no contention verdict. Until
    2026-12-07 it silently got the whole process's, start-up and all, which the docs never said."""
    try:
        window = json.loads(result_path.read_text(encoding="utf-8")).get("measured_window")
        start, end = float(window["start_unix"]), float(window["end_unix"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return table, {"from": "the whole process (the suite recorded no measured window)"}
    inside, most = in_window(table, start, end)
    if most < 2:
        rate = table.schema.metadata.get(b"rate_hz") if table.schema.metadata else None
        at = f" at {rate.decode()} Hz" if rate else ""
        return table.slice(0, 0), {
            "from": "none", "start_unix": start, "end_unix": end,
            "reason": (f"the suite's measured window ({end - start:.3g} s) is described by fewer than 2 samples of "
                       f"any metric{at}: too short to summarise (a higher telemetrySampling.rateHz resolves it)")}
    return inside, {"from": "the suite's measured window", "start_unix": start, "end_unix": end}


def attach_to_result(result_path: Path, record: dict[str, Any]) -> bool:
    """Add the telemetry record and its summary metrics to a suite result document (written atomically).

    The summaries go in ``metrics`` with ``case: telemetry`` so statistics and comparisons use them;
    a failed or missing document is left alone (its replicate has no numbers to describe), and an
    ``unavailable`` one gets the record without a contention verdict (``contended: null``).
    """
    try:
        doc = json.loads(result_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    if not isinstance(doc, dict) or doc.get("status") not in STATUSES or doc.get("status") == "failed":
        return False
    doc["metrics"] = [m for m in doc.get("metrics", []) if m.get("source") != "telemetry"]
    if doc.get("status") == "ok":
        doc["metrics"].extend(record.get("summary", []))
    doc.setdefault("samples", {})["telemetry"] = record["samples"]
    if record.get("prometheus", {}).get("samples"):
        doc["samples"]["prometheus"] = record["prometheus"]["samples"]
    doc["telemetry"] = {k: v for k, v in record.items() if k != "summary"}
    if doc.get("status") != "ok":  # it measured nothing, so nothing of it was measured on a contended machine
        doc["telemetry"].update(contended=None, contention_reason=None)
    atomic_write_json(result_path, doc)
    return True


def attach_prometheus(result_path: Path, record: dict[str, Any]) -> bool:
    """Add a Prometheus record (and its sample file) to a result document's telemetry."""
    try:
        doc = json.loads(result_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    if not isinstance(doc, dict) or doc.get("status") not in STATUSES or doc.get("status") == "failed":
        return False
    doc.setdefault("telemetry", {})["prometheus"] = record
    if record.get("samples"):
        doc.setdefault("samples", {})["prometheus"] = record["samples"]
    atomic_write_json(result_path, doc)
    return True


def pod_prometheus(inv: Invocation, run_dir: Path, timeline: Mapping[str, Any]) -> dict[str, Any] | None:
    """For a launcher whose suite ran in a pod: Prometheus range queries over the container's window,
    selected by the pod's node and name, recorded in the result document (``telemetry.prometheus``).

    ``timeline`` is the pod timeline (``container_started_utc``, ``container_finished_utc``,
    ``node_name``, ``pod_name``, ``pod_uid``). None when no Prometheus is configured or the pod
    never ran; never raises (telemetry does not decide a replicate).
    """
    from benchrun.telemetry.prometheus import configured_url, query_replicate
    from benchrun.warehouse.sources import parse_ts

    try:
        url = configured_url()
        if not url:
            return None
        start, end = parse_ts(timeline.get("container_started_utc")), parse_ts(timeline.get("container_finished_utc"))
        node = timeline.get("node_name")
        if start is None or end is None or not node:
            record: dict[str, Any] = {"status": "unavailable",
                                      "reason": "the pod has no start/finish time or node; nothing to query"}
        else:
            record = query_replicate(url, inv, Path(run_dir), start.timestamp(), end.timestamp(), node_name=str(node),
                                     pod=timeline.get("pod_name"), pod_uid=timeline.get("pod_uid"),
                                     queue=timeline.get("cluster_queue"))
    except ValueError as exc:
        record = {"status": "unavailable", "reason": str(exc)}
    except Exception as exc:
        log.warning("%s r%d: Prometheus telemetry not recorded: %s", inv.suite, inv.replicate, exc)
        return None
    attach_prometheus(Path(run_dir) / inv.result_relpath(), record)
    return record


def start_telemetry(inv: Invocation, run_dir: Path) -> ReplicateTelemetry | None:
    """Start sampling for one replicate; None when sampling is off or cannot start (logged)."""
    rate = sample_rate_hz(inv.env)
    if rate is None or os.environ.get("BENCHRUN_TELEMETRY", "1") == "0":
        return None
    try:
        tele = ReplicateTelemetry(inv, Path(run_dir), rate)
        tele.sampler.start()
        return tele
    except Exception as exc:  # telemetry must never keep a suite from running
        log.warning("%s r%d: telemetry sampler not started: %s", inv.suite, inv.replicate, exc)
        return None


def finish_telemetry(tele: ReplicateTelemetry | None, inv: Invocation, run_dir: Path) -> None:
    """Stop sampling and add the record to the result document (if the suite wrote one)."""
    if tele is None:
        return
    try:
        record = tele.finish()
        attach_to_result(Path(run_dir) / inv.result_relpath(), record)
    except Exception as exc:
        log.warning("%s r%d: telemetry not recorded: %s", inv.suite, inv.replicate, exc)


@contextlib.contextmanager
def replicate_telemetry(inv: Invocation, run_dir: Path) -> Iterator[ReplicateTelemetry | None]:
    """Sample around the body (the suite's run); yields None when sampling is off or cannot start.

    On exit the result document (if the suite wrote one) gains the summaries and the record.
    """
    tele = start_telemetry(inv, run_dir)
    try:
        yield tele
    finally:
        finish_telemetry(tele, inv, run_dir)
