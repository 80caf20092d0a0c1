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
from benchrun.urlsafe import redact, split
from benchrun.telemetry.samples import Sample, write_samples

log = logging.getLogger(__name__)

URL_ENV = "BENCHRUN_PROMETHEUS_URL"
TIMEOUT_ENV = "BENCHRUN_PROMETHEUS_TIMEOUT_S"
RATE_WINDOW_ENV = "BENCHRUN_PROMETHEUS_RATE_WINDOW"  # the [range] of rate(); default: see rate_range_s
SCRAPE_INTERVAL_ENV = "BENCHRUN_PROMETHEUS_SCRAPE_INTERVAL"  # default: asked of Prometheus (/api/v1/targets)
DEFAULT_SCRAPE_S = 60.0  # Prometheus' own default scrape_interval, where it does not say
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
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d|w|y)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}


def configured_url(environ: dict[str, str] | None = None) -> str | None:
    """The Prometheus base URL (``BENCHRUN_PROMETHEUS_URL``) or None; ValueError when malformed."""
    url = (environ if environ is not None else os.environ).get(URL_ENV, "").strip()
    if not url:
        return None
    if split(url) is None:  # requests would read a host out of the password
        raise ValueError(f"{URL_ENV} has an '@' after a '/', '?' or '#', so its user:password@ cannot be told from "
                         "its host; percent-encode the password (# as %23, / as %2F, ? as %3F, @ as %40)")
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"{URL_ENV}={redact(url)!r} is not an http(s) URL (any user:password@ left out here); "
                         "set it like http://prometheus:9090")
    return url.rstrip("/")


def step_for(start: float, end: float) -> float:
    """A step (seconds) giving at most MAX_POINTS points, at least 1 s."""
    return max(1.0, math.ceil((end - start) / MAX_POINTS))


def duration_s(text: str) -> float | None:
    """Seconds of a Prometheus duration (``30s``, ``1m30s``, ``500ms``); None if it is not one."""
    text = str(text).strip()
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNIT_S[u] for n, u in parts)


def rate_range_s(step: float, scrape_s: float) -> float:
    """The ``[range]`` of ``rate()``: no wider than needed. Two scrapes at least (a rate needs two
    samples in its range), and the step plus one scrape (consecutive points' ranges meet, so no
    increase falls between them): ``max(step + scrape, 2 × scrape)``."""
    return max(step + scrape_s, 2.0 * scrape_s)


def _promql_duration(seconds: float) -> str:
    ms = max(1, int(math.ceil(seconds * 1000)))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def scrape_interval_s(http: requests.Session, url: str, timeout: float) -> tuple[float, str]:
    """(seconds, where it came from): ``BENCHRUN_PROMETHEUS_SCRAPE_INTERVAL``, else the largest
    ``scrapeInterval`` of Prometheus' active targets (which target is the node's exporter is not
    known, and every rated series needs two scrapes), else 1m (Prometheus' default). Timeouts and
    refused connections propagate: the queries would meet them too."""
    raw = os.environ.get(SCRAPE_INTERVAL_ENV, "").strip()
    if raw:
        secs = duration_s(raw)
        if not secs:
            raise ValueError(f"{SCRAPE_INTERVAL_ENV}={raw!r} is not a Prometheus duration like 15s or 1m")
        return secs, SCRAPE_INTERVAL_ENV
    try:
        body = http.get(f"{url}/api/v1/targets", params={"state": "active"}, timeout=timeout).json()
        found = [duration_s(t.get("scrapeInterval", "")) for t in body["data"]["activeTargets"]]
    except (ValueError, KeyError, TypeError, AttributeError):  # an older Prometheus, or not its API
        found = []
    found = [f for f in found if f]
    if found:
        return max(found), "targets"
    return DEFAULT_SCRAPE_S, "default"


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


