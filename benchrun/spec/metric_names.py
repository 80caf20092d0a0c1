"""Metric names in a spec: the vocabulary CONTRACT §5 uses, the ``suite/metric[case]`` form of a
primary entry, and the rules that read names — a declared metric that is nearly a known one, a
primary whose suite qualifier names no suite the spec runs, and a per-metric margin
(``comparison.deltaPctByMetric``, ``absoluteMarginByMetric``) whose key the comparison would
never match. Each rule yields ``(path, message)`` as every rule in
:mod:`benchrun.spec.rules` does (that module lists them all in ``RULES``)."""

from __future__ import annotations

import difflib
import importlib
import re
from functools import lru_cache
from typing import Any, Iterator

from benchrun.spec.docaccess import SPEC, Finding, did_you_mean, get
from benchrun.spec.docaccess import suites as doc_suites
from benchrun.spec.model import LAYER_NAMES

TRAINING_PRIMARY = ("time_to_train_hours", "mfu_pct", "scaling_efficiency_pct", "training_reliability_pct")
INFERENCE_PRIMARY = ("ttft_ms", "tokens_per_second", "p99_latency_ms", "jitter_ms")
COST_METRICS = ("cost_per_token_usd", "cost_per_request_usd")
# CONTRACT §5's vocabulary plus the training primaries: a name close to one of these but not
# equal is a misspelling; a name far from all of them may be a custom suite's own metric.
KNOWN_METRICS = (*TRAINING_PRIMARY, *INFERENCE_PRIMARY, *COST_METRICS, "decode_ms_per_token", "token_gap_ms",
                 "p50_latency_ms", "per_user_output_tokens_per_s", "request_goodput", "slo_attainment",
                 "capacity_at_slo", "cost_per_good_request_usd", "gpu_utilization_pct", "request_throughput_rps")

QUALIFIED = re.compile(r"^(?:(?P<suite>[^/\[\]]+)/)?(?P<name>[^/\[\]]+)(?:\[[^\[\]]*\])?$")
MARGIN_KEYS = ("deltaPctByMetric", "absoluteMarginByMetric")


# the row the comparison adds for a suite with a failed launch (benchrun.stats.compare.FAILED_METRIC)
FAILED_ROWS = "failed_replicates"


@lru_cache(maxsize=None)
def builtin_metrics() -> frozenset[str]:
    """Every metric one of benchrun's own suites may report (each module's ``METRICS``) and the
    telemetry rows written beside every replicate (and the sampled quantities they summarise, which a
    secondary may name): names that are no one's typo."""
    from benchrun.spec.builtin_suites import PACKAGE, builtin_suites
    from benchrun.telemetry.summary import SAMPLED, SUMMARY_METRICS

    names = {*SUMMARY_METRICS, *SAMPLED}
    for suite in builtin_suites():
        names |= set(getattr(importlib.import_module(f"{PACKAGE}.{suite}"), "METRICS", None) or ())
    return frozenset(names)


def near_miss(name: str) -> str | None:
    """The known metric ``name`` nearly but not exactly is (a typo), or None: a name a built-in suite
    reports (``p99_batch_latency_ms``, ``p50_latency_us``) is its own, however close to CONTRACT's."""
    if name in KNOWN_METRICS or name in builtin_metrics():
        return None
    close = difflib.get_close_matches(name, KNOWN_METRICS, n=1, cutoff=0.8)
    return close[0] if close else None


def metric_name(entry: str) -> str:
    """The metric name of a primary entry: ``suite/metric[case]`` (either qualifier optional) → ``metric``."""
    m = QUALIFIED.match(entry)
    return m.group("name") if m else entry


def declared_entries(doc: Any) -> Iterator[tuple[tuple[Any, ...], str]]:
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
    for path, entry in declared_entries(doc):
        name = metric_name(entry)
        close = near_miss(name)
        if close:
            yield path, f"unknown metric {name!r} (did you mean {close!r}?)"


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
            m = QUALIFIED.match(entry) if isinstance(entry, str) else None
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


def rule_reported_metrics(doc: Any) -> Iterator[Finding]:
    """Extension: a primary or secondary qualified by a suite that runs one of benchrun's own suites
    (``gemm/ttft_ms``) names a metric that suite may report — its module's ``METRICS``, which the suite
    refuses to go beyond when it runs — or one of the telemetry rows written beside every replicate.
    Else nothing the run measures matches it: the entry met the required-metric rules by its name
    alone, and ``compare`` refused the pair only after both runs (PrimaryNotMeasured). A suite that
    runs the user's own command is not judged: what it reports is not known here."""
    from benchrun.spec.builtin_suites import PACKAGE, suite_module
    from benchrun.telemetry.summary import SAMPLED, SUMMARY_METRICS

    modules: dict[str, set[str | None]] = {}  # suite name -> the built-in modules it runs (None: another command)
    for _, suite in doc_suites(doc):
        command = suite.get("repoCommand")
        if isinstance(suite.get("name"), str):
            modules.setdefault(suite["name"], set()).add(suite_module(command) if isinstance(command, str) else None)
    for path, entry in declared_entries(doc):
        m = QUALIFIED.match(entry)
        suite, name = (m.group("suite"), m.group("name")) if m else (None, entry)
        if suite not in modules or None in modules[suite]:
            continue  # not qualified, no such suite (rule_primary_suites), or the user's own command
        reported: set[str] = set()
        for module in sorted(modules[suite]):  # type: ignore[arg-type]
            try:
                reported |= set(getattr(importlib.import_module(module), "METRICS", None) or ())
            except ImportError:  # not one of benchrun's suites: rule_builtin_suite says so
                reported = set()
                break
        telemetry = {*SUMMARY_METRICS, *(SAMPLED if "secondary" in path else ())}
        if not reported or name in reported or name in telemetry or name == FAILED_ROWS:
            continue
        if near_miss(name):
            continue  # a near miss of a known name: rule_metric_names says so
        runs = ", ".join(sorted(mod[len(PACKAGE) + 1:] for mod in modules[suite] if mod))
        then = ("compare would refuse every pair (PrimaryNotMeasured)" if "primary" in path
                else "it would never be shown as declared")
        yield path, (f"{entry!r}: suite {suite!r} runs {runs}, which never reports {name!r}"
                     f"{did_you_mean(name, sorted(reported))}; it reports {', '.join(sorted(reported))} (and the "
                     f"telemetry rows of every replicate): nothing the run measures would match this entry, so "
                     f"{then}; name one of those metrics")


def rule_margin_metrics(doc: Any) -> Iterator[Finding]:
    """Extension: a key of ``comparison.deltaPctByMetric`` / ``absoluteMarginByMetric`` is a bare
    metric name, the one the comparison looks its margin up by. A qualified key
    (``suite/metric[case]``) or a near miss of a declared or known metric would never match, and
    the metric would silently keep ``deltaPct``: both are errors. A name far from every known one
    may be a custom suite's metric and passes."""
    declared = {metric_name(entry) for _, entry in declared_entries(doc)}
    vocabulary = sorted(declared | set(KNOWN_METRICS))
    for field in MARGIN_KEYS:
        path = SPEC + ("comparison", field)
        margins = get(doc, path)
        for key in (margins if isinstance(margins, dict) else {}):
            if not isinstance(key, str) or key in declared or key in KNOWN_METRICS or key in builtin_metrics():
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
