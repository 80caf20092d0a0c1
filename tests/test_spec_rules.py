"""Admission rules of CONTRACT.md §2: one negative test per rule, each asserting the exact path."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchrun.spec import rules, validate_bytes
from benchrun.spec.placeholders import substitute

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "specs/examples/publication-inference-stack-b200.yaml"
EXAMPLES = sorted((ROOT / "specs/examples").glob("*.yaml")) + sorted((ROOT / "specs/local").glob("*.yaml"))
DELETE = object()


def load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


SEED_DOC = load(SEED)
EXAMPLE_DOCS = {p.name: load(p) for p in EXAMPLES}


def put(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    """Set (or delete, with DELETE) the value at ``path``; ``("x", "+")`` appends to list x."""
    cur: Any = doc
    for part in path[:-1]:
        cur = cur[part]
    last = path[-1]
    if value is DELETE:
        del cur[last]
    elif last == "+":
        cur.append(value)
    else:
        cur[last] = value


def without(doc: dict[str, Any], path: tuple[Any, ...], item: Any) -> list[Any]:
    cur: Any = doc
    for part in path:
        cur = cur[part]
    assert item in cur, f"{item} not in {path}"
    return [x for x in cur if x != item]


def errors_of(doc: Any) -> list[Any]:
    [result] = validate_bytes(yaml.safe_dump(doc, sort_keys=False).encode(), "t.yaml")
    return result.errors


def paths_of(doc: Any) -> set[str]:
    return {e.path for e in errors_of(doc)}


S = ("spec",)
LAYER0_SUITE0 = S + ("layers", 0, "suites", 0)

# (id, [(path, value), ...] applied to the seed, the one error path expected)
CASES: list[tuple[str, list[tuple[tuple[Any, ...], Any]], str]] = [
    # enumerations
    ("benchmark-class", [(S + ("intent", "benchmarkClass"), "gold_grade")], "spec.intent.benchmarkClass"),
    ("workload-type", [(S + ("intent", "workloadType"), "serving")], "spec.intent.workloadType"),
    ("cadence", [(S + ("intent", "cadence"), "weekly")], "spec.intent.cadence"),
    ("scheduler-path", [(S + ("intent", "schedulerPath"), "volcano")], "spec.intent.schedulerPath"),
    ("layer-name", [(S + ("layers", 0, "name"), "macro")], "spec.layers[0].name"),
    ("layers-all-three", [(S + ("layers", 2), DELETE)], "spec.layers"),
    ("layer-enabled", [(S + ("layers", i, "enabled"), False) for i in range(3)], "spec.layers"),
    ("enabled-layer-suites", [(S + ("layers", 1, "suites"), [])], "spec.layers[1].suites"),
    ("variable-under-test", [(S + ("comparison", "variableUnderTest"), "weather")], "spec.comparison.variableUnderTest"),
    # workload frozen
    (
        "workload-model-nonempty",
        [(S + ("workload", "model"), ""), (S + ("comparison", "controls", "fixed", "model"), "")],
        "spec.workload.model",
    ),
    ("workload-precision-nonempty", [(S + ("workload", "precision"), " "), (S + ("comparison", "controls", "fixed", "precision"), " ")], "spec.workload.precision"),
    (
        "mix-nonempty",
        [(S + ("workload", "sequenceLengthMix"), []), (S + ("comparison", "controls", "fixed", "sequenceLengthMix"), [])],
        "spec.workload.sequenceLengthMix",
    ),
    (
        "mix-positive-tokens",
        [
            (S + ("workload", "sequenceLengthMix", 0, "inputTokens"), 0),
            (S + ("comparison", "controls", "fixed", "sequenceLengthMix"), "[{0/128@0.7},{1024/256@0.3}]"),
        ],
        "spec.workload.sequenceLengthMix[0].inputTokens",
    ),
    (
        "mix-positive-weight",
        [
            (S + ("workload", "sequenceLengthMix", 1, "weight"), -0.3),
            (S + ("comparison", "controls", "fixed", "sequenceLengthMix"), [
                {"inputTokens": 512, "outputTokens": 128, "weight": 0.7},
                {"inputTokens": 1024, "outputTokens": 256, "weight": -0.3},
            ]),
        ],
        # the list form in controls.fixed is checked entry by entry like the workload's
        ("spec.workload.sequenceLengthMix[1].weight", "spec.comparison.controls.fixed.sequenceLengthMix[1].weight"),
    ),
    (
        "mix-weights-sum",
        [
            (S + ("workload", "sequenceLengthMix", 0, "weight"), 0.6),
            (S + ("comparison", "controls", "fixed", "sequenceLengthMix"), "[{512/128@0.6},{1024/256@0.3}]"),
        ],
        "spec.workload.sequenceLengthMix",
    ),
    ("fixed-value-differs", [(S + ("comparison", "controls", "fixed", "precision"), "fp8")], "spec.comparison.controls.fixed.precision"),
    ("fixed-key-missing", [(S + ("comparison", "controls", "fixed", "batchingPolicy"), DELETE)], "spec.comparison.controls.fixed.batchingPolicy"),
    (
        "fixed-compact-mix-differs",
        [(S + ("comparison", "controls", "fixed", "sequenceLengthMix"), "[{512/128@0.6},{1024/256@0.4}]")],
        "spec.comparison.controls.fixed.sequenceLengthMix",
    ),
    (
        "fixed-compact-mix-unreadable",
        [(S + ("comparison", "controls", "fixed", "sequenceLengthMix"), "512/128 x0.7")],
        "spec.comparison.controls.fixed.sequenceLengthMix",
    ),
    ("one-variable", [(S + ("comparison", "controls", "compareOneVariableAtATime"), False)], "spec.comparison.controls.compareOneVariableAtATime"),
    ("fixed-across-trials", [(S + ("workload", "fixedAcrossTrials", "+"), "visibleGpuShape")], "spec.workload.fixedAcrossTrials[5]"),
    # metrics
    ("inference-enabled", [(S + ("metrics", "inference", "enabled"), False)], "spec.metrics.inference.enabled"),
    ("inference-primary", [(S + ("metrics", "inference", "primary"), without(SEED_DOC, S + ("metrics", "inference", "primary"), "jitter_ms"))], "spec.metrics.inference.primary"),
    (
        "inference-cost-metric",
        [(S + ("metrics", "inference", "primary"), ["ttft_ms", "tokens_per_second", "p99_latency_ms", "jitter_ms"])],
        "spec.metrics.inference.primary",
    ),
    ("inference-section", [(S + ("metrics", "inference"), DELETE)], "spec.metrics.inference"),
    # trials
    ("min-replicates", [(S + ("trials", "minReplicates"), 2)], "spec.trials.minReplicates"),
    ("min-replicates-integer", [(S + ("trials", "minReplicates"), 3.5)], "spec.trials.minReplicates"),
    ("confidence-upper", [(S + ("trials", "confidenceLevel"), 1.0)], "spec.trials.confidenceLevel"),
    ("confidence-lower", [(S + ("trials", "confidenceLevel"), 0.5)], "spec.trials.confidenceLevel"),
    ("outlier-method", [(S + ("trials", "outlierPolicy", "method"), "iqr")], "spec.trials.outlierPolicy.method"),
    ("outlier-action", [(S + ("trials", "outlierPolicy", "action"), "drop")], "spec.trials.outlierPolicy.action"),
    ("report-distributions", [(S + ("trials", "report", "distributions"), False)], "spec.trials.report.distributions"),
    ("report-intervals", [(S + ("trials", "report", "confidenceIntervals"), False)], "spec.trials.report.confidenceIntervals"),
    ("report-rank-outliers", [(S + ("trials", "report", "rankLevelOutliers"), False)], "spec.trials.report.rankLevelOutliers"),
    # bottleneck analysis
    ("taxonomy", [(S + ("bottleneckAnalysis", "taxonomy"), without(SEED_DOC, S + ("bottleneckAnalysis", "taxonomy"), "comm_bound"))], "spec.bottleneckAnalysis.taxonomy"),
    ("overheads", [(S + ("bottleneckAnalysis", "decomposeOverheads"), ["compute", "communication", "orchestration"])], "spec.bottleneckAnalysis.decomposeOverheads"),
    ("instrumentation", [(S + ("bottleneckAnalysis", "instrumentation", "input_bound"), [])], "spec.bottleneckAnalysis.instrumentation.input_bound"),
    # distributed
    ("rank-visibility", [(S + ("distributed", "requireRankLevelVisibility"), False)], "spec.distributed.requireRankLevelVisibility"),
    ("collectives", [(S + ("distributed", "collectives"), ["latency", "outliers"])], "spec.distributed.collectives"),
    (
        "node-diagnosis",
        [(S + ("distributed", "nodeDiagnosis", "validate"), without(SEED_DOC, S + ("distributed", "nodeDiagnosis", "validate"), "nvlink_health"))],
        "spec.distributed.nodeDiagnosis.validate",
    ),
    ("remediation", [(S + ("distributed", "nodeDiagnosis", "remediation"), ["isolate_bad_node"])], "spec.distributed.nodeDiagnosis.remediation"),
    # observability
    (
        "join-keys-base",
        [(S + ("observability", "correlation", "stableJoinKeys"), without(SEED_DOC, S + ("observability", "correlation", "stableJoinKeys"), "pod_uid"))],
        "spec.observability.correlation.stableJoinKeys",
    ),
    (
        "join-keys-inference",
        [(S + ("observability", "correlation", "stableJoinKeys"), without(SEED_DOC, S + ("observability", "correlation", "stableJoinKeys"), "trace_id"))],
        "spec.observability.correlation.stableJoinKeys",
    ),
    (
        "number-lineage",
        [(S + ("observability", "correlation", "publishedNumberLineage", "querySpecCaptured"), False)],
        "spec.observability.correlation.publishedNumberLineage.querySpecCaptured",
    ),
    ("service-telemetry", [(S + ("observability", "telemetrySources", "service"), [])], "spec.observability.telemetrySources.service"),
    (
        "infrastructure-telemetry",
        [(S + ("observability", "telemetrySources", "infrastructure"), without(SEED_DOC, S + ("observability", "telemetrySources", "infrastructure"), "ping-exporter"))],
        "spec.observability.telemetrySources.infrastructure",
    ),
    ("scheduler-telemetry-events", [(S + ("observability", "telemetrySources", "scheduler"), ["kueue", "slinky"])], "spec.observability.telemetrySources.scheduler"),
    ("scheduler-telemetry-kueue", [(S + ("observability", "telemetrySources", "scheduler"), ["kubernetes_events", "slinky"])], "spec.observability.telemetrySources.scheduler"),
    (
        "playbooks",
        [(S + ("observability", "scenarioPlaybooks"), without(SEED_DOC, S + ("observability", "scenarioPlaybooks"), "distributed_straggler"))],
        "spec.observability.scenarioPlaybooks",
    ),
    # provenance and execution policy
    ("capture-flags", [(S + ("provenance", "capture", "auditTrail"), False)], "spec.provenance.capture.auditTrail"),
    ("signing-required", [(S + ("provenance", "signing", "required"), False)], "spec.provenance.signing.required"),
    ("signing-backend", [(S + ("provenance", "signing", "backend"), DELETE)], "spec.provenance.signing.backend"),
    ("signing-attestation", [(S + ("provenance", "signing", "attestationFormat"), "")], "spec.provenance.signing.attestationFormat"),
    ("publication-policy", [(S + ("executionPolicy", "publicationGrade", "fixedTopology"), False)], "spec.executionPolicy.publicationGrade.fixedTopology"),
    # sinks
    ("raw-store", [(S + ("sinks", "rawArtifacts", "store"), "")], "spec.sinks.rawArtifacts.store"),
    ("raw-path-template", [(S + ("sinks", "rawArtifacts", "pathTemplate"), DELETE)], "spec.sinks.rawArtifacts.pathTemplate"),
    ("raw-retention-class", [(S + ("sinks", "rawArtifacts", "retentionClass"), DELETE)], "spec.sinks.rawArtifacts.retentionClass"),
    ("raw-artifacts", [(S + ("sinks", "rawArtifacts", "artifacts"), ["logs", "profiler_reports", "manifests"])], "spec.sinks.rawArtifacts.artifacts"),
    ("path-template-placeholder", [(S + ("sinks", "rawArtifacts", "pathTemplate"), "s3://b/${RUNID}/")], "spec.sinks.rawArtifacts.pathTemplate"),
    ("hot-retention", [(S + ("sinks", "hotMetrics", "retentionDays"), 0)], "spec.sinks.hotMetrics.retentionDays"),
    ("hot-max-series", [(S + ("sinks", "hotMetrics", "cardinalityBudget", "maxActiveSeries"), 0)], "spec.sinks.hotMetrics.cardinalityBudget.maxActiveSeries"),
    (
        "hot-drop-dimensions",
        [(S + ("sinks", "hotMetrics", "cardinalityBudget", "dropDimensions"), ["request_id", "prompt_hash"])],
        "spec.sinks.hotMetrics.cardinalityBudget.dropDimensions",
    ),
    ("facts-base", [(S + ("sinks", "curatedWarehouse", "layout", "facts"), ["benchmark_run_fact", "serving_outcome_fact"])], "spec.sinks.curatedWarehouse.layout.facts"),
    ("facts-serving", [(S + ("sinks", "curatedWarehouse", "layout", "facts"), ["benchmark_run_fact", "telemetry_slice_fact"])], "spec.sinks.curatedWarehouse.layout.facts"),
    (
        "dimensions",
        [(S + ("sinks", "curatedWarehouse", "layout", "dimensions"), without(SEED_DOC, S + ("sinks", "curatedWarehouse", "layout", "dimensions"), "workload_dim"))],
        "spec.sinks.curatedWarehouse.layout.dimensions",
    ),
    ("retention-positive", [(S + ("sinks", "curatedWarehouse", "retention", "hotDays"), 0)], "spec.sinks.curatedWarehouse.retention.hotDays"),
    ("retention-hot-warm", [(S + ("sinks", "curatedWarehouse", "retention", "hotDays"), 200)], "spec.sinks.curatedWarehouse.retention.hotDays"),
    ("retention-warm-cold", [(S + ("sinks", "curatedWarehouse", "retention", "warmDays"), 1000)], "spec.sinks.curatedWarehouse.retention.warmDays"),
    ("warehouse-lineage", [(S + ("sinks", "curatedWarehouse", "lineage", "manifestDigestColumn"), False)], "spec.sinks.curatedWarehouse.lineage.manifestDigestColumn"),
    # automation
    ("ci-boolean", [(S + ("automation", "ci", "canary"), "yes please")], "spec.automation.ci.canary"),
    ("ci-present", [(S + ("automation", "ci", "preRelease"), DELETE)], "spec.automation.ci.preRelease"),
    # placeholders and argv
    ("placeholder-unknown", [(LAYER0_SUITE0 + ("repoCommand",), "run.sh --id ${RUNID}")], "spec.layers[0].suites[0].repoCommand"),
    ("repo-command-quotes", [(LAYER0_SUITE0 + ("repoCommand",), "run.sh 'unclosed")], "spec.layers[0].suites[0].repoCommand"),
    ("repo-command-blank", [(LAYER0_SUITE0 + ("repoCommand",), "   ")], "spec.layers[0].suites[0].repoCommand"),
    # structure: 13 required sections, unknown keys, document header
    ("section-required", [(S + ("sinks",), DELETE)], "spec.sinks"),
    ("section-unknown", [(S + ("extras",), {"a": 1})], "spec.extras"),
    ("api-version", [(("apiVersion",), "benchmarking.aisp.dev/v1")], "apiVersion"),
    ("kind", [(("kind",), "BenchRun")], "kind"),
    ("metadata-name", [(("metadata", "name"), "Not_A_Label")], "metadata.name"),
    # suite names and the additive extensions
    ("suite-name-unique", [(S + ("layers", 1, "suites", 0, "name"), "nccl-allreduce")], "spec.layers[1].suites[0].name"),
    ("suite-name-safe", [(LAYER0_SUITE0 + ("name",), "../etc")], "spec.layers[0].suites[0].name"),
    ("suite-replicates", [(LAYER0_SUITE0 + ("replicates",), 3)], "spec.layers[0].suites[0].replicates"),
    ("suite-timeout", [(LAYER0_SUITE0 + ("timeoutSeconds",), 0)], "spec.layers[0].suites[0].timeoutSeconds"),
    ("suite-parameter-shape", [(LAYER0_SUITE0 + ("parameters",), {"nested": {"a": 1}})], "spec.layers[0].suites[0].parameters.nested"),
    ("slo-key", [(S + ("metrics", "inference", "slo"), {"p99_ms": 5.0})], "spec.metrics.inference.slo.p99_ms"),
    ("slo-positive", [(S + ("metrics", "inference", "slo"), {"ttft_ms": -1})], "spec.metrics.inference.slo.ttft_ms"),
    ("pricing-nodes", [(S + ("metrics", "inference", "pricing"), {"pricePerNodeHourUsd": 1.0, "nodes": 0})], "spec.metrics.inference.pricing.nodes"),
    ("pricing-price", [(S + ("metrics", "inference", "pricing"), {"pricePerNodeHourUsd": 0, "nodes": 1})], "spec.metrics.inference.pricing.pricePerNodeHourUsd"),
    ("delta-pct", [(S + ("comparison", "deltaPct"), -1.0)], "spec.comparison.deltaPct"),
    ("delta-pct-by-metric", [(S + ("comparison", "deltaPctByMetric"), {"ttft_ms": "5%"})], "spec.comparison.deltaPctByMetric.ttft_ms"),
]


def apply(doc: dict[str, Any], changes: list[tuple[tuple[Any, ...], Any]]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for path, value in changes:
        put(out, path, value if value is DELETE else copy.deepcopy(value))
    return out


def test_seed_example_is_valid() -> None:
    assert errors_of(SEED_DOC) == []


@pytest.mark.parametrize("name,changes,expected", CASES, ids=[c[0] for c in CASES])
def test_one_rule_broken_reports_exactly_its_path(name: str, changes: list[Any], expected: str | tuple[str, ...]) -> None:
    errors = errors_of(apply(SEED_DOC, changes))
    assert {e.path for e in errors} == ({expected} if isinstance(expected, str) else set(expected)), [str(e) for e in errors]
    assert all(e.message and e.line is not None and e.line >= 1 for e in errors)


def test_training_rules_on_the_training_example() -> None:
    doc = EXAMPLE_DOCS["training-llama-8b-pretrain-h100.yaml"]
    assert errors_of(doc) == []
    assert paths_of(apply(doc, [(S + ("metrics", "training", "enabled"), False)])) == {"spec.metrics.training.enabled"}
    primary = without(doc, S + ("metrics", "training", "primary"), "mfu_pct")
    assert paths_of(apply(doc, [(S + ("metrics", "training", "primary"), primary)])) == {"spec.metrics.training.primary"}
    assert paths_of(apply(doc, [(S + ("metrics", "training"), DELETE)])) == {"spec.metrics.training"}
    keys = without(doc, S + ("observability", "correlation", "stableJoinKeys"), "rank_id")
    assert paths_of(apply(doc, [(S + ("observability", "correlation", "stableJoinKeys"), keys)])) == {
        "spec.observability.correlation.stableJoinKeys"
    }
    facts = without(doc, S + ("sinks", "curatedWarehouse", "layout", "facts"), "training_outcome_fact")
    assert paths_of(apply(doc, [(S + ("sinks", "curatedWarehouse", "layout", "facts"), facts)])) == {
        "spec.sinks.curatedWarehouse.layout.facts"
    }
    # a training run needs no inference metrics, request join keys or serving facts
    assert "request_id" not in doc["spec"]["observability"]["correlation"]["stableJoinKeys"]
    assert "serving_outcome_fact" not in doc["spec"]["sinks"]["curatedWarehouse"]["layout"]["facts"]


def test_mixed_needs_both_metric_sets_and_all_join_keys() -> None:
    doc = EXAMPLE_DOCS["mixed-train-and-serve-b200.yaml"]
    assert errors_of(doc) == []
    assert paths_of(apply(doc, [(S + ("metrics", "training", "enabled"), False)])) == {"spec.metrics.training.enabled"}
    assert paths_of(apply(doc, [(S + ("metrics", "inference", "enabled"), False)])) == {"spec.metrics.inference.enabled"}
    keys = without(doc, S + ("observability", "correlation", "stableJoinKeys"), "rank_id")
    assert paths_of(apply(doc, [(S + ("observability", "correlation", "stableJoinKeys"), keys)])) == {
        "spec.observability.correlation.stableJoinKeys"
    }


def test_realism_grade_policy() -> None:
    doc = EXAMPLE_DOCS["realism-inference-shared-h100.yaml"]
    assert errors_of(doc) == []
    changed = apply(doc, [(S + ("executionPolicy", "realismGrade", "multiTenantScenarios"), False)])
    assert paths_of(changed) == {"spec.executionPolicy.realismGrade.multiTenantScenarios"}
    changed = apply(doc, [(S + ("executionPolicy", "realismGrade", "captureClusterContext"), False)])
    assert paths_of(changed) == {"spec.executionPolicy.realismGrade.captureClusterContext"}
    # realism grade does not need signing; the seed (publication grade) does
    assert doc["spec"]["provenance"]["signing"] == {"required": False}


def test_scheduler_telemetry_follows_the_scheduler_path() -> None:
    doc = apply(SEED_DOC, [(S + ("intent", "schedulerPath"), "kueue"), (S + ("observability", "telemetrySources", "scheduler"), ["kubernetes_events", "kueue"])])
    assert errors_of(doc) == []
    doc = apply(doc, [(S + ("intent", "schedulerPath"), "slinky")])
    errors = errors_of(doc)
    assert [(e.path, e.message.split(" (")[0]) for e in errors] == [
        ("spec.observability.telemetrySources.scheduler", "must include slinky")
    ]


def test_every_error_is_collected_in_one_pass() -> None:
    changes = [c for _, cs, _ in CASES[:3] for c in cs] + [(S + ("trials", "minReplicates"), 1), (S + ("sinks", "hotMetrics", "retentionDays"), 0)]
    paths = paths_of(apply(SEED_DOC, changes))
    assert paths == {
        "spec.intent.benchmarkClass",
        "spec.intent.workloadType",
        "spec.intent.cadence",
        "spec.trials.minReplicates",
        "spec.sinks.hotMetrics.retentionDays",
    }


def test_messages_name_the_fix() -> None:
    doc = apply(SEED_DOC, [(S + ("comparison", "controls", "fixed", "sequenceLengthMix"), "[{512/128@0.6},{1024/256@0.4}]")])
    [error] = errors_of(doc)
    assert "[{512/128@0.7},{1024/256@0.3}]" in error.message
    doc = apply(SEED_DOC, [(LAYER0_SUITE0 + ("repoCommand",), "run.sh --id ${RUN_IDD}")])
    [error] = errors_of(doc)
    assert "${RUN_IDD}" in error.message and "did you mean 'RUN_ID'" in error.message
    doc = apply(SEED_DOC, [(S + ("intent", "cadence"), "prerelease")])
    [error] = errors_of(doc)
    assert "did you mean 'pre_release'" in error.message


def test_compact_mix_parser() -> None:
    assert rules.parse_compact_mix("[{512/128@0.7},{1024/256@0.3}]") == [(512, 128, 0.7), (1024, 256, 0.3)]
    assert rules.parse_compact_mix(" [ { 512 / 128 @ .7 } , {1024/256@3e-1} ] ") == [(512, 128, 0.7), (1024, 256, 0.3)]
    for bad in ("", "[]", "{512/128@0.7}", "[{512/128}]", "[{a/b@c}]", "[{512/128@0.7}{1/1@0.3}]"):
        with pytest.raises(ValueError):
            rules.parse_compact_mix(bad)


def test_compact_mix_equals_list_form() -> None:
    doc = apply(SEED_DOC, [(S + ("comparison", "controls", "fixed", "sequenceLengthMix"), copy.deepcopy(SEED_DOC["spec"]["workload"]["sequenceLengthMix"]))])
    assert errors_of(doc) == []
    doc = apply(SEED_DOC, [(S + ("comparison", "controls", "fixed", "sequenceLengthMix"), "[{512/128@0.70},{1024/256@0.30}]")])
    assert errors_of(doc) == []


def test_every_rule_cites_its_source() -> None:
    for rule in rules.RULES:
        doc = rule.__doc__ or ""
        assert doc.startswith(("CONTRACT §2", "Extension", "Suite names")) or "CONTRACT" in doc, rule.__name__


# -- property tests ---------------------------------------------------------------------------

# Mutations that break exactly one rule in every example (publication or realism, any type).
GENERIC = [c for c in CASES if c[0] in {
    "min-replicates", "confidence-upper", "outlier-method", "report-distributions", "one-variable",
    "overheads", "rank-visibility", "collectives", "remediation", "number-lineage", "service-telemetry",
    "capture-flags", "hot-retention", "hot-max-series", "dimensions", "retention-hot-warm",
    "warehouse-lineage", "ci-present", "placeholder-unknown", "section-unknown", "api-version",
    "suite-timeout", "delta-pct", "layers-all-three", "fixed-value-differs", "fixed-key-missing",
    "fixed-compact-mix-unreadable", "cadence", "variable-under-test",
}]
assert len(GENERIC) == 29


def _shuffle_keys(value: Any, rnd: Any) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: _shuffle_keys(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [_shuffle_keys(v, rnd) for v in value]
    return value


# the generic cases edit layer 0's first suite: the examples that have one (a spec may list an
# empty, disabled micro layer, as specs/local/serving.yaml does)
LAYER0_EXAMPLES = sorted(n for n, d in EXAMPLE_DOCS.items() if d["spec"]["layers"][0].get("suites"))


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(LAYER0_EXAMPLES), st.sampled_from(GENERIC), st.randoms(use_true_random=False), st.booleans())
def test_property_one_broken_rule_in_any_example(name: str, case: Any, rnd: Any, flow: bool) -> None:
    _, changes, expected = case
    doc = apply(EXAMPLE_DOCS[name], changes)
    text = yaml.safe_dump(_shuffle_keys(doc, rnd), sort_keys=False, default_flow_style=flow or None)
    [result] = validate_bytes(text.encode(), name)
    assert {e.path for e in result.errors} == {expected}, [str(e) for e in result.errors]


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20)
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=12,
)


def _all_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _all_paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _all_paths(v, prefix + (i,))
    return out


@pytest.mark.slow
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(EXAMPLE_DOCS)), st.data())
def test_property_mutated_examples_always_give_a_result(name: str, data: Any) -> None:
    doc = copy.deepcopy(EXAMPLE_DOCS[name])
    paths = _all_paths(doc)
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths))
        action = data.draw(st.sampled_from(["replace", "delete", "rename"]))
        try:
            parent: Any = doc
            for part in path[:-1]:
                parent = parent[part]
            if action == "replace":
                parent[path[-1]] = data.draw(values)
            elif action == "delete":
                del parent[path[-1]]
            elif isinstance(parent, dict):
                parent[path[-1] + data.draw(st.text(min_size=1, max_size=2))] = parent.pop(path[-1])
        except (KeyError, IndexError, TypeError):
            pass  # an earlier mutation removed this path
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    results = validate_bytes(text.encode(), name)
    assert len(results) == 1
    result = results[0]
    assert result.valid == (not result.errors)
    for error in result.errors:
        assert isinstance(error.path, str) and error.path and error.message
        assert error.line is None or error.line >= 1


@settings(max_examples=150, deadline=None)
@given(values)
def test_property_generated_documents_always_give_a_result(value: Any) -> None:
    text = yaml.safe_dump(value, allow_unicode=True)
    results = validate_bytes(text.encode(), "gen.yaml")
    assert results and all(not r.valid for r in results)
    assert all(r.errors for r in results)


def test_quote_error_and_unknown_placeholder_are_both_reported() -> None:
    doc = apply(SEED_DOC, [(LAYER0_SUITE0 + ("repoCommand",), "run.sh --host ${HOST} 'unclosed")])
    messages = [e.message for e in errors_of(doc)]
    assert len(messages) == 2
    assert messages[0].startswith("cannot be split into arguments")
    assert messages[1].startswith("unknown placeholder ${HOST} (did you mean 'HOSTS'?)")


def test_missing_list_item_names_a_likely_misspelling() -> None:
    keys = [k if k != "trace_id" else "traceid" for k in SEED_DOC["spec"]["observability"]["correlation"]["stableJoinKeys"]]
    [error] = errors_of(apply(SEED_DOC, [(S + ("observability", "correlation", "stableJoinKeys"), keys)]))
    assert error.message == "must include trace_id for workloadType inference (misspelt as 'traceid'?)"


def test_pathological_values_are_checked_in_linear_time() -> None:
    # Regexes that backtrack (or rescan from every "${") took minutes to hours on inputs like
    # these, well inside the 1 MiB a spec may have; now each document takes milliseconds.
    # The bound is loose on purpose: it only catches quadratic behaviour, not a slow machine
    # (CPU seconds, not wall: a loaded CI host stretched one case past 10 s of wall time).
    mix_path = S + ("comparison", "controls", "fixed", "sequenceLengthMix")
    cases = [
        ([(mix_path, "[{512/128@" + "9" * 200_000 + "x}]")], "spec.comparison.controls.fixed.sequenceLengthMix"),
        ([(mix_path, "[{512/128@0.7}" + " " * 200_000 + "x]")], "spec.comparison.controls.fixed.sequenceLengthMix"),
        ([(LAYER0_SUITE0 + ("repoCommand",), "run.sh " + "${]" * 100_000)], None),  # "]" keeps the flow depth low
        ([(LAYER0_SUITE0 + ("repoCommand",), "run.sh " + "${X]" * 50_000 + "}")], "spec.layers[0].suites[0].repoCommand"),
    ]
    for changes, expected in cases:
        start = time.process_time()
        paths = paths_of(apply(SEED_DOC, changes))
        assert time.process_time() - start < 10
        assert paths == ({expected} if expected else set())
    start = time.process_time()
    assert substitute("-${RUN_ID}" + "${]" * 100_000, {"RUN_ID": "r"}) == "-r" + "${]" * 100_000
    assert time.process_time() - start < 10


def test_missing_inference_primaries_are_named_exactly() -> None:
    # "must include tokens_per_second, p99_latency_ms, jitter_ms, cost_per_token_usd or
    # cost_per_request_usd" read as "any one of"; all three and a cost metric are needed
    path = S + ("metrics", "inference", "primary")
    [error] = errors_of(apply(SEED_DOC, [(path, ["customer-serving-workflow/ttft_ms[c=4]"])]))
    assert error.path == "spec.metrics.inference.primary"
    assert error.message.startswith("lacks tokens_per_second, p99_latency_ms, jitter_ms and a cost metric "
                                    "(cost_per_token_usd or cost_per_request_usd); ")
    assert "needs every one of ttft_ms, tokens_per_second, p99_latency_ms, jitter_ms" in error.message
    [error] = errors_of(apply(SEED_DOC, [(path, ["ttft_ms", "tokens_per_second", "p99_latency_ms",
                                                 "cost_per_request_usd"])]))
    assert error.message.startswith("lacks jitter_ms; ")


def test_a_primary_qualified_by_a_suite_the_spec_does_not_run_is_an_error(canary_doc) -> None:
    """A qualified primary counted by its metric name only: nosuch/ttft_ms[c=4] satisfied the
    required-metric rule, and the run then gated nothing (no row of any suite matched it)."""
    path = S + ("metrics", "inference", "primary")
    primary = list(canary_doc["spec"]["metrics"]["inference"]["primary"])
    assert primary[0] == "serving_workflow/ttft_ms[c=4]"
    typo = apply(canary_doc, [(path, ["serving_workflw/ttft_ms[c=4]", *primary[1:]])])
    [error] = errors_of(typo)
    assert error.path == "spec.metrics.inference.primary[0]"
    assert error.message.startswith("'serving_workflw/ttft_ms[c=4]' names suite 'serving_workflw', which is not in "
                                    "spec.layers (did you mean 'serving_workflow'?): nothing the run measures would "
                                    "match it; qualify it with a suite the spec runs (")
    assert error.message.endswith(") or write the bare name 'ttft_ms'")
    # a suite of a disabled layer never runs: an error too (no spec gates on one; specs/ and tests have none)
    end_to_end = S + ("layers", 2)
    assert canary_doc["spec"]["layers"][2]["suites"][0]["name"] == "serving_workflow"
    disabled = apply(canary_doc, [(end_to_end + ("enabled",), False)])
    found = errors_of(disabled)
    assert {e.path for e in found} == {f"spec.metrics.inference.primary[{i}]" for i in range(len(primary))}
    assert found[0].message == ("'serving_workflow/ttft_ms[c=4]' names suite 'serving_workflow' of the disabled layer "
                                "'end_to_end': it never runs, so this primary would gate nothing; enable the layer or "
                                "gate on a suite that runs")
    # a disabled metrics family gates nothing: its entries are not checked; bare names never are
    from benchrun.spec.metric_names import rule_primary_suites

    assert list(rule_primary_suites(apply(disabled, [(S + ("metrics", "inference", "enabled"), False)]))) == []
    assert errors_of(apply(canary_doc, [(path, ["ttft_ms[c=4]", *primary[1:]])])) == []


def test_a_layer_missing_from_spec_layers_is_one_error_not_one_per_primary_of_its_suites():
    """The canary without its end_to_end layer: spec.layers says the layer is missing, and each of
    the six primaries qualified by serving_workflow said again that its suite was not in
    spec.layers (found by the property test on a random draw)."""
    from benchrun.spec.rules import check

    doc = yaml.safe_load((ROOT / "specs" / "local" / "canary.yaml").read_text())
    doc["spec"]["layers"] = [layer for layer in doc["spec"]["layers"] if layer["name"] != "end_to_end"]
    assert {".".join(map(str, path)) for path, _ in check(doc)} == {"spec.layers"}


def test_a_layer_name_that_is_not_a_string_is_a_finding_not_a_crash():
    """The property test's draw: spec.layers[0].name replaced by []; the suite rule hashed each
    layer's name and raised TypeError: unhashable type: 'list' (a crash, not a result)."""
    from benchrun.spec.validation import validate_bytes

    doc = yaml.safe_load((ROOT / "specs" / "local" / "canary.yaml").read_text())
    doc["spec"]["layers"][0]["name"] = []
    (result,) = validate_bytes(yaml.safe_dump(doc).encode(), "canary.yaml")
    assert not result.valid and any(e.path.startswith("spec.layers") for e in result.errors)