def _as_samples(q: Query, result: list[dict[str, Any]], interval_s: float, pod_uid: str | None) -> list[Sample]:
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
                              gpu_uuid=labels.get("UUID") or labels.get("uuid"), interval_s=interval_s,
                              node_name=node, pod_uid=pod_uid))
    return out


def range_queries(url: str, start: float, end: float, node: str, *, pod: str | None = None,
                  pod_uid: str | None = None, queue: str | None = None, timeout_s: float | None = None,
                  rate_window: str | None = None) -> tuple[list[Sample], dict[str, Any]]:
    """Run every query over [start, end]; (samples, record with status, per-query counts and errors).

    Each sample's ``interval_s`` is the time its value describes, ending at its timestamp: the
    rate range for a ``rate()`` query, the step for a gauge. Rate queries are evaluated from
    ``start + range`` on, so each range lies inside the replicate; a replicate shorter than the
    range gets one rate point at its end, whose range (recorded) reaches back before it.
    """
    timeout = timeout_s if timeout_s is not None else float(os.environ.get(TIMEOUT_ENV, "10"))
    step = step_for(start, end)
    samples: list[Sample] = []
    counts: dict[str, int] = {}
    errors: list[str] = []
    record: dict[str, Any] = {"step_s": step}
    with requests.Session() as http:
        rate = rate_window or os.environ.get(RATE_WINDOW_ENV, "").strip() or None
        try:
            if rate is None:
                scrape, origin = scrape_interval_s(http, url, timeout)
                record.update(scrape_interval_s=scrape, scrape_interval_from=origin)
                rate_s = rate_range_s(step, scrape)
                rate = _promql_duration(rate_s)
            else:
                rate_s = duration_s(rate) or 0.0
        except requests.Timeout:
            errors.append(f"targets: timed out after {timeout:g}s")
        except requests.ConnectionError as exc:
            errors.append(f"targets: cannot connect to {redact(url)} ({type(exc).__name__})")
        except requests.RequestException as exc:
            errors.append(f"targets: cannot ask {redact(url)} ({type(exc).__name__}; check {URL_ENV})")
        for q in QUERIES if not errors else ():
            expr = render(q, node, pod, rate, queue)
            if expr is None:
                continue
            rated = "$rate" in q.expr
            q_start = min(start + rate_s, end) if rated else start
            try:
                resp = http.get(f"{url}/api/v1/query_range", timeout=timeout,
                                params={"query": expr, "start": f"{q_start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})
            except requests.Timeout:
                errors.append(f"{q.name}: timed out after {timeout:g}s")
                break  # a slow server stays slow: do not wait once per query
            except requests.ConnectionError as exc:
                errors.append(f"{q.name}: cannot connect to {redact(url)} ({type(exc).__name__})")
                break
            except requests.RequestException as exc:  # InvalidURL and the like: no query can go (its text may hold the URL)
                errors.append(f"{q.name}: cannot ask {redact(url)} ({type(exc).__name__}; check {URL_ENV})")
                break
            try:
                body = resp.json()
            except ValueError:
                errors.append(f"{q.name}: HTTP {resp.status_code}, not a Prometheus API answer")
                continue
            if body.get("status") != "success":
                errors.append(f"{q.name}: {body.get('errorType', 'error')}: {body.get('error', '')}"[:300])
                continue
            got = _as_samples(q, body.get("data", {}).get("result") or [], rate_s if rated else step, pod_uid)
            counts[q.name] = len(got)
            samples.extend(got)
    if not errors:
        record["rate_range_s"] = rate_s
        if rate_s > end - start:
            record["rate_note"] = (f"the window ({end - start:.1f} s) is shorter than the rate range ({rate_s:g} s): "
                                   "each rate is one point at its end, over the range before it")
    status = "ok" if not errors else ("partial" if counts else "unavailable")
    record.update(status=status, reason="; ".join(errors) or None,
                  series_points={k: v for k, v in counts.items() if v}, queries=len(counts))
    return samples, record


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
