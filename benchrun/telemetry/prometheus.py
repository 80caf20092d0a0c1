"""Prometheus range queries over one replicate's window: DCGM exporter GPU series, node exporter
series and Kueue queue series, selected by the node (and pod) the replicate ran on.

Configured by ``BENCHRUN_PROMETHEUS_URL``. A Prometheus that is missing, slow or refuses a query
is recorded (``status`` and ``reason`` in the replicate's telemetry record, then a condition on
the run), never a failed replicate.
"""

from __future__ import annotations

import logging
import math
import os
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import requests

from benchrun.plan import Invocation
from benchrun.urlsafe import redact  # noqa: F401  (prometheus.redact, as before)
from benchrun.telemetry.samples import Sample, write_samples

log = logging.getLogger(__name__)

URL_ENV = "BENCHRUN_PROMETHEUS_URL"
TIMEOUT_ENV = "BENCHRUN_PROMETHEUS_TIMEOUT_S"
RATE_WINDOW_ENV = "BENCHRUN_PROMETHEUS_RATE_WINDOW"  # the [range] of rate(); default 1m
MAX_POINTS = 1000  # step is widened so one series stays under this many points


@dataclass(frozen=True)
class Query:
    """One PromQL expression template; ``$node``/``$pod``/``$rate`` are filled per replicate."""

    name: str
    source: str  # dcgm | node | kueue
    scope: str
    unit: str
    expr: str
    needs_pod: bool = False


def _dcgm(name: str, series: tuple[str, ...], unit: str) -> list[Query]:
    # DCGM exporter labels the node as Hostname (or node, after the usual relabelling) and the
    # pod whose container holds the GPU as pod.
    by_node = " or ".join(f'{s}{{Hostname="$node"}} or {s}{{node="$node"}}' for s in series)
    by_pod = " or ".join(f'{s}{{pod="$pod"}}' for s in series)
    return [Query(name, "dcgm", "gpu", unit, by_node), Query(f"{name}_pod", "dcgm", "gpu", unit, by_pod, needs_pod=True)]