def test_a_primary_naming_a_metric_its_builtin_suite_never_reports_is_an_error(canary_doc) -> None:
    """gemm/ttft_ms met the inference rule by its name and validated; gemm reports TFLOP/s and call
    times, so no row ever matched it and compare refused every pair after both runs."""
    path = S + ("metrics", "inference", "primary")
    primary = list(canary_doc["spec"]["metrics"]["inference"]["primary"])
    [error] = errors_of(apply(canary_doc, [(path, ["gemm/ttft_ms", *primary[1:]])]))
    assert error.path == "spec.metrics.inference.primary[0]"
    assert error.message == ("'gemm/ttft_ms': suite 'gemm' runs gemm, which never reports 'ttft_ms'; it reports "
                             "p50_call_ms, p99_call_ms, tflops (and the telemetry rows of every replicate): nothing "
                             "the run measures would match this entry, so compare would refuse every pair "
                             "(PrimaryNotMeasured); name one of those metrics")
    # a near miss of what the suite reports is named
    [error] = errors_of(apply(canary_doc, [(path + ("+",), "gemm/tflop")]))
    assert "never reports 'tflop' (did you mean 'tflops'?)" in error.message
    # a secondary too, said for what it is
    second = S + ("metrics", "inference", "secondary")
    [error] = errors_of(apply(canary_doc, [(second + ("+",), "membw/tflops")]))
    assert error.path.startswith("spec.metrics.inference.secondary[")
    assert error.message.endswith("so it would never be shown as declared; name one of those metrics")
    # the end-to-end workflow measures one point: a sweep's capacity_at_slo is not one of its metrics
    [error] = errors_of(apply(canary_doc, [(path + ("+",), "serving_workflow/capacity_at_slo")]))
    assert "'serving_workflow' runs serving_workflow, which never reports 'capacity_at_slo'" in error.message
    # what the suites report, telemetry rows (and, as secondaries, the quantities they summarise) pass
    fine = ["gemm/tflops", "serving_sweep/capacity_at_slo", "fio/p99_clat_ms[randread]",
            "job_startup/launch_to_first_measurement_p50_s", "dataloader/gpu_utilization_pct_mean",
            "gemm/failed_replicates"]
    assert errors_of(apply(canary_doc, [(path, [*primary, *fine]),
                                        (second + ("+",), "gemm/cpu_utilization_pct")])) == []
    # a quantity is no row a primary can match (rows are its _mean, _p95)
    [error] = errors_of(apply(canary_doc, [(path + ("+",), "gemm/cpu_utilization_pct")]))
    assert "never reports 'cpu_utilization_pct'" in error.message
    # a suite that runs the user's own command reports what it reports: not judged
    mine = apply(canary_doc, [(S + ("layers", 0, "suites", 0, "repoCommand"), "python bench.py"),
                              (path + ("+",), "gemm/anything_at_all")])
    assert not any("never reports" in e.message for e in errors_of(mine))


