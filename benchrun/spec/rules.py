"""The admission rules of CONTRACT.md §2 that the model's types cannot say, one function each.

The model (:mod:`benchrun.spec.model`) already enforces the structure, the enumerations
and single-field bounds. Each function here takes the document *as written* (plain
data, camelCase keys; read through :mod:`benchrun.spec.docaccess`) and yields ``(path, message)`` for every violation it finds; all
rules always run, so every error is collected in one pass. A rule looks only at values
of the right type and skips the rest: a value of the wrong type is the model's error,
reported once.
"""

from __future__ import annotations

import difflib
import math
import shlex
from typing import Any, Callable, Iterable, Iterator

from benchrun.spec.docaccess import (
    SPEC,
    Finding,
    benchmark_class,
    did_you_mean,
    get,
    is_number,
    require_all,
    require_true,
    strings,
    suites,
    workload_type,
)
from benchrun.spec.builtin_suites import rule_builtin_suite
from benchrun.spec.comparison_rules import (
    rule_baseline_ref,
    rule_confirmation_max_pairs,
    rule_controls_fixed,
    rule_one_variable_at_a_time,
    rule_variable_under_test_resolves,
)
from benchrun.spec.metric_names import (  # noqa: F401 - rules.metric_name and the vocabulary, as before the split
    COST_METRICS,
    INFERENCE_PRIMARY,
    TRAINING_PRIMARY,
    metric_name,
    rule_margin_metrics,
    rule_metric_names,
    rule_primary_suites,
    rule_reported_metrics,
)
from benchrun.spec.mix import parse_compact_mix  # noqa: F401 - rules.parse_compact_mix, as before the split
from benchrun.spec.model import LAYER_NAMES, WORKLOAD_KEYS, Trials
from benchrun.spec.placeholders import KNOWN_NAMES, placeholder_names, unknown_placeholders

Rule = Callable[[dict[str, Any]], Iterable[Finding]]

TAXONOMY = ("compute_bound", "comm_bound", "input_bound", "control_plane_bound")
OVERHEADS = ("compute", "communication", "storage", "orchestration")
COLLECTIVES = ("latency", "bandwidth")
NODE_CHECKS = ("rdma_pathing", "gpu_nic_affinity", "pcie_link_health", "nvlink_health", "thermal_throttling")
REMEDIATION = ("isolate_bad_node", "cordon_problematic_node")
JOIN_KEYS = ("run_id", "benchmark_case_id", "scheduler_run_id", "job_uid", "pod_uid", "node_name", "gpu_uuid")
INFRA_TELEMETRY = (
    "dcgm-exporter",
    "nvlink-exporter",
    "node-pci-exporter",
    "ping-exporter",
    "node-problem-detector",
    "hpc-verification",
)
PLAYBOOKS = ("tail_latency_regression", "low_gpu_utilization", "distributed_straggler", "scheduler_backpressure")
CAPTURE_FLAGS = (
    "pinnedWorkloadSpec",
    "imageDigest",
    "driverCudaNcclRuntimeVersions",
    "hardwareTopology",
    "immutableRawArtifacts",
    "auditTrail",
)
PUBLICATION_FLAGS = ("dedicatedNodes", "stableBackgroundLoad", "fixedTopology", "topologyExclusiveScheduling")
REALISM_FLAGS = ("multiTenantScenarios", "captureClusterContext")
RAW_ARTIFACTS = ("logs", "traces", "profiler_reports", "manifests")
HOT_DROP = ("request_id", "trace_id")
FACTS = ("benchmark_run_fact", "telemetry_slice_fact")
DIMENSIONS = (
    "software_version_dim",
    "hardware_topology_dim",
    "cluster_region_dim",
    "workload_dim",
    "artifact_lineage_dim",
)
CORRELATION_LINEAGE = ("rawArtifactManifestDigest", "warehouseRowLineage", "querySpecCaptured")
WAREHOUSE_LINEAGE = ("publishedNumbersTraceableToRaw", "manifestDigestColumn", "workloadSpecDigestColumn")

# -- intent and layers ---------------------------------------------------------------------