# node exporter series are tied to the node through node_uname_info's nodename (their own
# instance label is the scrape address, which need not be the node's name).
_UNAME = ' * on(instance) group_left(nodename) node_uname_info{nodename="$node"}'
QUERIES: tuple[Query, ...] = (
    *_dcgm("dcgm_gpu_utilization_pct", ("DCGM_FI_DEV_GPU_UTIL",), "%"),
    *_dcgm("dcgm_sm_active_ratio", ("DCGM_FI_PROF_SM_ACTIVE",), "ratio"),
    *_dcgm("dcgm_tensor_active_ratio", ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",), "ratio"),
    *_dcgm("dcgm_power_w", ("DCGM_FI_DEV_POWER_USAGE",), "W"),
    # renamed in DCGM 3.3: both names are asked for
    *_dcgm("dcgm_clock_event_reasons", ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"), "bitmask"),
    *_dcgm("dcgm_nvlink_bandwidth_total", ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",), "counter"),
    *_dcgm("dcgm_nvlink_tx_bytes", ("DCGM_FI_PROF_NVLINK_TX_BYTES",), "B/s"),
    *_dcgm("dcgm_nvlink_rx_bytes", ("DCGM_FI_PROF_NVLINK_RX_BYTES",), "B/s"),
    Query("node_cpu_busy_ratio", "node", "node", "ratio",
          '(1 - avg by (instance) (rate(node_cpu_seconds_total{mode="idle"}[$rate])))' + _UNAME),
    Query("node_load1", "node", "node", "load", "node_load1" + _UNAME),
    Query("node_memory_available_bytes", "node", "node", "bytes", "node_memory_MemAvailable_bytes" + _UNAME),
    Query("node_context_switches_per_s", "node", "node", "1/s", "rate(node_context_switches_total[$rate])" + _UNAME),
    Query("node_procs_running", "node", "node", "tasks", "node_procs_running" + _UNAME),
    Query("node_disk_read_bytes_per_s", "node", "node", "B/s",
          "sum by (instance) (rate(node_disk_read_bytes_total[$rate]))" + _UNAME),
    Query("node_disk_written_bytes_per_s", "node", "node", "B/s",
          "sum by (instance) (rate(node_disk_written_bytes_total[$rate]))" + _UNAME),
    Query("node_network_receive_bytes_per_s", "node", "node", "B/s",
          'sum by (instance) (rate(node_network_receive_bytes_total{device!="lo"}[$rate]))' + _UNAME),
    Query("node_network_transmit_bytes_per_s", "node", "node", "B/s",
          'sum by (instance) (rate(node_network_transmit_bytes_total{device!="lo"}[$rate]))' + _UNAME),
    # Kueue series are per ClusterQueue: the replicate's queue when known (a pod admitted by Kueue), else all.
    Query("kueue_pending_workloads", "kueue", "cluster", "count",
          'sum by (cluster_queue) (kueue_pending_workloads{cluster_queue=~"$queue"})'),
    Query("kueue_admitted_active_workloads", "kueue", "cluster", "count",
          'sum by (cluster_queue) (kueue_admitted_active_workloads{cluster_queue=~"$queue"})'),
)

_LABEL_VALUE = re.compile(r"^[A-Za-z0-9._:-]{1,253}$")
_DURATION = re.compile(r"^[0-9]+(ms|s|m|h)$")


def configured_url(environ: dict[str, str] | None = None) -> str | None:
    """The Prometheus base URL (``BENCHRUN_PROMETHEUS_URL``) or None; ValueError when malformed."""
    url = (environ if environ is not None else os.environ).get(URL_ENV, "").strip()
    if not url:
        return None
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"{URL_ENV}={url!r} is not an http(s) URL; set it like http://prometheus:9090")
    return url.rstrip("/")


def step_for(start: float, end: float) -> float:
    """A step (seconds) giving at most MAX_POINTS points, at least 1 s."""
    return max(1.0, math.ceil((end - start) / MAX_POINTS))


def render(q: Query, node: str, pod: str | None, rate_window: str, queue: str | None = None) -> str | None:
    """The PromQL of ``q`` for this node/pod, or None when it needs a pod that is not known.

    Names go into label matchers only after checking they are plain label values (no quotes).
    """
    if q.needs_pod and not pod:
        return None
    for value in (node, pod or "x", queue or "x"):
        if not _LABEL_VALUE.match(value):
            raise ValueError(f"{value!r} is not a plain node or pod name; it cannot go into a PromQL matcher")
    if not _DURATION.match(rate_window):
        raise ValueError(f"{RATE_WINDOW_ENV}={rate_window!r} is not a Prometheus duration like 30s or 1m")
    # a checked name is a valid regex matching only itself (dots aside, which match themselves too)
    return string.Template(q.expr).substitute(node=node, pod=pod or "", rate=rate_window, queue=queue or ".+")


def _as_samples(q: Query, result: list[dict[str, Any]], step: float, pod_uid: str | None) -> list[Sample]:
    out = []
    for series in result:
        labels = series.get("metric") or {}
        gpu = labels.get("gpu")
        node = labels.get("nodename") or labels.get("Hostname") or labels.get("node")
        for ts, value in series.get("values") or []:
            try:
                v = float(value)
            except (TypeError, ValueError):
                continue
            if not math.isfinite(v):
                continue
            out.append(Sample(float(ts), f"prometheus:{q.source}", q.scope, q.name, v, q.unit,
                              device_index=int(gpu) if str(gpu or "").isdigit() else None,
                              gpu_uuid=labels.get("UUID") or labels.get("uuid"), interval_s=step,
                              node_name=node, pod_uid=pod_uid))
    return out


def range_queries(url: str, start: float, end: float, node: str, *, pod: str | None = None,
                  pod_uid: str | None = None, queue: str | None = None, timeout_s: float | None = None,
                  rate_window: str | None = None) -> tuple[list[Sample], dict[str, Any]]:
    """Run every query over [start, end]; (samples, record with status, per-query counts and errors)."""
    timeout = timeout_s if timeout_s is not None else float(os.environ.get(TIMEOUT_ENV, "10"))
    rate = rate_window or os.environ.get(RATE_WINDOW_ENV, "1m")
    step = step_for(start, end)
    samples: list[Sample] = []
    counts: dict[str, int] = {}
    errors: list[str] = []
    with requests.Session() as http:
        for q in QUERIES:
            expr = render(q, node, pod, rate, queue)
            if expr is None:
                continue
            try:
                resp = http.get(f"{url}/api/v1/query_range", timeout=timeout,
                                params={"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})
                body = resp.json()
            except requests.Timeout:
                errors.append(f"{q.name}: timed out after {timeout:g}s")
                break  # a slow server stays slow: do not wait once per query
            except requests.ConnectionError as exc:
                errors.append(f"{q.name}: cannot connect to {redact(url)} ({type(exc).__name__})")
                break
            except ValueError:
                errors.append(f"{q.name}: HTTP {resp.status_code}, not a Prometheus API answer")
                continue
            if body.get("status") != "success":
                errors.append(f"{q.name}: {body.get('errorType', 'error')}: {body.get('error', '')}"[:300])
                continue
            got = _as_samples(q, body.get("data", {}).get("result") or [], step, pod_uid)
            counts[q.name] = len(got)
            samples.extend(got)
    status = "ok" if not errors else ("partial" if counts else "unavailable")
    return samples, {"status": status, "reason": "; ".join(errors) or None, "step_s": step,
                     "series_points": {k: v for k, v in counts.items() if v}, "queries": len(counts)}


def query_replicate(url: str, inv: Invocation, run_dir: Path, start: float, end: float, *, node_name: str,
                    pod: str | None = None, pod_uid: str | None = None, queue: str | None = None) -> dict[str, Any]:
    """Query one replicate's window and store the points as ``raw/<run>_<suite>_r<k>_prometheus.parquet``."""
    try:
        samples, record = range_queries(url, start, end, node_name, pod=pod, pod_uid=pod_uid, queue=queue)
    except ValueError as exc:
        return {"status": "unavailable", "reason": str(exc), "url": redact(url)}
    record["url"] = redact(url)
    if samples:
        rel = f"raw/{inv.run_id}_{inv.suite}_r{inv.replicate}_prometheus.parquet"
        write_samples(Path(run_dir) / rel, samples, metadata={"prometheus_url": redact(url), "window_start": f"{start:.6f}",
                                                               "window_end": f"{end:.6f}"})
        record["samples"] = rel
    if record["status"] != "ok":
        log.warning("%s r%d: Prometheus %s: %s", inv.suite, inv.replicate, record["status"], record["reason"])
    return record
