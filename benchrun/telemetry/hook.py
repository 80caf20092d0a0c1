"""What a launcher calls around one replicate: start the sampler just before the suite, stop it just
after, query Prometheus for the replicate's window when one is configured (beside the next
replicate where more of the layer follows: see ``replicate_prometheus``), and add the summaries
to the replicate's result document. Launcher-agnostic: it needs the invocation and the run
directory the replicate writes into (a pod runs it around its own suite, or a launcher skips it).
Telemetry never fails a replicate: its own errors are logged and recorded in the result.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import uuid
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

    def finish(self, interrupted: BaseException | None = None, *, more: bool = False) -> dict[str, Any]:
        """Stop sampling, write the samples, query Prometheus, and return the telemetry record.

        ``interrupted``: the exception the launch is ending with; Prometheus is then neither waited
        for nor asked (the record says it was not collected, and why). ``more``: other replicates
        of the layer follow in this process, so the Prometheus collection runs in the background
        (:func:`replicate_prometheus`)."""
        self.sampler.stop()
        s = self.sampler
        record: dict[str, Any] = {
            "samples": self.relpath, "rate_hz": s.rate_hz, "window_start": s.started, "window_end": s.stopped,
            "ticks": s.n_ticks, "sampler_cpu_s": round(s.cpu_s, 6), "node_name": s.node_name,
            "gpus": s.gpu_count, "gpu_devices": s.gpu_devices, "gpu_selection": s.gpu_selection,
            "gpu_reason": s.gpu_reason, "gpu_xid_reason": s.gpu_xid_reason, "error": s.error,
        }
        whole = read_samples(self.run_dir / self.relpath)
        table, record["summary_window"] = measured_samples(whole, self.run_dir / self.inv.result_relpath(), s.rate_hz)
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
        if rows and record["summary_window"].get("from") == "the suite's measured window":
            mark_window(self.run_dir / self.relpath, whole, record["summary_window"], s.node_name)
        prom = replicate_prometheus(self.inv, self.run_dir, s.started or 0.0, s.stopped or 0.0,
                                    {"node_name": s.node_name}, interrupted=interrupted, contended=contended is True,
                                    more=more)
        if prom is not None:
            record["prometheus"] = prom
        return record


WINDOW_METRIC = "measured_window_s"  # the sample that records a suite's measured window (mark_window)


def mark_window(path: Path, whole: Any, window: Mapping[str, Any], node_name: str | None) -> None:
    """Add the suite's measured window to its sample file as one sample (source ``suite``, scope
    ``process``, metric :data:`WINDOW_METRIC`, its length in seconds, ending at the window's end,
    ``interval_s`` its length), so ``telemetry_slice_fact`` holds it as a slice of the window itself:
    the ``low_gpu_utilization`` playbook counts a replicate's summaries as windowed only where this
    slice says they were (``measurement_fact`` keeps no basis beside a summary row: a suite that
    records no window has its whole process summarised under the same names). Rewritten atomically,
    metadata kept; a failure is logged (the playbook then reads that replicate's samples)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from benchrun.fsio import atomic_path
    from benchrun.telemetry.samples import Sample, samples_table

    try:
        start, end = float(window["start_unix"]), float(window["end_unix"])
        row = samples_table([Sample(end, "suite", "process", WINDOW_METRIC, end - start, "s", interval_s=end - start,
                                    node_name=node_name)])
        if "point" in whole.column_names:
            row = row.append_column("point", pa.nulls(1, pa.string()))
        table = pa.concat_tables([whole, row.cast(whole.schema)])
        with atomic_path(path) as tmp:
            pq.write_table(table, tmp, compression="zstd")
    except Exception as exc:  # telemetry never fails a replicate
        log.warning("%s: the measured window was not added to the samples: %s", path.name, exc)


def measured_samples(table: Any, result_path: Path, rate_hz: float | None = None) -> tuple[Any, dict[str, Any]]:
    """The samples the summaries read: those describing the suite's measured window (its result's
    ``measured_window``, from ``ctx.measuring()``), each weighed by its part of it
    (:func:`benchrun.telemetry.summary.in_window`), else every sample of the process; and what was
    used. Before, every sample was: imports, CUDA start-up and allocation at 0 % GPU beside the timed
    calls at 95 % read as a starved GPU (the low_gpu_utilization playbook).

    A window shorter than 2 sampling periods (``rate_hz``: the sampler's, else the file's, else
    DEFAULT_RATE_HZ) gets no samples, ``from: none`` and a ``reason``: no summaries and no
    contention verdict of its own. The window's length decides, never where it falls between the
    ticks: from 2 periods on, a whole period between two ticks lies inside the window wherever it
    falls, so at least one sample describes the window alone and at least two describe parts of it;
    shorter, whether two samples overlap it depends on where it falls (at 1 Hz a 0.5 s window
    straddling a tick overlaps two, else one). Until 2026-12-07 that count decided (a random subset
    of the canary's 0.1-0.5 s windows got summaries, the rest none), and until 2026-12-07 such a
    window silently got the whole process's."""
    try:
        window = json.loads(result_path.read_text(encoding="utf-8")).get("measured_window")
        start, end = float(window["start_unix"]), float(window["end_unix"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return table, {"from": "the whole process (the suite recorded no measured window)"}
    rate, assumed = _rate_of(table, rate_hz)
    at = f"{rate:g} Hz" + (" (assumed: the samples do not say)" if assumed else "")
    if end - start < 2.0 / rate - 1e-6:  # a microsecond's slack: the window's ends are floats
        return table.slice(0, 0), {
            "from": "none", "start_unix": start, "end_unix": end,
            "reason": (f"the suite's measured window ({end - start:.3g} s) is shorter than 2 sampling periods "
                       f"({2.0 / rate:g} s at {at}): too short to summarise (a higher "
                       "telemetrySampling.rateHz resolves it)")}
    inside, most = in_window(table, start, end)
    if most == 0:
        return table.slice(0, 0), {
            "from": "none", "start_unix": start, "end_unix": end,
            "reason": f"no sample describes the suite's measured window ({end - start:.3g} s at {at}): the sampler took none in it"}
    return inside, {"from": "the suite's measured window", "start_unix": start, "end_unix": end}


def _rate_of(table: Any, rate_hz: float | None) -> tuple[float, bool]:
    """(sampling rate, whether it was assumed): ``rate_hz``, else the sample file's, else DEFAULT_RATE_HZ."""
    if rate_hz is not None and rate_hz > 0:
        return float(rate_hz), False
    raw = (table.schema.metadata or {}).get(b"rate_hz")
    try:
        rate = float(raw.decode()) if raw else 0.0
    except ValueError:
        rate = 0.0
    return (rate, False) if rate > 0 else (DEFAULT_RATE_HZ, True)


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
    Called at every replicate's end, whatever became of it: the earlier replicates' collections are
    written or, at the layer's last replicate, waited for (:func:`replicate_prometheus`).

    ``timeline`` is the pod timeline (``container_started_utc``, ``container_finished_utc``,
    ``node_name``, ``pod_name``, ``pod_uid``). None when no Prometheus is configured; a replicate
    that wrote no usable result (failed, none) is not queried (nothing would hold the answer); never
    raises (telemetry does not decide a replicate).
    """
    from benchrun.telemetry.prometheus import configured_url
    from benchrun.warehouse.sources import parse_ts

    result = Path(run_dir) / inv.result_relpath()
    more = _earlier_collections(inv, Path(run_dir), None)
    try:
        url = configured_url()
        if not url:
            return None
        start, end = parse_ts(timeline.get("container_started_utc")), parse_ts(timeline.get("container_finished_utc"))
        node = timeline.get("node_name")
        if start is None or end is None or not node:
            record: dict[str, Any] | None = {"status": "unavailable",
                                             "reason": "the pod has no start/finish time or node; nothing to query"}
        else:
            where = {"node_name": str(node), "pod": timeline.get("pod_name"), "pod_uid": timeline.get("pod_uid"),
                     "queue": timeline.get("cluster_queue")}
            record = replicate_prometheus(inv, Path(run_dir), start.timestamp(), end.timestamp(), where,
                                          contended=_contended(result), more=more)
    except ValueError as exc:
        record = {"status": "unavailable", "reason": str(exc)}
    except Exception as exc:
        log.warning("%s r%d: Prometheus telemetry not recorded: %s", inv.suite, inv.replicate, exc)
        return None
    if record is not None:
        attach_prometheus(result, record)
    if not more:
        _last_of_layer(inv)
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


def finish_telemetry(tele: ReplicateTelemetry | None, inv: Invocation, run_dir: Path,
                     interrupted: BaseException | None = None) -> None:
    """Stop sampling and add the record to the result document (if the suite wrote one); first the
    earlier replicates' Prometheus collections (:func:`replicate_prometheus`), sampling on or off.
    ``interrupted``: the exception the launch ends with (nothing is waited for)."""
    more = _earlier_collections(inv, Path(run_dir), interrupted)
    if tele is not None:
        try:
            record = tele.finish(interrupted, more=more)
            attach_to_result(Path(run_dir) / inv.result_relpath(), record)
        except Exception as exc:
            log.warning("%s r%d: telemetry not recorded: %s", inv.suite, inv.replicate, exc)
    if interrupted is None and not more:
        _last_of_layer(inv)


@contextlib.contextmanager
def replicate_telemetry(inv: Invocation, run_dir: Path) -> Iterator[ReplicateTelemetry | None]:
    """Sample around the body (the suite's run); yields None when sampling is off or cannot start.

    On exit the result document (if the suite wrote one) gains the summaries and the record. When
    the body raises (Ctrl-C, a cancelled Dagster run, a launcher error) the samples are still
    recorded, but Prometheus is neither waited for nor asked: the exception goes on at once.
    """
    tele = start_telemetry(inv, run_dir)
    try:
        yield tele
    except BaseException as exc:
        finish_telemetry(tele, inv, run_dir, interrupted=exc)
        raise
    finish_telemetry(tele, inv, run_dir)


# -- Prometheus beside the next replicate ---------------------------------------------------------
# A replicate's gauges are asked for once the scrape after its window is in Prometheus (the settle
# time, up to 15 s by default). Waited for in line, that held every next replicate (about 10 min
# over 40) and, from a finally, held a Ctrl-C too. So where more of the layer follows in this
# process (the run's pinned plan says so), the collection runs in a background thread beside the
# next replicate, and the launching thread writes what it got at a later replicate's end: whatever
# has arrived at each end, everything (waited for) at the layer's last replicate, so the layer's
# results are complete before the layer ends; nothing is waited for on an interrupt (what has not
# arrived is recorded as not collected). A contended replicate is collected in line: the rerun
# rule may set its result aside at once. Until 2026-12-07 every replicate waited in line.

_PENDING: list["_Collection"] = []
_PENDING_LOCK = threading.Lock()
_PLANS: dict[Path, tuple[tuple[int, int], list[tuple[str, str, int]]]] = {}


class _Cancelled(Exception):
    """An interrupt ended the wait of a background collection."""


class _Collection:
    """One replicate's Prometheus collection in a daemon thread: it waits out the settle time, asks,
    and keeps the answer; the launching thread writes it into the result (:func:`_deliver`)."""

    def __init__(self, url: str, inv: Invocation, run_dir: Path, start: float, end: float,
                 where: Mapping[str, Any]) -> None:
        from benchrun.telemetry.prometheus import redact

        self.inv, self.run_dir, self.start, self.end, self.url = inv, Path(run_dir), start, end, redact(url)
        self.token = uuid.uuid4().hex  # the result document waiting for this collection says it
        self.cancel = threading.Event()
        self.answer: tuple[list[Any], dict[str, Any]] | None = None
        self.thread = threading.Thread(target=self._run, args=(url, dict(where)), daemon=True,
                                       name=f"prometheus:{inv.run_id}_{inv.suite}_r{inv.replicate}")
        self.thread.start()

    def _run(self, url: str, where: dict[str, Any]) -> None:
        from benchrun.telemetry.prometheus import collect_replicate

        def sleep(seconds: float) -> None:
            if self.cancel.wait(seconds):
                raise _Cancelled

        try:
            self.answer = collect_replicate(url, self.start, self.end, sleep=sleep, **where)
        except _Cancelled:
            pass
        except Exception as exc:  # a bug here must not pass for Prometheus' answer
            self.answer = ([], {"status": "unavailable", "url": self.url,
                                "reason": f"the collection failed: {type(exc).__name__}: {exc}"})

    def placeholder(self) -> dict[str, Any]:
        return {"status": "pending", "pending": self.token, "url": self.url,
                "reason": ("asked for in the background once the settle time has passed, beside the next replicate, "
                           "and written here before the layer's last replicate ends; still pending, it never was "
                           "(the launch stopped first)")}


def replicate_prometheus(inv: Invocation, run_dir: Path, start: float, end: float, where: Mapping[str, Any], *,
                         interrupted: BaseException | None = None, contended: bool = False,
                         more: bool = False) -> dict[str, Any] | None:
    """The Prometheus record of one replicate's window [start, end] (``where``: node_name and, for a pod,
    pod, pod_uid, queue), or None when no Prometheus is configured. Not collected (saying why) on an
    interrupt or for a replicate with no usable result; in the background, the record ``pending``
    until written, where ``more`` of the layer follows and the replicate is not contended; else in line."""
    from benchrun.telemetry.prometheus import configured_url, query_replicate, redact

    try:
        url = configured_url()
    except ValueError as exc:
        return {"status": "unavailable", "reason": str(exc)}
    if not url:
        return None
    if interrupted is not None:
        return {"status": "unavailable", "url": redact(url),
                "reason": (f"not collected: the launch was interrupted ({type(interrupted).__name__}) as the replicate "
                           "ended; nothing is waited for or asked on the way out")}
    try:
        doc = json.loads((Path(run_dir) / inv.result_relpath()).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        doc = None
    if not isinstance(doc, dict) or doc.get("status") not in STATUSES or doc.get("status") == "failed":
        return {"status": "unavailable", "url": redact(url),
                "reason": "not collected: the replicate failed or wrote no result, which would hold no telemetry"}
    if more and not contended:
        job = _Collection(url, inv, Path(run_dir), start, end, where)
        with _PENDING_LOCK:
            _PENDING.append(job)
        return job.placeholder()
    return query_replicate(url, inv, Path(run_dir), start, end, **where)


def flush_prometheus(interrupted: BaseException | None = None) -> None:
    """At a layer's end (``benchrun.execute.run_layer``, a layer pod's loop): wait for every background
    collection of this process and write it into its result; ``interrupted``, the exception the layer
    ends with: nothing is waited for, what has not arrived is recorded as not collected. A layer that
    ended at its planned last replicate has none left; one that ended otherwise (a Job never created,
    an exception between replicates) would otherwise leave them pending."""
    _settle(wait=interrupted is None, interrupted=interrupted)


def _earlier_collections(inv: Invocation, run_dir: Path, interrupted: BaseException | None) -> bool:
    """At a replicate's end, before its own record: write the earlier collections that have arrived
    (on an interrupt, record the rest as not collected). Whether more of the layer follows this
    replicate in the plan (False where no plan says). Never raises, never waits."""
    from benchrun.telemetry.prometheus import URL_ENV

    if not _PENDING and not os.environ.get(URL_ENV, "").strip():
        return False
    more = False
    try:
        more = interrupted is None and _more_in_layer(inv, Path(run_dir))
        _settle(wait=False, interrupted=interrupted)
    except Exception as exc:  # telemetry never fails a replicate
        log.warning("%s r%d: earlier Prometheus collections not written: %s", inv.suite, inv.replicate, exc)
    return more


def _last_of_layer(inv: Invocation) -> None:
    """After the layer's last replicate has its own record (collected in line): wait for every
    collection still on its way and write it, so the layer's results are complete when it ends.
    An interrupt while waiting goes on (what has not arrived stays ``pending``, saying so)."""
    if not _PENDING:
        return
    try:
        _settle(wait=True, interrupted=None)
    except Exception as exc:  # telemetry never fails a replicate
        log.warning("%s r%d: earlier Prometheus collections not written: %s", inv.suite, inv.replicate, exc)


def _more_in_layer(inv: Invocation, run_dir: Path) -> bool:
    """Whether the run's pinned plan (``structured/<run>_plan.json``) has more of this invocation's
    layer after it; False where no plan says (a confirmation round's, a test's: collected in line)."""
    path = run_dir / "structured" / f"{inv.run_id}_plan.json"
    try:
        st = path.stat()
        key = (st.st_mtime_ns, st.st_size)
        cached = _PLANS.get(path)
        if cached is None or cached[0] != key:
            order = [(str(d["layer"]), str(d["suite"]), int(d["replicate"]))
                     for d in json.loads(path.read_text(encoding="utf-8"))]
            _PLANS[path] = cached = (key, order)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return False
    order = cached[1]
    at = [i for i, entry in enumerate(order) if entry == (inv.layer, inv.suite, int(inv.replicate))]
    return bool(at) and any(layer == inv.layer for layer, _, _ in order[at[-1] + 1:])


def _settle(*, wait: bool, interrupted: BaseException | None) -> None:
    with _PENDING_LOCK:
        jobs = list(_PENDING)
    for job in jobs:
        try:
            done = _deliver(job, wait=wait and interrupted is None, interrupted=interrupted)
        except Exception as exc:
            log.warning("%s r%d: Prometheus record not written: %s", job.inv.suite, job.inv.replicate, exc)
            done = True
        if done:
            with _PENDING_LOCK:
                if job in _PENDING:
                    _PENDING.remove(job)


def _deliver(job: _Collection, *, wait: bool, interrupted: BaseException | None) -> bool:
    """Write a collection that has arrived (``wait``: once it has) into its replicate's result and its
    samples beside it; on an interrupt, one that has not is cancelled and recorded as not collected.
    False while it is still on its way. A result that no longer waits for it (set aside, launched
    again) is left alone."""
    from benchrun.telemetry.prometheus import store_replicate

    if wait:
        job.thread.join()
    if job.thread.is_alive() and interrupted is None:
        return False
    if job.thread.is_alive() or job.answer is None:
        job.cancel.set()
        why = type(interrupted).__name__ if interrupted is not None else "cancelled"
        samples, record = [], {"status": "unavailable", "url": job.url,
                               "reason": f"not collected: the launch was interrupted ({why}) before its gauges were asked for"}
    else:
        samples, record = job.answer
    path = job.run_dir / job.inv.result_relpath()
    try:
        waiting = json.loads(path.read_text(encoding="utf-8"))["telemetry"]["prometheus"].get("pending")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        waiting = None
    if waiting != job.token:
        log.warning("%s r%d: the result no longer waits for its Prometheus collection; left alone",
                    job.inv.suite, job.inv.replicate)
        return True
    attach_prometheus(path, store_replicate(samples, record, job.inv, job.run_dir, job.start, job.end))
    return True


def _contended(result: Path) -> bool:
    try:
        return json.loads(result.read_text(encoding="utf-8"))["telemetry"]["contended"] is True
    except (OSError, ValueError, KeyError, TypeError):
        return False
