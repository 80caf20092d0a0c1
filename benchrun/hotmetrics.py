"""Hot metrics: a finished run's headline numbers as Prometheus series, within the cardinality budget.

One run becomes one push group (``job=benchrun, run_id=<run_id>``) or one node-exporter
textfile (``$BENCHRUN_HOME/metrics/<run_id>.prom``). Each suite metric becomes a gauge
``benchrun_<metric>`` holding the median over the run's ok replicates, labelled by run,
cadence, benchmark class, layer, suite and case (and a row's rank, node or GPU where all replicates had the same; its other
keys, such as a p99's sample count, are details of one replicate, never labels); run-level gauges say how many replicates
succeeded or failed, how long the run took and which phase it was in. A replicate whose suite judged
its own measurement invalid (``benchrun.stats.validity``: membw's arrays inside the cache) pushes no
metric, only its count (``benchrun_suite_invalid_replicates``), and a serving point judged invalid beyond its request
count (errors, a saturated client) none of its case's, only ``benchrun_suite_invalid_points``: a dashboard or alert
rule reads a gauge as the metric its name says, with no one beside it to read the caveat.

Labels named in CONTRACT.md §3 (``request_id``, ``trace_id``, ``prompt_hash``) and the
spec's ``dropDimensions`` never appear: rows that differ only in such a label are merged
(median within the replicate, then across replicates) and the merge is counted. When the
series exceed the budget the most important are kept (run-level, then the series the spec's
primary selectors name — ``ttft_ms``, ``serving_workflow/ttft_ms[c=4]``, matched as the
comparison's gate matches them —, then the other suite metrics, then per-rank/node/GPU detail) and the number
dropped is reported, never silently.

The exposition text (format 0.0.4) and the push are produced by ``prometheus_client``;
the push is an HTTP PUT through urllib, which replaces the run's group on every push.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import os
import re
import statistics
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import push_to_gateway
from prometheus_client.metrics_core import Metric

from benchrun.errors import BenchrunError
from benchrun.paths import benchrun_home, parse_result_name, validate_run_id
from benchrun.pushgateway import (GATEWAY_ERRORS, PUSHGATEWAY_ENV, delete_group, gateway, gateway_error,
                                  gateway_groups, shown_url)
from benchrun.rundir import read_json_or_none
from benchrun.stats.directions import has_direction, read_direction
from benchrun.stats.family import Primary, parse_primary
from benchrun.stats.load import launch_decides, launch_statuses
from benchrun.stats.validity import invalid_points, judged_invalid
from benchrun.suites.result import SCHEMA
from benchrun.fsio import atomic_write_text

log = logging.getLogger(__name__)

DEFAULT_JOB = "benchrun"
PREFIX = "benchrun_"
# CONTRACT.md §3: hot metrics never carry these as labels, whatever the spec says.
FORBIDDEN_LABELS = frozenset({"request_id", "trace_id", "prompt_hash"})
# The Pushgateway adds these two series to every group it holds.
GATEWAY_SERIES_PER_GROUP = 2

# Importance, lowest first kept first when the budget is tight.
PRIORITY_RUN = 0
PRIORITY_SUITE_COUNTS = 1
PRIORITY_PRIMARY = 2
PRIORITY_METRIC = 3
PRIORITY_DETAIL = 4  # a metric row carrying rank/node/GPU keys
PRIORITY_NAMES = {PRIORITY_RUN: "run", PRIORITY_SUITE_COUNTS: "suite_replicates", PRIORITY_PRIMARY: "primary",
                  PRIORITY_METRIC: "metric", PRIORITY_DETAIL: "detail"}

RUN_METRICS = {
    "benchrun_run_info": "Run identity and lineage (value always 1).",
    "benchrun_run_phase": "The run's phase when the metrics were rendered (value always 1).",
    "benchrun_run_duration_seconds": "Seconds from run start to finish, or to evidence sealing while analysing.",
    "benchrun_run_replicates": "Replicates per layer by outcome (ok, failed, unavailable).",
    "benchrun_suite_replicates": "Suite result documents per suite by status (ok, failed, unavailable).",
    "benchrun_suite_invalid_replicates": "Ok replicates whose suite judged its own measurement invalid (their "
                                         "metrics are not pushed: e.g. membw's arrays measured cache bandwidth).",
    "benchrun_suite_invalid_points": "Ok replicates in which the load generator judged a serving point (the case) "
                                     "invalid beyond its request count (its metrics from them are not pushed).",
}
# The row keys that name what a series is about (a rank, node or GPU; and the per-request keys,
# which are then removed): labels. Every other key a row carries (fio's job_runtime_ms, a p99's
# `samples` count) is a detail of one replicate's measurement: a label of it would make each
# replicate its own series instead of one median over them.
IDENTITY_KEYS = frozenset({"rank_id", "node_name", "gpu_uuid"}) | FORBIDDEN_LABELS
_NAME_BAD = re.compile(r"[^a-zA-Z0-9_:]")
_LABEL_BAD = re.compile(r"[^a-zA-Z0-9_]")


class BudgetLike(Protocol):
    """What :func:`render` needs of ``sinks.hotMetrics.cardinalityBudget``."""

    max_active_series: int
    drop_dimensions: list[str]


@dataclass(frozen=True)
class Budget:
    """A plain cardinality budget (the spec model's ``CardinalityBudget`` fits too)."""

    max_active_series: int
    drop_dimensions: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Series:
    """One gauge sample: family name, sorted labels, value, and how much it matters."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float
    priority: int


@dataclass(frozen=True)
class HotMetrics:
    """A run's rendered series and what the budget did to them."""

    run_id: str
    series: tuple[Series, ...]
    help: Mapping[str, str]
    max_active_series: int
    existing_series: int
    series_total: int
    dropped_by_budget: Mapping[str, int]
    merged_series: int
    labels_removed: tuple[str, ...]
    notes: tuple[str, ...] = ()

    @property
    def series_count(self) -> int:
        return len(self.series)

    @property
    def series_dropped(self) -> int:
        return sum(self.dropped_by_budget.values())

    def registry(self) -> CollectorRegistry:
        """A private registry holding exactly these series (never the process default)."""
        reg = CollectorRegistry(auto_describe=False)
        reg.register(_Families(self))
        return reg

    @property
    def text(self) -> str:
        """Prometheus text exposition format 0.0.4."""
        return generate_latest(self.registry()).decode("utf-8")


class _Families:
    """A prometheus_client collector over a HotMetrics' series."""

    def __init__(self, hm: HotMetrics) -> None:
        self._hm = hm

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for s in self._hm.series:
            fam = families.get(s.name)
            if fam is None:
                fam = families[s.name] = Metric(s.name, self._hm.help.get(s.name, s.name), "gauge")
            fam.add_sample(s.name, dict(s.labels), s.value)
        yield from (families[k] for k in sorted(families))

    def describe(self) -> list[Metric]:
        return []


@dataclass(frozen=True)
class Published:
    """Where a run's hot metrics went."""

    textfile: Path | None
    pushed_to: str | None
    note: str
    push_error: str | None = None  # a Pushgateway was configured and could not be read or pushed to


# -- names ------------------------------------------------------------------------------------


def metric_name(raw: str) -> str:
    """``benchrun_<raw>`` with every character outside ``[a-zA-Z0-9_:]`` replaced by ``_``."""
    body = _NAME_BAD.sub("_", raw.strip()) or "unnamed"
    name = PREFIX + body
    if name in RUN_METRICS:  # a suite metric may not masquerade as a run-level gauge
        name = PREFIX + "suite_" + body
    return name


def label_name(raw: str) -> str:
    """A valid label name: ``[a-zA-Z_][a-zA-Z0-9_]*``, never the reserved ``__`` prefix."""
    name = _LABEL_BAD.sub("_", str(raw)) or "_"
    if name[0].isdigit():
        name = "_" + name
    return "x" + name if name.startswith("__") else name


def _label_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


# -- reading the run ---------------------------------------------------------------------------


def _read_json(path: Path) -> Any:
    return read_json_or_none(path, fix="the run directory is damaged")


def _result_docs(run_dir: Path, run_id: str) -> list[dict[str, Any]]:
    """Every suite result document of the run, read and checked, in a stable order."""
    structured = run_dir / "structured"
    docs = []
    for path in sorted(structured.glob(f"{run_id}_*_r*.json")):
        if parse_result_name(path.name, run_id) is None:
            continue
        doc = _read_json(path)
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            continue  # other structured JSON (launches, environment) shares the prefix
        if doc.get("status") not in ("ok", "failed", "unavailable"):
            raise BenchrunError(f"{path}: status must be ok, failed or unavailable")
        docs.append(doc)
    return docs


def _suite_layers(run_dir: Path, run_id: str) -> dict[str, str]:
    """suite -> layer from the launches record (else the plan); empty when neither exists."""
    out: dict[str, str] = {}
    for kind in ("launches", "plan"):
        rows = _read_json(run_dir / "structured" / f"{run_id}_{kind}.json")
        if isinstance(rows, list):
            for r in rows:
                if isinstance(r, dict) and r.get("suite") and r.get("layer"):
                    out.setdefault(str(r["suite"]), str(r["layer"]))
    return out


def _parse_utc(text: Any) -> dt.datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def _duration_s(run_dir: Path, status: Mapping[str, Any]) -> float | None:
    start = _parse_utc(status.get("started_utc")) or _parse_utc(status.get("created_utc"))
    end = _parse_utc(status.get("finished_utc"))
    if end is None:  # still analysing: the evidence was sealed when the manifest was written
        manifest = _read_json(run_dir / "manifest.json")
        end = _parse_utc(manifest.get("timestamp_utc")) if isinstance(manifest, dict) else None
    if start is None or end is None:
        return None
    return max(0.0, (end - start).total_seconds())


# -- rendering ---------------------------------------------------------------------------------


def _selectors(primary: Iterable[str]) -> list[Primary]:
    """The spec's primary selectors, parsed as the comparison's gate parses them
    (:func:`benchrun.stats.family.parse_primary`); one that does not parse is said and left out
    (the run's metrics are still published, that selector's series just get no priority)."""
    out = []
    for text in primary:
        try:
            out.append(parse_primary(text))
        except BenchrunError as exc:
            log.warning("hot metrics: %s", exc)
    return out


def render(
    run_dir: Path,
    status: Mapping[str, Any],
    budget: BudgetLike,
    *,
    primary: Iterable[str] = (),
    existing_series: int = 0,
) -> HotMetrics:
    """The run's hot series, trimmed to ``budget.max_active_series - existing_series``.

    ``primary`` holds the spec's primary selectors (``ttft_ms``, ``serving_workflow/ttft_ms[c=4]``:
    ``metrics.<family>.primary``), whose series are kept before the others;
    ``existing_series`` is what the sink already holds from other runs (see
    :func:`gateway_series` and :func:`textfile_series`).
    """
    run_dir = Path(run_dir)
    run_id = validate_run_id(str(status.get("run_id") or run_dir.name))
    removed_cfg = {label_name(d) for d in budget.drop_dimensions}
    notes: list[str] = []
    if "run_id" in removed_cfg:
        removed_cfg.discard("run_id")
        notes.append("run_id is the push group and stays a label although dropDimensions lists it")
    removed = FORBIDDEN_LABELS | removed_cfg

    base = {
        "run_id": run_id,
        "run_name": _label_value(status.get("name") or ""),
        "cadence": _label_value(status.get("cadence") or ""),
        "benchmark_class": _label_value(status.get("benchmark_class_granted") or ""),
    }
    labels_removed: set[str] = set()

    def labels(extra: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
        merged = {**{label_name(k): _label_value(v) for k, v in extra.items() if v is not None}, **base}
        for k in [k for k in merged if k in removed]:
            labels_removed.add(k)
            del merged[k]
        return tuple(sorted(merged.items()))

    series: list[Series] = []
    help_text: dict[str, str] = dict(RUN_METRICS)

    # Run-level gauges.
    info = {
        "phase": status.get("phase") or "",
        "benchmark_class_requested": status.get("benchmark_class_requested") or "",
        "workload_type": status.get("workload_type") or "",
        "scheduler_path": status.get("selected_scheduler_path") or status.get("scheduler_path_requested") or "",
        "variable_under_test": status.get("variable_under_test") or "",
        "workload_spec_digest": status.get("workload_spec_digest") or "",
    }
    series.append(Series("benchrun_run_info", labels(info), 1.0, PRIORITY_RUN))
    series.append(Series("benchrun_run_phase", labels({"phase": status.get("phase") or "Unknown"}), 1.0, PRIORITY_RUN))
    duration = _duration_s(run_dir, status)
    if duration is not None:
        series.append(Series("benchrun_run_duration_seconds", labels({}), duration, PRIORITY_RUN))
    for layer, st in sorted((status.get("layers") or {}).items()):
        if not isinstance(st, Mapping) or st.get("status") == "skipped":
            continue
        for outcome in ("ok", "failed", "unavailable"):
            n = st.get(outcome)
            if isinstance(n, (int, float)):
                series.append(Series("benchrun_run_replicates", labels({"layer": layer, "outcome": outcome}),
                                     float(n), PRIORITY_RUN))

    # Suite metrics: median within a replicate (after merging removed labels), then across replicates.
    docs = _result_docs(run_dir, run_id)
    layer_of = _suite_layers(run_dir, run_id)
    counts: dict[tuple[str, str], int] = {}
    invalid: dict[tuple[str, str], int] = {}  # (suite, an invalid point; "": the whole replicate) -> replicates
    per_rep: dict[tuple[str, tuple[tuple[str, str], ...]], dict[int, list[float]]] = {}
    key_rows: dict[tuple[str, tuple[tuple[str, str], ...]], set[tuple[tuple[str, Any], ...]]] = {}
    priority: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
    group_of: dict[tuple[str, tuple], tuple[str, tuple]] = {}  # the series without its rank/node/GPU labels
    group_labels: dict[tuple[str, tuple], dict[int, set[tuple]]] = {}  # and the labels each replicate's rows had
    primary_groups: set[tuple[str, tuple]] = set()
    selectors = _selectors(primary)
    launched = launch_statuses(run_dir)
    for doc in docs:
        suite = str(doc.get("suite", ""))
        # the launcher decides, as every other reader takes it (a suite killed at its timeout after it wrote ok)
        status = launch_decides(doc["status"], None if launched is None else
                                launched.get((suite, int(doc.get("replicate", 0)))))
        counts[(suite, status)] = counts.get((suite, status), 0) + 1
        if status != "ok":
            continue
        bad = [""] if judged_invalid(doc) else sorted(invalid_points(doc))  # not what their names say: validity
        for point in bad:
            invalid[(suite, point)] = invalid.get((suite, point), 0) + 1
        rep = int(doc.get("replicate", 0))
        for row in [] if "" in bad else [r for r in doc.get("metrics") or [] if str(r.get("case") or "") not in bad]:
            value = row.get("value")
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                continue
            extra = {k: v for k, v in row.items() if k in IDENTITY_KEYS and v is not None}
            # A row's own keys (rank_id, node_name, ...) never override the structural labels.
            lab = labels({**extra, "layer": layer_of.get(suite, ""), "suite": suite, "case": row.get("case") or ""})
            struct = labels({"layer": layer_of.get(suite, ""), "suite": suite, "case": row.get("case") or ""})
            name = metric_name(str(row.get("name", "")))
            key = (name, lab)
            per_rep.setdefault(key, {}).setdefault(rep, []).append(float(value))
            gkey = group_of[key] = (name, struct)
            group_labels.setdefault(gkey, {}).setdefault(rep, set()).add(lab)
            key_rows.setdefault(key, set()).add(tuple(sorted({**extra, "case": row.get("case") or ""}.items())))  # a dropped case merges
            kept_extra = [k for k in extra if label_name(k) not in removed]
            is_primary = any(sel.matches(suite, str(row.get("case") or ""), str(row.get("name", "")))
                             for sel in selectors)
            prio = PRIORITY_DETAIL if kept_extra else (PRIORITY_PRIMARY if is_primary else PRIORITY_METRIC)
            priority[key] = min(priority.get(key, prio), prio)
            primary_groups.update([gkey] if is_primary else [])
            if name not in help_text:
                unit = row.get("unit") or "1"
                direction = read_direction(row.get("case"), row.get("name"), str(row.get("direction") or ""))
                better = (f"{direction} is better" if has_direction(direction)
                          else "context: neither higher nor lower is better")
                help_text[name] = f"{row.get('name')} in {unit} ({better}): median over the run's ok replicates."
    for (suite, st), n in sorted(counts.items()):
        series.append(Series("benchrun_suite_replicates",
                             labels({"layer": layer_of.get(suite, ""), "suite": suite, "status": st}),
                             float(n), PRIORITY_SUITE_COUNTS))
    for (suite, point), n in sorted(invalid.items()):
        name = "benchrun_suite_invalid_points" if point else "benchrun_suite_invalid_replicates"  # a point: loadgen
        of = {"layer": layer_of.get(suite, ""), "suite": suite, **({"case": point} if point else {})}
        series.append(Series(name, labels(of), float(n), PRIORITY_SUITE_COUNTS))
        notes.append(f"{suite}{f' [{point}]' if point else ''}: {n} replicate(s) judged their own measurement invalid"
                     f"{' (by the load generator)' if point else ''}; their metrics are not pushed")
    # Rows whose rank/node/GPU labels differ between replicates (all-reduce's slowest rank's lag) are one series without
    # them, the published rollup (benchrun.stats.perlaunch): a rank's series would cover only the replicates it was in.
    rolled = {g: {} for g, by_rep in group_labels.items() if len({frozenset(r) for r in by_rep.values()}) > 1}
    merged = 0
    for key, reps in per_rep.items():
        if len(key_rows[key]) > 1:
            merged += len(key_rows[key]) - 1
        if group_of[key] in rolled:
            for rep, vals in reps.items():
                rolled[group_of[key]].setdefault(rep, []).extend(vals)
            continue
        value = statistics.median(statistics.median(v) for v in reps.values())
        series.append(Series(key[0], key[1], float(value), priority[key]))
    for (name, lab), reps in sorted(rolled.items()):
        series.append(Series(name, lab, float(statistics.median(statistics.median(v) for v in reps.values())),
                             PRIORITY_PRIMARY if (name, lab) in primary_groups else PRIORITY_METRIC))
        notes.append(f"{name} {dict(lab).get('case')}: rank/node/GPU labels differ by replicate; one series, as published")

    allowed = max(0, int(budget.max_active_series) - int(existing_series))
    ordered = sorted(series, key=lambda s: (s.priority, s.name, s.labels))
    kept, over = ordered[:allowed], ordered[allowed:]
    dropped: dict[str, int] = {}
    for s in over:
        dropped[PRIORITY_NAMES[s.priority]] = dropped.get(PRIORITY_NAMES[s.priority], 0) + 1
    if over:
        log.warning(
            "run %s: %d hot series over the budget (%d allowed = maxActiveSeries %d - %d already held); "
            "dropped %s", run_id, len(over), allowed, budget.max_active_series, existing_series, dropped,
        )
    if merged:
        notes.append(f"{merged} series merged because their distinguishing labels are dropped "
                     f"({', '.join(sorted(labels_removed))})")
    used_names = {s.name for s in kept}
    return HotMetrics(
        run_id=run_id,
        series=tuple(kept),
        help={k: v for k, v in help_text.items() if k in used_names},
        max_active_series=int(budget.max_active_series),
        existing_series=int(existing_series),
        series_total=len(series),
        dropped_by_budget=dropped,
        merged_series=merged,
        labels_removed=tuple(sorted(labels_removed)),
        notes=tuple(notes),
    )


# -- sinks -------------------------------------------------------------------------------------


def default_textfile(run_id: str, home: Path | str | None = None) -> Path:
    """``$BENCHRUN_HOME/metrics/<run_id>.prom`` (a node-exporter textfile-collector directory)."""
    return benchrun_home(home) / "metrics" / f"{validate_run_id(run_id)}.prom"


def write_textfile(hm: HotMetrics, path: Path | str | None = None) -> Path:
    """Write the exposition text to ``path`` (default :func:`default_textfile`) atomically."""
    target = Path(path) if path is not None else default_textfile(hm.run_id)
    atomic_write_text(target, hm.text)
    log.info("hot metrics of run %s: %d series in %s", hm.run_id, hm.series_count, target)
    return target


def textfile_series(directory: Path, *, exclude_run_id: str | None = None) -> int:
    """Samples in the other ``*.prom`` files of a textfile directory (series already held)."""
    total = 0
    if not directory.is_dir():
        return 0
    for p in sorted(directory.glob("*.prom")):
        if exclude_run_id is not None and p.name == f"{exclude_run_id}.prom":
            continue
        with p.open(encoding="utf-8", errors="replace") as fh:
            total += sum(1 for line in fh if line.strip() and not line.startswith("#"))
    return total


def gateway_series(url: str, *, job: str = DEFAULT_JOB, exclude_run_id: str | None = None,
                   timeout: float = 10.0) -> int:
    """Series the Pushgateway holds in groups other than this run's (its ``/api/v1/metrics``)."""
    total = 0
    for group in gateway_groups(url, timeout):
        glabels = group.get("labels") or {}
        if exclude_run_id is not None and glabels.get("job") == job and glabels.get("run_id") == exclude_run_id:
            continue
        for value in group.values():
            if isinstance(value, dict) and isinstance(value.get("metrics"), list):
                total += len(value["metrics"])
    return total


def delete_groups(url: str, run_id: str, *, job: str = DEFAULT_JOB, timeout: float = 10.0) -> list[str]:
    """Delete the run's groups from the Pushgateway (``job/<job>/run_id/<run_id>``, and any
    with extra grouping labels); the group URLs deleted, empty when it held none. A group left
    there counts against every later run's ``maxActiveSeries``. BenchrunError when the gateway
    is unreachable or refuses."""
    deleted = []
    gw = gateway(url)
    for group in gateway_groups(url, timeout):
        glabels = group.get("labels") or {}
        if glabels.get("job") != job or glabels.get("run_id") != run_id:
            continue
        key = delete_group(gw, url, job, glabels, timeout)
        deleted.append(group_url(url, run_id, job=job, grouping={k: v for k, v in key.items() if k != "run_id"}))
    return deleted


def group_url(url: str, run_id: str, *, job: str = DEFAULT_JOB, grouping: Mapping[str, str] | None = None) -> str:
    """``<url>/metrics/job/<job>/run_id/<run_id>[/<k>/<v>...]`` for plain label values (the URL's
    user:password left out: this is what records and logs show)."""
    parts = [shown_url(url).rstrip("/"), "metrics", "job", job, "run_id", run_id]
    for k, v in sorted((grouping or {}).items()):
        parts += [k, v]
    return "/".join(parts)


def push(hm: HotMetrics, url: str, *, job: str = DEFAULT_JOB, grouping: Mapping[str, str] | None = None,
         timeout: float = 10.0) -> str:
    """PUT the series as the group ``job/<job>/run_id/<run_id>`` (replacing it); returns the group URL."""
    extra = dict(grouping or {})
    bad = sorted((FORBIDDEN_LABELS | {"job", "run_id"}) & set(extra))
    if bad:
        raise BenchrunError(f"push grouping may not use {', '.join(bad)} (job and run_id are set by benchrun; "
                            "request_id, trace_id and prompt_hash are never labels)")
    key = {"run_id": hm.run_id, **{label_name(k): str(v) for k, v in extra.items()}}
    gw = gateway(url)  # BenchrunError, without the URL, for one that cannot be used
    target = group_url(gw.url, hm.run_id, job=job, grouping=extra)
    try:
        push_to_gateway(gw.url, job=job, registry=hm.registry(), grouping_key=key, timeout=timeout,
                        handler=gw.handler())
    except GATEWAY_ERRORS as exc:
        raise gateway_error(url, exc) from exc
    log.info("hot metrics of run %s: %d series pushed to %s", hm.run_id, hm.series_count, target)
    return target


def publish_run(
    run_dir: Path,
    status: Mapping[str, Any],
    budget: BudgetLike,
    *,
    primary: Iterable[str] = (),
    home: Path | str | None = None,
    url: str | None = None,
    job: str = DEFAULT_JOB,
    retention_days: float | None = None,
) -> tuple[HotMetrics, Published]:
    """Render within the budget, write the textfile, and push when a Pushgateway is configured.

    ``url`` defaults to ``$BENCHRUN_PUSHGATEWAY_URL``; without one the textfile is the only
    sink and the returned note says so. The series the sink already holds (other runs'
    groups plus the gateway's own per-group series, or the other textfiles) count against
    the budget; first, other runs' groups and textfiles older than ``retention_days`` (the
    spec's ``hotMetrics.retentionDays``) are removed.
    """
    import time

    from benchrun.pushgateway import expire_groups, expire_textfiles

    run_id = validate_run_id(str(status.get("run_id") or Path(run_dir).name))
    url = url if url is not None else (os.environ.get(PUSHGATEWAY_ENV) or None)
    textfile = default_textfile(run_id, home)
    problem = None
    existing = None
    expired: list[str] = []
    if retention_days is not None:
        expired = expire_textfiles(textfile.parent, retention_days * 86400.0, keep=textfile)
    if url:
        try:
            if retention_days is not None:
                expired += expire_groups(url, job, retention_days * 86400.0, time.time(), keep_run_id=run_id)
            existing = gateway_series(url, job=job, exclude_run_id=run_id) + GATEWAY_SERIES_PER_GROUP
        except BenchrunError as exc:  # a sink's outage: the run's evidence stands, the textfile is still written
            problem = str(exc)
    if existing is None:
        existing = textfile_series(textfile.parent, exclude_run_id=run_id)
    hm = render(Path(run_dir), status, budget, primary=primary, existing_series=existing)
    path = write_textfile(hm, textfile)
    if expired:
        log.info("run %s: hot metrics of %d run(s) older than %g days removed (retentionDays): %s", run_id,
                 len(set(expired)), retention_days, ", ".join(sorted(set(expired))[:10]))
    if url and problem is None:
        try:
            target = push(hm, url, job=job)
            return hm, Published(path, target, f"pushed to {target} and written to {path}")
        except BenchrunError as exc:
            problem = str(exc)
    if problem is not None:
        note = f"not pushed: {problem}; written to the textfile {path} (the budget counted the textfiles' series)"
        log.warning("run %s: hot metrics %s", run_id, note)
        return hm, Published(path, None, note, push_error=problem)
    note = f"{PUSHGATEWAY_ENV} is not set: written to the textfile {path} only, nothing pushed"
    log.info("run %s: %s", run_id, note)
    return hm, Published(path, None, note)