def test_reported_metric_lists_agree_with_what_writes_the_rows() -> None:
    """The lists validate reads are the ones the code writes by: the serving headline's names, the
    telemetry summary's rows (every sampled quantity present), the comparison's failed-launch row."""
    from benchrun.loadgen.metrics import HEADLINE
    from benchrun.loadgen.params import HEADLINE_METRICS
    from benchrun.spec.metric_names import FAILED_ROWS
    from benchrun.stats.compare import FAILED_METRIC
    from benchrun.telemetry.summary import SAMPLED, SUMMARY_METRICS, summarise

    assert tuple(h[0] for h in HEADLINE) == HEADLINE_METRICS
    assert FAILED_ROWS == FAILED_METRIC
    from benchrun.telemetry.samples import Sample, samples_table

    table = samples_table(Sample(float(t), "test", "host", q, 1.0, "%", device_index=0)
                          for q in (*SAMPLED, "gpu_throttled") for t in range(4))
    written = {r["name"] for r in summarise(table)}
    assert written == set(SUMMARY_METRICS)
    # a declared sampled quantity covers rows the comparison reads as its (benchrun.stats.reading.declared)
    from benchrun.stats.family import parse_primary
    from benchrun.stats.reading import declared

    for q in SAMPLED:
        assert any(declared([parse_primary(f"gemm/{q}", field="secondary")], "gemm", "telemetry", row)
                   for row in SUMMARY_METRICS), q


