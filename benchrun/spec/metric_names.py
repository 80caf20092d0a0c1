"""Metric names in a spec: the vocabulary CONTRACT §5 uses, the ``suite/metric[case]`` form of a
primary entry, and the rules that read names — a declared metric that is nearly a known one, a
primary whose suite qualifier names no suite the spec runs, and a per-metric margin
(``comparison.deltaPctByMetric``, ``absoluteMarginByMetric``) whose key the comparison would
never match. Each rule yields ``(path, message)`` as every rule in
:mod:`benchrun.spec.rules` does (that module lists them all in ``RULES``)."""

from __future__ import annotations

import difflib
import re
from typing import Any, Iterator

from benchrun.spec.docaccess import SPEC, Finding, get
from benchrun.spec.model import LAYER_NAMES

TRAINING_PRIMARY = ("time_to_train_hours", "mfu_pct", "scaling_efficiency_pct", "training_reliability_pct")
INFERENCE_PRIMARY = ("ttft_ms", "tokens_per_second", "p99_latency_ms", "jitter_ms")
COST_METRICS = ("cost_per_token_usd", "cost_per_request_usd")
# CONTRACT §5's vocabulary plus the training primaries: a name close to one of these but not
# equal is a misspelling; a name far from all of them may be a custom suite's own metric.
KNOWN_METRICS = (*TRAINING_PRIMARY, *INFERENCE_PRIMARY, *COST_METRICS, "decode_ms_per_token", "token_gap_ms",
                 "p50_latency_ms", "per_user_output_tokens_per_s", "request_goodput", "slo_attainment",
                 "capacity_at_slo", "cost_per_good_request_usd", "gpu_utilization_pct", "request_throughput_rps")

_QUALIFIED = re.compile(r"^(?:(?P<suite>[^/\[\]]+)/)?(?P<name>[^/\[\]]+)(?:\[[^\[\]]*\])?$")
MARGIN_KEYS = ("deltaPctByMetric", "absoluteMarginByMetric")


def metric_name(entry: str) -> str:
    """The metric name of a primary entry: ``suite/metric[case]`` (either qualifier optional) → ``metric``."""
    m = _QUALIFIED.match(entry)
    return m.group("name") if m else entry


def _declared(doc: Any) -> Iterator[tuple[tuple[Any, ...], str]]:
    """(path, entry) of every string under ``metrics.<family>.primary`` / ``secondary``."""
    metrics = get(doc, SPEC + ("metrics",))
    for family, body in (metrics.items() if isinstance(metrics, dict) else ()):
        if not isinstance(body, dict):
            continue
        for kind in ("primary", "secondary"):
            names = body.get(kind)
            for i, name in enumerate(names if isinstance(names, list) else []):
                if isinstance(name, str):
                    yield SPEC + ("metrics", family, kind, i), name


def rule_metric_names(doc: Any) -> Iterator[Finding]:
    """Extension (CONTRACT §5 names metrics): a primary or secondary metric that is nearly, but not
    exactly, a known metric name is a typo."""
    for path, entry in _declared(doc):
        name = metric_name(entry)
        if name in KNOWN_METRICS:
            continue
        close = difflib.get_close_matches(name, KNOWN_METRICS, n=1, cutoff=0.8)
        if close:
            yield path, f"unknown metric {name!r} (did you mean {close[0]!r}?)"


def rule_primary_suites(doc: Any) -> Iterator[Finding]:
    """Extension: a primary of an enabled metrics family qualified by suite (``suite/metric[case]``)
    names a suite of an enabled layer. Else nothing the run measures matches it: the entry still
    satisfied the required-metric rules by its name, and the run gated nothing."""
    layers = get(doc, SPEC + ("layers",))
    runs: dict[str, str | None] = {}  # suite -> None when its layer is enabled, else the layer's name
    for layer in layers if isinstance(layers, list) else []:
        entries = get(layer, ("suites",))
        for suite in entries if isinstance(entries, list) else []:
            name = get(suite, ("name",))
            if isinstance(name, str) and runs.get(name, "") is not None:
                runs[name] = None if get(layer, ("enabled",)) is True else str(get(layer, ("name",)))
    names = {n for layer in (layers if isinstance(layers, list) else []) if isinstance(n := get(layer, ("name",)), str)}
    listed_all = all(name in names for name in LAYER_NAMES)
    metrics = get(doc, SPEC + ("metrics",))
    for family, body in (metrics.items() if isinstance(metrics, dict) else ()):
        if not isinstance(body, dict) or body.get("enabled") is False:
            continue
        entries = body.get("primary")
        for i, entry in enumerate(entries if isinstance(entries, list) else []):
            m = _QUALIFIED.match(entry) if isinstance(entry, str) else None
            suite = m.group("suite") if m else None
            if suite is None:
                continue
            path = SPEC + ("metrics", family, "primary", i)
            if suite not in runs:
                if not listed_all:
                    continue  # a layer missing from spec.layers is that rule's error (its suites unknown)
                known = sorted(runs)
                close = difflib.get_close_matches(suite, known, n=1, cutoff=0.6)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                yield path, (f"{entry!r} names suite {suite!r}, which is not in spec.layers{hint}: nothing the run "
                             f"measures would match it; qualify it with a suite the spec runs "
                             f"({', '.join(known) or 'none'}) or write the bare name {m.group('name')!r}")
            elif runs[suite] is not None:
                yield path, (f"{entry!r} names suite {suite!r} of the disabled layer {runs[suite]!r}: it never "
                             f"runs, so this primary would gate nothing; enable the layer or gate on a suite "
                             f"that runs")


def rule_margin_metrics(doc: Any) -> Iterator[Finding]:
    """Extension: a key of ``comparison.deltaPctByMetric`` / ``absoluteMarginByMetric`` is a bare
    metric name, the one the comparison looks its margin up by. A qualified key
    (``suite/metric[case]``) or a near miss of a declared or known metric would never match, and
    the metric would silently keep ``deltaPct``: both are errors. A name far from every known one
    may be a custom suite's metric and passes."""
    declared = {metric_name(entry) for _, entry in _declared(doc)}
    vocabulary = sorted(declared | set(KNOWN_METRICS))
    for field in MARGIN_KEYS:
        path = SPEC + ("comparison", field)
        margins = get(doc, path)
        for key in (margins if isinstance(margins, dict) else {}):
            if not isinstance(key, str) or key in declared or key in KNOWN_METRICS:
                continue
            bare = metric_name(key)
            if bare != key:
                yield path + (key,), (f"keys are bare metric names, as rows name them: write {bare!r} (a margin "
                                      "applies to the metric in every suite and case; there is no per-suite or "
                                      "per-case margin)")
                continue
            close = difflib.get_close_matches(key, vocabulary, n=1, cutoff=0.8)
            if close:
                yield path + (key,), (f"unknown metric {key!r} (did you mean {close[0]!r}?): no row would match it "
                                      "and the metric would keep comparison.deltaPct")
