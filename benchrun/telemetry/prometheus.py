"""Prometheus over one replicate's window: DCGM exporter GPU series, node exporter series and
Kueue queue series, selected by the node (and pod) the replicate ran on. Rates are range queries;
gauges are the scrapes' own samples (a range selector, ``METRIC{...}[window]``, asked for at the
window's end plus a settle time, so the scrape after the window is in Prometheus when it is asked).

Configured by ``BENCHRUN_PROMETHEUS_URL``. A Prometheus that is missing, slow or refuses a query
is recorded (``status`` and ``reason`` in the replicate's telemetry record, then a condition on
the run), never a failed replicate.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import string
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
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
SETTLE_ENV = "BENCHRUN_PROMETHEUS_SETTLE"  # wait after the window's end before asking for gauges; see settle_for
DEFAULT_SCRAPE_S = 60.0  # Prometheus' own default scrape_interval, where it does not say
DEFAULT_SETTLE_S = 15.0  # the most the settle waits by default (the scrape interval + 1 s where shorter)
MAX_SETTLE_S = 120.0  # BENCHRUN_PROMETHEUS_SETTLE is held to this
MAX_POINTS = 1000  # step is widened so one rate series stays under this many points


@dataclass(frozen=True)
class Query:
    """One PromQL template; ``$node``/``$pod``/``$rate``/``$queue`` are filled per replicate.

    A rate (``$rate`` in ``expr``) is a range query. Anything else is a gauge: ``expr`` is series
    selectors joined by `` or ``, each asked for as a range selector (``selector[window]``, one
    instant query each, since PromQL's ``or`` takes no range vectors) and the series merged.
    ``by_uname``: each selector is narrowed to the ``instance`` that ``node_uname_info`` names for
    the node; ``sum_by``: the series are summed per that label at each scrape.
    """

    name: str
    source: str  # dcgm | node | kueue
    scope: str
    unit: str
    expr: str
    needs_pod: bool = False
    by_uname: bool = False
    sum_by: str | None = None

    @property
    def rated(self) -> bool:
        return "$rate" in self.expr


def _dcgm(name: str, series: tuple[str, ...], unit: str) -> list[Query]:
    # DCGM exporter labels the node as Hostname (or node, after the usual relabelling). The pod
    # whose container holds the GPU is its pod label, which Prometheus renames exported_pod when
    # the scrape has a pod label of its own (a ServiceMonitor without honorLabels: pod is then
    # the exporter's pod), so both are asked for.
    by_node = " or ".join(f'{s}{{Hostname="$node"}} or {s}{{node="$node"}}' for s in series)
    by_pod = " or ".join(f'{s}{{pod="$pod"}} or {s}{{exported_pod="$pod"}}' for s in series)
    return [Query(name, "dcgm", "gpu", unit, by_node), Query(f"{name}_pod", "dcgm", "gpu", unit, by_pod, needs_pod=True)]


# node exporter series are tied to the node through node_uname_info's nodename (their own
# instance label is the scrape address, which need not be the node's name): a rate by joining
# it, a gauge by asking for the instance(s) it names first (a range selector cannot be joined).
_UNAME = ' * on(instance) group_left(nodename) node_uname_info{nodename="$node"}'
_UNAME_SELECTOR = 'node_uname_info{nodename="$node"}'
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
    Query("node_load1", "node", "node", "load", "node_load1", by_uname=True),
    Query("node_memory_available_bytes", "node", "node", "bytes", "node_memory_MemAvailable_bytes", by_uname=True),
    Query("node_context_switches_per_s", "node", "node", "1/s", "rate(node_context_switches_total[$rate])" + _UNAME),
    Query("node_procs_running", "node", "node", "tasks", "node_procs_running", by_uname=True),
    Query("node_disk_read_bytes_per_s", "node", "node", "B/s",
          "sum by (instance) (rate(node_disk_read_bytes_total[$rate]))" + _UNAME),
    Query("node_disk_written_bytes_per_s", "node", "node", "B/s",
          "sum by (instance) (rate(node_disk_written_bytes_total[$rate]))" + _UNAME),
    Query("node_network_receive_bytes_per_s", "node", "node", "B/s",
          'sum by (instance) (rate(node_network_receive_bytes_total{device!="lo"}[$rate]))' + _UNAME),
    Query("node_network_transmit_bytes_per_s", "node", "node", "B/s",
          'sum by (instance) (rate(node_network_transmit_bytes_total{device!="lo"}[$rate]))' + _UNAME),
    # Kueue series are per ClusterQueue: the replicate's queue when known (a pod admitted by Kueue), else all.
    # (summed per cluster_queue at each scrape, as sum by (cluster_queue) would)
    Query("kueue_pending_workloads", "kueue", "cluster", "count",
          'kueue_pending_workloads{cluster_queue=~"$queue"}', sum_by="cluster_queue"),
    Query("kueue_admitted_active_workloads", "kueue", "cluster", "count",
          'kueue_admitted_active_workloads{cluster_queue=~"$queue"}', sum_by="cluster_queue"),
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


def settle_for(scrape_s: float | None, origin: str | None) -> tuple[float, str]:
    """(seconds, where from) to wait after the window's end before asking for gauges, so that the
    scrape after the window, which describes its last part, is in Prometheus:
    ``BENCHRUN_PROMETHEUS_SETTLE`` (a duration; ``0`` waits not at all; held to MAX_SETTLE_S), else
    the scrape interval plus 1 s (the scrape's own time to arrive) up to DEFAULT_SETTLE_S, else (the
    interval unknown: Prometheus did not say) DEFAULT_SETTLE_S."""
    raw = os.environ.get(SETTLE_ENV, "").strip()
    if raw:
        secs = 0.0 if raw == "0" else duration_s(raw)
        if secs is None:
            raise ValueError(f"{SETTLE_ENV}={raw!r} is not a Prometheus duration like 15s (or 0: no wait)")
        return min(secs, MAX_SETTLE_S), SETTLE_ENV
    if scrape_s is None or origin == "default":
        return DEFAULT_SETTLE_S, "default"
    return min(scrape_s + 1.0, DEFAULT_SETTLE_S), "scrape interval"


class _Failed(Exception):
    """A request that got no usable answer; ``stop``: no later request would get one either."""

    def __init__(self, message: str, stop: bool) -> None:
        super().__init__(message)
        self.stop = stop


def _ask(http: requests.Session, url: str, path: str, params: dict[str, str], timeout: float,
         what: str) -> list[dict[str, Any]]:
    """The ``result`` of one API request, or _Failed saying why (never naming the URL's password)."""
    try:
        resp = http.get(f"{url}{path}", params=params, timeout=timeout)
    except requests.Timeout:
        raise _Failed(f"{what}: timed out after {timeout:g}s", True)  # a slow server stays slow
    except requests.ConnectionError as exc:
        raise _Failed(f"{what}: cannot connect to {redact(url)} ({type(exc).__name__})", True)
    except requests.RequestException as exc:  # InvalidURL and the like: no query can go (its text may hold the URL)
        raise _Failed(f"{what}: cannot ask {redact(url)} ({type(exc).__name__}; check {URL_ENV})", True)
    try:
        body = resp.json()
    except ValueError:
        raise _Failed(f"{what}: HTTP {resp.status_code}, not a Prometheus API answer", False)
    if not isinstance(body, dict) or body.get("status") != "success":
        body = body if isinstance(body, dict) else {}
        raise _Failed(f"{what}: {body.get('errorType', 'error')}: {body.get('error', '')}"[:300], False)
    return (body.get("data") or {}).get("result") or []


def _sample(q: Query, labels: dict[str, str], ts: float, value: Any, interval_s: float, pod_uid: str | None,
            node: str | None = None) -> Sample | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(v):
        return None
    gpu = labels.get("gpu")
    return Sample(ts, f"prometheus:{q.source}", q.scope, q.name, v, q.unit,
                  device_index=int(gpu) if str(gpu or "").isdigit() else None,
                  gpu_uuid=labels.get("UUID") or labels.get("uuid"), interval_s=interval_s,
                  node_name=labels.get("nodename") or labels.get("Hostname") or labels.get("node") or node,
                  pod_uid=pod_uid)


def _as_samples(q: Query, result: list[dict[str, Any]], interval_s: float, pod_uid: str | None) -> list[Sample]:
    out = []
    for series in result:
        labels = series.get("metric") or {}
        for ts, value in series.get("values") or []:
            got = _sample(q, labels, float(ts), value, interval_s, pod_uid)
            if got is not None:
                out.append(got)
    return out


def window_points(values: list[list[Any]], start: float, end: float) -> list[tuple[float, Any, float]]:
    """(ts, value, interval_s) of one series' scrapes that describe part of the window ``(start, end]``:
    those inside it, and the first after it (it describes the window's last part). A gauge's value
    describes the time since its series' previous scrape (as benchrun.telemetry.summary weighs
    NVML's), the first one inside the window the time since the window's start; scrapes before the
    window describe none of it and are left out."""
    out: list[tuple[float, Any, float]] = []
    prev = start
    for ts, value in sorted(((float(t), v) for t, v in values), key=lambda p: p[0]):
        if ts <= start:
            continue
        out.append((ts, value, ts - prev))
        if ts > end:
            break
        prev = ts
    return out


def _with_matcher(selector: str, label: str, value: str) -> str:
    matcher = f"{label}={json.dumps(value)}"  # a JSON string is a valid PromQL string (Go's escapes)
    return f"{selector[:-1]},{matcher}}}" if selector.endswith("}") else f"{selector}{{{matcher}}}"


def _instances(http: requests.Session, url: str, node: str, at: float, timeout: float) -> list[str]:
    """The node exporter ``instance``(s) that ``node_uname_info`` names for the node."""
    expr = string.Template(_UNAME_SELECTOR).substitute(node=node)
    result = _ask(http, url, "/api/v1/query", {"query": expr, "time": f"{at:.3f}"}, timeout, "node_uname_info")
    return sorted({str(s["metric"]["instance"]) for s in result if (s.get("metric") or {}).get("instance")})


def _summed(result: list[dict[str, Any]], label: str) -> list[dict[str, Any]]:
    """The series summed per ``label`` at each timestamp (one scrape's series share its timestamp)."""
    sums: dict[str, dict[float, float]] = {}
    for series in result:
        acc = sums.setdefault(str((series.get("metric") or {}).get(label, "")), {})
        for ts, value in series.get("values") or []:
            try:
                acc[float(ts)] = acc.get(float(ts), 0.0) + float(value)
            except (TypeError, ValueError):
                continue
    return [{"metric": {label: key}, "values": sorted(acc.items())} for key, acc in sums.items()]


def _gauge_series(http: requests.Session, url: str, q: Query, expr: str, start: float, at: float, timeout: float,
                  instances: list[str]) -> list[dict[str, Any]]:
    """The raw scrapes of a gauge's series in ``(start, at]``: each selector as a range selector,
    the series merged (one that two selectors match is kept once)."""
    selectors = expr.split(" or ")
    if q.by_uname:
        selectors = [_with_matcher(sel, "instance", i) for sel in selectors for i in instances]
    window = _promql_duration(at - start)
    seen: set[frozenset[tuple[str, str]]] = set()
    result = []
    for sel in selectors:
        for series in _ask(http, url, "/api/v1/query", {"query": f"{sel}[{window}]", "time": f"{at:.3f}"},
                           timeout, q.name):
            key = frozenset((series.get("metric") or {}).items())
            if key not in seen:
                seen.add(key)
                result.append(series)
    return _summed(result, q.sum_by) if q.sum_by else result


def range_queries(url: str, start: float, end: float, node: str, *, pod: str | None = None,
                  pod_uid: str | None = None, queue: str | None = None, timeout_s: float | None = None,
                  rate_window: str | None = None, sleep: Callable[[float], None] = time.sleep,
                  clock: Callable[[], float] = time.time) -> tuple[list[Sample], dict[str, Any]]:
    """Run every query over [start, end]; (samples, record with status, per-query counts and errors).

    Each sample's ``interval_s`` is the time its value describes, ending at its timestamp. Rates are
    range queries evaluated from ``start + range`` on, so each range lies inside the replicate; a
    replicate shorter than the range gets one rate point at its end, whose range (recorded) reaches
    back before it; ``interval_s`` is the range. Gauges are the scrapes themselves, asked for once
    ``end + settle`` has passed (:func:`settle_for`; ``settle_s`` and ``waited_s`` are recorded):
    those inside the window and the first after it, each over the time since its series' previous
    scrape (:func:`window_points`). Until 2026-12-07 gauges were a range query with a 1 s step from
    the start, asked for the moment the replicate ended: every step repeated the latest scrape up to
    5 minutes old, so until the first scrape inside the window the points held a value scraped
    before the replicate (a replicate shorter than the scrape interval got nothing else), each
    recorded as 1 s of it, and the window's last part was never seen.
    """
    timeout = timeout_s if timeout_s is not None else float(os.environ.get(TIMEOUT_ENV, "10"))
    step = step_for(start, end)
    samples: list[Sample] = []
    counts: dict[str, int] = {}
    errors: list[str] = []
    record: dict[str, Any] = {"step_s": step}
    rate_s = 0.0
    with requests.Session() as http:
        rate = rate_window or os.environ.get(RATE_WINDOW_ENV, "").strip() or None
        scrape: float | None = None
        origin: str | None = None
        try:
            if rate is None or not os.environ.get(SETTLE_ENV, "").strip():
                scrape, origin = scrape_interval_s(http, url, timeout)
                record.update(scrape_interval_s=scrape, scrape_interval_from=origin)
            if rate is None:
                rate_s = rate_range_s(step, scrape or DEFAULT_SCRAPE_S)
                rate = _promql_duration(rate_s)
            else:
                rate_s = duration_s(rate) or 0.0
        except requests.Timeout:
            errors.append(f"targets: timed out after {timeout:g}s")
        except requests.ConnectionError as exc:
            errors.append(f"targets: cannot connect to {redact(url)} ({type(exc).__name__})")
        except requests.RequestException as exc:
            errors.append(f"targets: cannot ask {redact(url)} ({type(exc).__name__}; check {URL_ENV})")
        settle, settle_from = settle_for(scrape, origin)
        stopped = bool(errors)
        for q in [q for q in QUERIES if q.rated] if not stopped else ():
            expr = render(q, node, pod, rate or "", queue)
            if expr is None:
                continue
            q_start = min(start + rate_s, end)
            try:
                params = {"query": expr, "start": f"{q_start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
                result = _ask(http, url, "/api/v1/query_range", params, timeout, q.name)
            except _Failed as exc:
                errors.append(str(exc))
                stopped = exc.stop
                if stopped:
                    break
                continue
            got = _as_samples(q, result, rate_s, pod_uid)
            counts[q.name] = len(got)
            samples.extend(got)
        if not stopped:
            at = end + settle
            waited = min(max(0.0, at - clock()), settle)
            if waited > 0:
                sleep(waited)
            record.update(settle_s=settle, settle_from=settle_from, waited_s=round(waited, 3))
            if scrape is not None and settle < scrape:
                record["settle_note"] = (f"waited {settle:g} s after the window's end, less than the scrape interval "
                                         f"({scrape:g} s): the scrape after the window may not have been in "
                                         "Prometheus yet, so a gauge's last part of the window may have no sample")
        instances: list[str] | None = None
        for q in [q for q in QUERIES if not q.rated] if not stopped else ():
            expr = render(q, node, pod, rate or "", queue)
            if expr is None:
                continue
            try:
                if q.by_uname and instances is None:
                    instances = []  # asked once: a failure is one error, not one per query
                    instances = _instances(http, url, node, end, timeout)
                result = _gauge_series(http, url, q, expr, start, end + settle, timeout, instances or [])
            except _Failed as exc:
                errors.append(str(exc))
                if exc.stop:
                    break
                continue
            got = []
            for series in result:
                labels = series.get("metric") or {}
                for ts, value, dt in window_points(series.get("values") or [], start, end):
                    one = _sample(q, labels, ts, value, dt, pod_uid, node if q.by_uname else None)
                    if one is not None:
                        got.append(one)
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


def collect_replicate(url: str, start: float, end: float, *, node_name: str, pod: str | None = None,
                      pod_uid: str | None = None, queue: str | None = None,
                      sleep: Callable[[float], None] = time.sleep) -> tuple[list[Sample], dict[str, Any]]:
    """(samples, record) of one replicate's window, settle wait included (``sleep``: how it waits,
    which a background collection makes interruptible); nothing written."""
    try:
        samples, record = range_queries(url, start, end, node_name, pod=pod, pod_uid=pod_uid, queue=queue, sleep=sleep)
    except ValueError as exc:
        return [], {"status": "unavailable", "reason": str(exc), "url": redact(url)}
    record["url"] = redact(url)
    return samples, record


def store_replicate(samples: list[Sample], record: dict[str, Any], inv: Invocation, run_dir: Path, start: float,
                    end: float) -> dict[str, Any]:
    """Store what :func:`collect_replicate` got as ``raw/<run>_<suite>_r<k>_prometheus.parquet``; the record."""
    if samples:
        rel = f"raw/{inv.run_id}_{inv.suite}_r{inv.replicate}_prometheus.parquet"
        write_samples(Path(run_dir) / rel, samples, metadata={"prometheus_url": str(record.get("url")),
                                                               "window_start": f"{start:.6f}", "window_end": f"{end:.6f}"})
        record["samples"] = rel
    if record["status"] != "ok":
        log.warning("%s r%d: Prometheus %s: %s", inv.suite, inv.replicate, record["status"], record["reason"])
    return record


def query_replicate(url: str, inv: Invocation, run_dir: Path, start: float, end: float, *, node_name: str,
                    pod: str | None = None, pod_uid: str | None = None, queue: str | None = None) -> dict[str, Any]:
    """Query one replicate's window and store the points as ``raw/<run>_<suite>_r<k>_prometheus.parquet``."""
    samples, record = collect_replicate(url, start, end, node_name=node_name, pod=pod, pod_uid=pod_uid, queue=queue)
    return store_replicate(samples, record, inv, run_dir, start, end)