def test_a_builtin_suite_reporting_a_metric_it_does_not_list_fails_the_replicate(tmp_path) -> None:
    """The suite's METRICS is what validate judges by: a suite that reports beyond it fails with the
    name (every suite test that expects an ok replicate thereby checks its list is complete)."""
    import json
    import os
    import subprocess
    import sys

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "listed.py").write_text(
        "from benchrun.suites._runtime import main\n"
        "METRICS = ('ok_ms',)\n"
        "def run(ctx):\n"
        "    ctx.add_metric('ok_ms', 1.0, 'ms', 'lower')\n"
        "    ctx.add_metric('other_ms', 2.0, 'ms', 'lower')\n"
        "if __name__ == '__main__':\n"
        "    main(run)\n")
    run_dir = tmp_path / "run"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": f"{pkg}{os.pathsep}{ROOT}",
           "BENCHRUN_RUN_ID": "t-listed", "BENCHRUN_RUN_DIR": str(run_dir), "BENCHRUN_SUITE": "listed",
           "BENCHRUN_REPLICATE": "1", "BENCHRUN_PARAMS": "{}"}
    proc = subprocess.run([sys.executable, "-m", "listed"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    doc = json.loads(next((run_dir / "structured").glob("*.json")).read_text())
    assert doc["status"] == "failed"
    assert doc["reason"] == ("RuntimeError: listed reported metric 'other_ms', which its module's METRICS does not "
                             "list (ok_ms): `benchrun validate` judges primaries by that list; add the name to it")


def test_a_builtin_suites_own_metric_is_no_typo_of_contracts_names(canary_doc) -> None:
    """dataloader's p99_batch_latency_ms, allreduce's p50_latency_us, fio's p99_clat_ms and the
    telemetry row gpu_utilization_pct_mean were refused as misspellings of CONTRACT's p99_latency_ms,
    p50_latency_ms and gpu_utilization_pct, as primaries and as margin keys."""
    path = S + ("metrics", "inference", "primary")
    primary = list(canary_doc["spec"]["metrics"]["inference"]["primary"])
    own = ["dataloader/p99_batch_latency_ms", "allreduce/p50_latency_us", "fio/p99_clat_ms", "p99_lat_ms",
           "gpu_utilization_pct_mean"]
    margins = {"p99_batch_latency_ms": 10, "p50_latency_us": 8, "gpu_utilization_pct_mean": 5}
    assert errors_of(apply(canary_doc, [(path, [*primary, *own]),
                                        (S + ("comparison", "deltaPctByMetric"), margins)])) == []
    # a real misspelling still is one
    [error] = errors_of(apply(canary_doc, [(path + ("+",), "p99_latncy_ms")]))
    assert error.message == "unknown metric 'p99_latncy_ms' (did you mean 'p99_latency_ms'?)"