def rule_scheduler_path(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: ``intent.schedulerPath`` contains ``kueue`` and/or ``slinky`` (or ``local``)."""
    value = get(doc, SPEC + ("intent", "schedulerPath"))
    if isinstance(value, str) and value.strip():
        if not any(word in value.lower() for word in ("kueue", "slinky", "local")):
            yield SPEC + ("intent", "schedulerPath"), (
                f"{value!r} names no scheduler path: use one containing 'kueue' and/or 'slinky' "
                "(e.g. 'slinky-kueue'), or 'local'"
            )


def rule_layers_complete(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: layers are micro, component and end_to_end, each listed exactly once."""
    layers = get(doc, SPEC + ("layers",))
    if not isinstance(layers, list):
        return
    names = [get(layer, ("name",)) for layer in layers]
    if any(name not in LAYER_NAMES for name in names):
        return  # a misspelt or missing layer name is the model's error, reported at that name
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in LAYER_NAMES:
            if name in seen:
                yield SPEC + ("layers", i, "name"), f"layer {name!r} is listed twice (first at spec.layers[{seen[name]}])"
            seen.setdefault(name, i)
    missing = [n for n in LAYER_NAMES if n not in seen]
    if missing:
        yield SPEC + ("layers",), f"must list all three layers micro, component, end_to_end; missing: {', '.join(missing)}"


def rule_layer_enabled(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: at least one layer is enabled."""
    layers = get(doc, SPEC + ("layers",))
    if not isinstance(layers, list) or not layers:
        return
    flags = [get(layer, ("enabled",)) for layer in layers]
    if all(flag is False for flag in flags):
        yield SPEC + ("layers",), "at least one layer must be enabled"


def rule_enabled_layer_has_suites(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: an enabled layer needs at least one suite (a disabled one may have none)."""
    layers = get(doc, SPEC + ("layers",))
    for i, layer in enumerate(layers if isinstance(layers, list) else []):
        if get(layer, ("enabled",)) is True and get(layer, ("suites",)) in (None, []):
            if isinstance(layer, dict):
                yield SPEC + ("layers", i, "suites"), "an enabled layer needs at least one suite (or set enabled: false)"


def rule_suite_names_unique(doc: Any) -> Iterator[Finding]:
    """Suite names are unique across layers: result files are named ``<run_id>_<suite>_r<k>``."""
    first: dict[str, str] = {}
    for path, suite in suites(doc):
        name = suite.get("name")
        if not isinstance(name, str):
            continue
        if ".." in name:
            yield path + ("name",), "must not contain '..' (it names files)"
        where = f"spec.layers[{path[2]}].suites[{path[4]}]"
        if name in first:
            yield path + ("name",), f"suite name {name!r} is used twice (first at {first[name]}); names must be unique"
        first.setdefault(name, where)


def rule_repo_command(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: ``repoCommand`` parses as argv (shlex) and uses only known ``${NAME}`` placeholders."""
    for path, suite in suites(doc):
        command = suite.get("repoCommand")
        if not isinstance(command, str) or not command.strip():
            continue
        where = path + ("repoCommand",)
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            yield where, f"cannot be split into arguments ({exc}); check the quotes"
        else:
            if not argv or not argv[0]:
                yield where, "names no program to run"
            else:
                yield from _env_command_findings(where, argv)
        for name in unknown_placeholders(command):
            yield where, f"unknown placeholder ${{{name}}}{did_you_mean(name, KNOWN_NAMES)}; known: {', '.join(sorted(KNOWN_NAMES))}"


def _env_command_findings(where: tuple[Any, ...], argv: list[str]) -> Iterator[Finding]:
    """A leading ``env NAME=value ...`` may set a suite's own variables, as ``env:`` may (the same
    names are refused), but not clear or unset what benchrun passes (``-i``, ``-u``, ``-``)."""
    from benchrun.spec.commandline import ENV_NAME, command_index
    from benchrun.spec.model import _check_env_name

    if argv[0] not in ("env", "/usr/bin/env", "/bin/env"):
        return
    at = command_index(argv)
    for word in argv[1:at or len(argv)]:
        if word in ("-i", "--ignore-environment", "-", "-u", "--unset") or word.startswith(("-u", "--unset=")):
            yield where, (f"`env {word}` would drop variables benchrun passes to every suite (its run, replicate, "
                          "parameters); set what the suite needs with the suite's env: map instead")
        elif "=" in word and not word.startswith("-"):
            name = word.split("=", 1)[0]
            if not ENV_NAME.match(name):
                # ${SUITE}=... would name the variable only at launch: BENCHRUN_PARAMS past this check
                yield where, (f"`env {name}=...`: a variable's name is written out as letters, digits and _ "
                              "(placeholders are substituted in values only); write NAME=value")
                continue
            try:
                _check_env_name(name)
            except ValueError as exc:
                yield where, f"`env {name}=...`: {exc}"
    if at is None:
        yield where, "the `env` prefix uses an option benchrun does not read, or names no program after it"


def rule_suite_replicates(doc: Any) -> Iterator[Finding]:
    """Extension: a suite's own ``replicates`` is at least ``trials.minReplicates``."""
    minimum = get(doc, SPEC + ("trials", "minReplicates"))
    if not isinstance(minimum, int) or isinstance(minimum, bool):
        return
    for path, suite in suites(doc):
        value = suite.get("replicates")
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value < minimum:
            yield path + ("replicates",), f"is {value}; it must be at least trials.minReplicates ({minimum})"


def rule_auto_replicates_bound(doc: Any) -> Iterator[Finding]:
    """Extension: ``trials.maxReplicates`` (the bound of ``replicates: auto``) is at least minReplicates;
    with ``replicates: auto`` and no maxReplicates, its default (10) is the bound checked."""
    trials = get(doc, SPEC + ("trials",))
    if not isinstance(trials, dict):
        return
    minimum, bound = trials.get("minReplicates"), trials.get("maxReplicates")
    default = "maxReplicates" not in trials and trials.get("replicates") == "auto"
    if default:
        bound = Trials.model_fields["max_replicates"].default
    if all(isinstance(v, int) and not isinstance(v, bool) for v in (minimum, bound)) and bound < minimum:
        said = " (the default: it is not written)" if default else ""
        yield SPEC + ("trials", "maxReplicates"), (f"is {bound}{said}; it must be at least trials.minReplicates "
                                                   f"({minimum}), the fewest replicates auto may plan")


# -- workload and comparison ---------------------------------------------------------------


def rule_mix_weights(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: ``workload.sequenceLengthMix`` weights sum to 1."""
    mix = get(doc, SPEC + ("workload", "sequenceLengthMix"))
    if not isinstance(mix, list) or not mix:
        return
    weights = [get(entry, ("weight",)) for entry in mix]
    if all(is_number(w) and w > 0 for w in weights):
        total = math.fsum(weights)
        if abs(total - 1.0) > 1e-6:
            yield SPEC + ("workload", "sequenceLengthMix"), f"weights sum to {total:g}; they must sum to 1"


def rule_fixed_across_trials(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: ``workload.fixedAcrossTrials`` names only workload keys."""
    path = SPEC + ("workload", "fixedAcrossTrials")
    names = get(doc, path)
    allowed = [k for k in WORKLOAD_KEYS if k != "fixedAcrossTrials"]
    for i, name in enumerate(names if isinstance(names, list) else []):
        if isinstance(name, str) and name not in allowed:
            yield path + (i,), (
                f"{name!r} is not a workload key{did_you_mean(name, allowed)}; allowed: {', '.join(allowed)} "
                "(site settings belong in suite parameters)"
            )


# -- metrics and trials --------------------------------------------------------------------


def rule_training_metrics(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: training or mixed needs ``metrics.training.enabled`` and the four training primaries."""
    wt = workload_type(doc)
    if wt not in ("training", "mixed"):
        return
    path = SPEC + ("metrics", "training")
    if not isinstance(get(doc, SPEC + ("metrics",)), dict):
        return
    if get(doc, path) is None:
        yield path, f"required for workloadType {wt} (enabled: true, primary: {', '.join(TRAINING_PRIMARY)})"
        return
    yield from require_true(doc, path, ("enabled",), f" for workloadType {wt}")
    primary = strings(get(doc, path + ("primary",)))
    if primary is None or all(metric_name(p) == p for p in primary):
        yield from require_all(doc, path + ("primary",), TRAINING_PRIMARY, f" for workloadType {wt}")
        return
    names = {metric_name(p) for p in primary}  # qualified entries (suite/metric[case]) count by name
    missing = [m for m in TRAINING_PRIMARY if m not in names]
    if missing:
        yield path + ("primary",), f"must include {', '.join(missing)} for workloadType {wt}"


def rule_inference_metrics(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: inference or mixed needs ``metrics.inference.enabled``, the four primaries and a cost metric."""
    wt = workload_type(doc)
    if wt not in ("inference", "mixed"):
        return
    path = SPEC + ("metrics", "inference")
    if not isinstance(get(doc, SPEC + ("metrics",)), dict):
        return
    if get(doc, path) is None:
        yield path, f"required for workloadType {wt} (enabled: true, primary: {', '.join(INFERENCE_PRIMARY)} and a cost metric)"
        return
    yield from require_true(doc, path, ("enabled",), f" for workloadType {wt}")
    if get(doc, path + ("primary",)) is None:  # without primaries a comparison gates nothing
        yield path + ("primary",), (f"required for workloadType {wt}: {', '.join(INFERENCE_PRIMARY)} and a cost metric "
                                    f"({' or '.join(COST_METRICS)}), the metrics that decide a comparison")
        return
    primary = strings(get(doc, path + ("primary",)))
    if primary is None:
        return
    primary = [metric_name(p) for p in primary]  # qualified entries (suite/metric[case]) count by name
    missing = [m for m in INFERENCE_PRIMARY if m not in primary]
    if not any(c in primary for c in COST_METRICS):
        missing.append(f"a cost metric ({' or '.join(COST_METRICS)})")
    if missing:
        lacks = missing[0] if len(missing) == 1 else f"{', '.join(missing[:-1])} and {missing[-1]}"
        yield path + ("primary",), (f"lacks {lacks}; workloadType {wt} needs every one of "
                                    f"{', '.join(INFERENCE_PRIMARY)} and one cost metric "
                                    f"({' or '.join(COST_METRICS)})")


def rule_trial_report(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: ``trials.report`` distributions, confidenceIntervals and rankLevelOutliers are true."""
    yield from require_true(doc, SPEC + ("trials", "report"), ("distributions", "confidenceIntervals", "rankLevelOutliers"))


# -- bottleneck analysis and distributed ------------------------------------------------------


def rule_taxonomy(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: ``bottleneckAnalysis.taxonomy`` ⊇ the four bottleneck classes."""
    yield from require_all(doc, SPEC + ("bottleneckAnalysis", "taxonomy"), TAXONOMY)


def rule_decompose_overheads(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: ``bottleneckAnalysis.decomposeOverheads`` ⊇ compute, communication, storage, orchestration."""
    yield from require_all(doc, SPEC + ("bottleneckAnalysis", "decomposeOverheads"), OVERHEADS)


def rule_instrumentation(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: ``bottleneckAnalysis.instrumentation`` is non-empty for each class of the taxonomy."""
    taxonomy = strings(get(doc, SPEC + ("bottleneckAnalysis", "taxonomy")))
    path = SPEC + ("bottleneckAnalysis", "instrumentation")
    inst = get(doc, path)
    if taxonomy is None or not isinstance(inst, dict):
        return
    for cls in taxonomy:
        sources = inst.get(cls)
        if sources is None or sources == []:
            others = [k for k in inst if k not in taxonomy]
            close = difflib.get_close_matches(cls, others, n=1, cutoff=0.6)
            hint = f" (is {close[0]!r} a misspelling of it?)" if close else ""
            yield path + (cls,), f"needs at least one instrumentation source for the class {cls!r}{hint}"


def rule_rank_visibility(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: ``distributed.requireRankLevelVisibility`` is true."""
    yield from require_true(doc, SPEC + ("distributed",), ("requireRankLevelVisibility",))


def rule_collectives(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: ``distributed.collectives`` ⊇ latency, bandwidth."""
    yield from require_all(doc, SPEC + ("distributed", "collectives"), COLLECTIVES)


def rule_node_diagnosis(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: ``distributed.nodeDiagnosis.validate`` ⊇ the five node checks."""
    yield from require_all(doc, SPEC + ("distributed", "nodeDiagnosis", "validate"), NODE_CHECKS)


def rule_remediation(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: ``distributed.nodeDiagnosis.remediation`` ⊇ isolate_bad_node, cordon_problematic_node."""
    yield from require_all(doc, SPEC + ("distributed", "nodeDiagnosis", "remediation"), REMEDIATION)


# -- observability -----------------------------------------------------------------------------


def rule_join_keys(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: join keys ⊇ the seven base keys, + rank_id (training/mixed), + request_id, trace_id (inference/mixed)."""
    wt = workload_type(doc)
    required = list(JOIN_KEYS)
    if wt in ("training", "mixed"):
        required.append("rank_id")
    if wt in ("inference", "mixed"):
        required += ["request_id", "trace_id"]
    why = f" for workloadType {wt}" if wt else ""
    yield from require_all(doc, SPEC + ("observability", "correlation", "stableJoinKeys"), required, why)


def rule_number_lineage(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: the three ``publishedNumberLineage`` flags are true."""
    yield from require_true(doc, SPEC + ("observability", "correlation", "publishedNumberLineage"), CORRELATION_LINEAGE)


def rule_service_telemetry(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: ``telemetrySources.service`` is non-empty."""
    path = SPEC + ("observability", "telemetrySources", "service")
    if get(doc, path) == []:
        yield path, "must name at least one service telemetry source (e.g. model_server_metrics)"


def rule_infrastructure_telemetry(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: ``telemetrySources.infrastructure`` ⊇ the six exporters."""
    yield from require_all(doc, SPEC + ("observability", "telemetrySources", "infrastructure"), INFRA_TELEMETRY)


def rule_scheduler_telemetry(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: scheduler telemetry has kubernetes_events, plus kueue / slinky when the scheduler path names them."""
    required = ["kubernetes_events"]
    path_value = get(doc, SPEC + ("intent", "schedulerPath"))
    if isinstance(path_value, str):
        required += [word for word in ("kueue", "slinky") if word in path_value.lower()]
    yield from require_all(
        doc, SPEC + ("observability", "telemetrySources", "scheduler"), required, f" (schedulerPath is {path_value!r})"
    )


def rule_playbooks(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: ``observability.scenarioPlaybooks`` ⊇ the four playbooks."""
    yield from require_all(doc, SPEC + ("observability", "scenarioPlaybooks"), PLAYBOOKS)


# -- provenance and execution policy -----------------------------------------------------------


def rule_provenance_capture(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: the six ``provenance.capture`` flags are true."""
    yield from require_true(doc, SPEC + ("provenance", "capture"), CAPTURE_FLAGS)


def rule_signing(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: publication grade needs ``signing.required``, a backend and an attestation format."""
    if benchmark_class(doc) != "publication_grade":
        return
    path = SPEC + ("provenance", "signing")
    if not isinstance(get(doc, path), dict):
        return
    yield from require_true(doc, path, ("required",), " for publication_grade")
    for key, example in (("backend", "sigstore"), ("attestationFormat", "in_toto")):
        value = get(doc, path + (key,))
        if value is None or (isinstance(value, str) and not value.strip()):
            yield path + (key,), f"must be set for publication_grade (e.g. {example})"


def rule_publication_policy(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: publication grade needs the four ``executionPolicy.publicationGrade`` flags true."""
    if benchmark_class(doc) == "publication_grade":
        yield from require_true(doc, SPEC + ("executionPolicy", "publicationGrade"), PUBLICATION_FLAGS, " for publication_grade")


def rule_realism_policy(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: realism grade needs ``multiTenantScenarios`` and ``captureClusterContext`` true."""
    if benchmark_class(doc) == "realism_grade":
        yield from require_true(doc, SPEC + ("executionPolicy", "realismGrade"), REALISM_FLAGS, " for realism_grade")


# -- sinks -------------------------------------------------------------------------------------


def rule_raw_artifacts(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: ``sinks.rawArtifacts.artifacts`` ⊇ logs, traces, profiler_reports, manifests."""
    yield from require_all(doc, SPEC + ("sinks", "rawArtifacts", "artifacts"), RAW_ARTIFACTS)


def rule_path_template(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2 (placeholders): ``sinks.rawArtifacts.pathTemplate`` uses only known ``${NAME}`` names."""
    path = SPEC + ("sinks", "rawArtifacts", "pathTemplate")
    value = get(doc, path)
    if isinstance(value, str):
        # The artifact store substitutes only ${RUN_ID} (benchrun.store.open_store): anything else
        # is refused here, at admission, not after every suite has run.
        for name in placeholder_names(value):
            if name != "RUN_ID":
                hint = "" if name in KNOWN_NAMES else did_you_mean(name, KNOWN_NAMES)
                yield path, (f"placeholder ${{{name}}} is not supported in a path template{hint}; "
                             "only ${RUN_ID} is")
        if ".." in value.replace("\\", "/").split("/"):
            yield path, "'..' is not allowed: evidence stays inside the store's root (use an absolute path or s3://)"


def rule_hot_metrics_drop(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: ``hotMetrics.cardinalityBudget.dropDimensions`` ⊇ request_id, trace_id."""
    yield from require_all(doc, SPEC + ("sinks", "hotMetrics", "cardinalityBudget", "dropDimensions"), HOT_DROP)


def rule_facts(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: facts ⊇ benchmark_run_fact, telemetry_slice_fact, + serving_outcome_fact (inference/mixed), + training_outcome_fact (training/mixed)."""
    wt = workload_type(doc)
    required = list(FACTS)
    if wt in ("inference", "mixed"):
        required.append("serving_outcome_fact")
    if wt in ("training", "mixed"):
        required.append("training_outcome_fact")
    why = f" for workloadType {wt}" if wt else ""
    yield from require_all(doc, SPEC + ("sinks", "curatedWarehouse", "layout", "facts"), required, why)


def rule_dimensions(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: ``curatedWarehouse.layout.dimensions`` ⊇ the five dimensions."""
    yield from require_all(doc, SPEC + ("sinks", "curatedWarehouse", "layout", "dimensions"), DIMENSIONS)


def rule_retention_order(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: warehouse retention ``0 < hotDays <= warmDays <= coldDays``."""
    path = SPEC + ("sinks", "curatedWarehouse", "retention")
    hot, warm, cold = (get(doc, path + (k,)) for k in ("hotDays", "warmDays", "coldDays"))
    if is_number(hot) and is_number(warm) and hot > 0 and hot > warm:
        yield path + ("hotDays",), f"is {hot}, more than warmDays ({warm}); need hotDays <= warmDays <= coldDays"
    if is_number(warm) and is_number(cold) and warm > 0 and warm > cold:
        yield path + ("warmDays",), f"is {warm}, more than coldDays ({cold}); need hotDays <= warmDays <= coldDays"


def rule_warehouse_lineage(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: the three ``curatedWarehouse.lineage`` flags are true."""
    yield from require_true(doc, SPEC + ("sinks", "curatedWarehouse", "lineage"), WAREHOUSE_LINEAGE)


RULES: tuple[Rule, ...] = (
    rule_scheduler_path,
    rule_layers_complete,
    rule_layer_enabled,
    rule_enabled_layer_has_suites,
    rule_suite_names_unique,
    rule_repo_command,
    rule_builtin_suite,
    rule_suite_replicates,
    rule_auto_replicates_bound,
    rule_mix_weights,
    rule_controls_fixed,
    rule_one_variable_at_a_time,
    rule_variable_under_test_resolves,
    rule_baseline_ref,
    rule_confirmation_max_pairs,
    rule_fixed_across_trials,
    rule_training_metrics,
    rule_inference_metrics,
    rule_metric_names,
    rule_primary_suites,
    rule_reported_metrics,
    rule_margin_metrics,
    rule_trial_report,
    rule_taxonomy,
    rule_decompose_overheads,
    rule_instrumentation,
    rule_rank_visibility,
    rule_collectives,
    rule_node_diagnosis,
    rule_remediation,
    rule_join_keys,
    rule_number_lineage,
    rule_service_telemetry,
    rule_infrastructure_telemetry,
    rule_scheduler_telemetry,
    rule_playbooks,
    rule_provenance_capture,
    rule_signing,
    rule_publication_policy,
    rule_realism_policy,
    rule_raw_artifacts,
    rule_path_template,
    rule_hot_metrics_drop,
    rule_facts,
    rule_dimensions,
    rule_retention_order,
    rule_warehouse_lineage,
)


def check(doc: Any) -> list[Finding]:
    """Run every rule over the document as written; all findings, in rule order."""
    findings: list[Finding] = []
    for rule in RULES:
        findings.extend(rule(doc))
    return findings
