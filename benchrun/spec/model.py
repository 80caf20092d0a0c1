"""Pydantic v2 models of the whole ``BenchmarkRun`` document (CONTRACT.md §1–§2).

Over 600 lines on purpose: it is the document's schema, its models in the order of the
document's sections, read top to bottom beside the contract (and the CRD is generated from
it); the cross-field rules are already apart, in :mod:`benchrun.spec.rules`.

Python attributes are snake_case; YAML keys are the camelCase aliases the template uses
(``run.spec.trials.min_replicates`` ↔ ``spec.trials.minReplicates``). Every model forbids
unknown keys, is frozen and validates strictly: ``"5"`` is not an integer and ``yes`` is
only a boolean because YAML 1.1 says so. Keys are read by their camelCase spelling only: a
snake_case key is an unknown key (with its camelCase name suggested), as in the CRD.

What lives here and what lives in :mod:`benchrun.spec.rules`:

* here: the structure, the types, the enumerations of CONTRACT.md §2 (as ``Literal``),
  and single-field bounds (``minReplicates >= 3``, ``0.8 <= confidenceLevel < 1``,
  positive token counts, ``maxActiveSeries > 0``, ...). They also end up in the CRD.
* in ``rules``: everything that compares fields with each other or with a required set
  (``controls.fixed`` equals ``workload``, facts by workload type, must-be-true flags).

Decisions where the sources disagree (CONTRACT.md wins):

* ``workload.fixedAcrossTrials`` names only workload keys. The two-node reference template
  lists ``runtimeImageDigest, visibleGpuShape, oobIf, socketIfname`` there too; it is a
  reference, not required to validate, and is rejected on exactly those four entries
  (they describe the site, not the workload; put them in suite ``parameters``).
* ``sinks.curatedWarehouse.lineage.artifactRootColumn`` (used by the two-node template) is
  accepted as an optional flag.
* A disabled layer may have no suites (the CRD sketch's ``minItems: 1`` is not kept).
* ``controls.fixed.sequenceLengthMix`` may be the compact string ``[{512/128@0.7},...]``
  or the same list form as ``workload.sequenceLengthMix`` (its entries checked the same way);
  it is compared by value.
* ``metadata`` accepts the server-populated Kubernetes fields (``uid``,
  ``resourceVersion``, ``finalizers``, ``ownerReferences``, ``deletionTimestamp``, ...) and
  ``generateName`` so a custom resource read back from a cluster validates; they are left out
  of ``spec_digest``.

Additive extensions (all optional; a document without them behaves exactly as before):

* per suite: ``image`` (container image for the Kubernetes launcher), ``timeoutSeconds``
  (> 0 and at most 30 days, per launch), ``replicates`` (>= ``trials.minReplicates`` and <= 10000, the bound
  of ``minReplicates``; overrides it for that suite) and ``parameters`` (free suite parameters: scalars or lists of scalars, passed to
  the suite as the JSON object ``BENCHRUN_PARAMS``).
* ``metrics.inference.slo``: per-request service-level objectives, keys ``ttft_ms``,
  ``decode_ms_per_token``, ``e2e_ms`` (positive milliseconds).
* ``metrics.inference.pricing``: ``{pricePerNodeHourUsd > 0, nodes >= 1}`` for the cost
  metrics of CONTRACT.md §5.
* ``comparison.deltaPct`` (default 3.0: the no-change band in percent) and
  ``comparison.deltaPctByMetric`` (per-metric overrides).
* ``status``: the custom resource's status (written by benchrun, never required).
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, StringConstraints,
                      ValidatorFunctionWrapHandler, WrapSerializer, WrapValidator)
from pydantic.alias_generators import to_camel

API_VERSION = "benchmarking.aisp.dev/v1alpha1"
KIND = "BenchmarkRun"

BenchmarkClass = Literal["publication_grade", "realism_grade"]
WorkloadType = Literal["training", "inference", "mixed"]
# adhoc: an experiment run by hand (never scheduled; promote refuses it unless told --allow-adhoc)
Cadence = Literal["canary", "nightly", "pre_release", "adhoc"]
LayerName = Literal["micro", "component", "end_to_end"]
VariableUnderTest = Literal[
    "hardware_generation",
    "runtime_version",
    "scheduler_path",
    "control_plane_path",
    "driver_stack",
    "network_topology",
    "storage_stack",
]


def _variable_under_test(value: str) -> str:
    """A named variable (``VariableUnderTest``) or a spec path (``benchrun.spec.paths``)."""
    from typing import get_args

    from benchrun.spec import paths

    if value in get_args(VariableUnderTest):
        return value
    paths.parse(value)  # ValueError names the expected form; rules check that it resolves
    return value


# at most 512 characters (benchrun.spec.paths.MAX_LENGTH), in the CRD too
VariableSpec = Annotated[str, Field(max_length=512), AfterValidator(_variable_under_test)]
Phase = Literal["Pending", "Admitted", "Running", "Analyzing", "Succeeded", "Failed", "Rejected", "Canceled"]

LAYER_NAMES: tuple[str, ...] = ("micro", "component", "end_to_end")
# The workload keys of CONTRACT.md §2 that must be frozen (and repeated in controls.fixed).
FROZEN_WORKLOAD_KEYS: tuple[str, ...] = (
    "model",
    "sequenceLengthMix",
    "precision",
    "batchingPolicy",
    "concurrencyModel",
)
# Every key of spec.workload, by its YAML spelling.
WORKLOAD_KEYS: tuple[str, ...] = FROZEN_WORKLOAD_KEYS + ("datasetRef", "dataset", "fixedAcrossTrials")

PositiveInt = Annotated[int, Field(gt=0, le=2**63 - 1)]
MAX_TIMEOUT_S = 30 * 24 * 3600  # a suite's timeoutSeconds
PositiveFloat = Annotated[float, Field(gt=0)]
# A non-blank string (pattern is a search: "contains a non-space character").
Text = Annotated[str, Field(min_length=1, pattern=r"\S")]
# Safe as one file-name component (benchrun.paths.validate_name): results are named by suite.
# A Kubernetes label value (benchrun.dev/suite on every pod): at most 63 characters, alphanumeric
# at both ends; a longer name passed admission and failed only at the launcher's preflight
SuiteName = Annotated[str, Field(min_length=1, max_length=63,
                                 pattern=r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")]
# DNS-1123 label: metadata.name becomes the first part of every run id.
DnsLabel = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]

_SCALARS = (str, int, float, bool)


def _check_parameter(value: Any) -> Any:
    """A suite parameter is a JSON scalar or a flat list of them (no nesting, no null)."""
    if isinstance(value, _SCALARS):
        ok = not isinstance(value, float) or value == value and abs(value) != float("inf")
    elif isinstance(value, list):
        ok = all(isinstance(v, _SCALARS) and not isinstance(v, list) for v in value)
        ok = ok and all(not isinstance(v, float) or (v == v and abs(v) != float("inf")) for v in value)
    else:
        ok = False
    items = value if isinstance(value, list) else [value]
    if not ok and any(isinstance(v, float) and not math.isfinite(v) for v in items):
        raise ValueError("must be a finite number, not .inf or .nan")
    if not ok:
        raise ValueError("a suite parameter must be a string, number or boolean, or a flat list of them")
    return value


ParameterValue = Annotated[Any, AfterValidator(_check_parameter)]


# A Kubernetes resource quantity (https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/):
# a decimal number with an optional binary (Ki..Ei) or decimal (m, k, M..E) suffix.
Quantity = Annotated[
    str,
    StringConstraints(pattern=r"^([0-9]+(\.[0-9]+)?|\.[0-9]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$", max_length=32),
]


def whole_cpu_count(qty: str) -> int:
    """``qty`` (a Kubernetes quantity: ``"2000m"``, ``"4"``) as a whole number of CPUs, else ValueError
    saying why: the one rule of the spec's ``cpu`` and the Kubernetes launcher's
    (``benchrun.launch.placement.whole_cpus``). A pod's cpu is whole CPUs: every Kubernetes launch
    refuses a fraction, so the spec does when it is validated."""
    from decimal import Decimal, InvalidOperation

    from kubernetes.utils.quantity import parse_quantity

    try:
        value = parse_quantity(str(qty))
    except (ValueError, InvalidOperation):
        raise ValueError(f"{qty!r} is not a CPU quantity (e.g. \"4\")") from None
    if value < 1 or value != value.to_integral_value():
        raise ValueError(f"{qty!r} is not a whole number of CPUs; a benchmark pod is Guaranteed QoS with whole CPUs so "
                         "that the kubelet's static CPU manager gives it exclusive cores (the Kubernetes launcher "
                         "refuses a fraction): use e.g. '4'")
    return int(value if isinstance(value, Decimal) else Decimal(value))


def _whole_cpus(value: str) -> str:
    whole_cpu_count(value)
    return value


CpuQuantity = Annotated[Quantity, AfterValidator(_whole_cpus)]


class SpecModel(BaseModel):
    """Base of every spec model: camelCase aliases, unknown keys rejected, frozen, strict."""

    # By alias only: a snake_case key (compare_one_variable_at_a_time) is an unknown key, as in the
    # CRD; read by name it would pass the model while the rules, which read the camelCase keys,
    # saw nothing, and the same spec would have two spellings and two digests.
    model_config = ConfigDict(
        extra="forbid",
        validate_by_alias=True,
        validate_by_name=False,
        frozen=True,
        strict=True,
        allow_inf_nan=False,
        alias_generator=to_camel,
    )


# -- metadata ------------------------------------------------------------------------


class Metadata(SpecModel):
    """Kubernetes object metadata: name, namespace, labels, annotations (+ server fields)."""

    name: DnsLabel
    namespace: DnsLabel | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    # Set by an API server (or by a controller: the operator's finalizer); accepted so an object
    # read back from a cluster validates, and left out of every digest (digest.SERVER_METADATA).
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None
    managed_fields: list[dict[str, Any]] | None = None
    finalizers: list[str] | None = None
    owner_references: list[dict[str, Any]] | None = None
    deletion_timestamp: str | None = None
    deletion_grace_period_seconds: int | None = None
    self_link: str | None = None
    # how the server chose ``name`` (kubectl create with metadata.generateName): not what runs
    generate_name: str | None = None


# -- intent and layers -----------------------------------------------------------------


class Intent(SpecModel):
    """Why the run exists: its class, workload type, scheduler path and cadence."""

    benchmark_class: BenchmarkClass
    workload_type: WorkloadType
    scheduler_path: Text = Field(description="Contains kueue and/or slinky, or local.")
    cadence: Cadence


def _check_env_name(name: str) -> str:
    """A suite's own variable: never one benchrun sets for it (its run, Pipes, the rendezvous)."""
    if name.startswith(("BENCHRUN_", "DAGSTER_")) or name in SUITE_ENV_RESERVED:
        raise ValueError(f"{name} is set by benchrun for every suite; choose another name")
    return name


SUITE_ENV_RESERVED = frozenset({"MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "GROUP_RANK", "NNODES", "WORLD_SIZE",
                                "LOCAL_WORLD_SIZE", "RANK", "LOCAL_RANK", "PYTHONUNBUFFERED"})
EnvName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$"),
                    AfterValidator(_check_env_name)]
EnvValue = Annotated[str, Field(max_length=4096, pattern=r"^[^\x00]*$")]


class Suite(SpecModel):
    """One benchmark suite: a command plus the optional extensions of this module."""

    name: SuiteName
    repo_command: Text = Field(
        description="argv as a person writes it (shlex); ${NAME} placeholders substituted per argument."
    )
    env: dict[EnvName, EnvValue] = Field(
        default_factory=dict,
        description="Environment variables the suite's process gets (e.g. OMP_NUM_THREADS: '1'), passed as data "
        "to the process or pod, recorded in the run's plan and part of the pinned spec the gate compares.",
    )
    image: Text | None = Field(default=None, description="Container image for the Kubernetes launcher.")
    # at most 30 days: a Job's activeDeadlineSeconds (and a layer's, the sum over its launches and
    # reruns) must stay an int64 that Kubernetes accepts
    timeout_seconds: Annotated[int, Field(ge=1, le=MAX_TIMEOUT_S)] | None = Field(
        default=None, description="Per-launch timeout in seconds (at most 2592000, 30 days).")
    replicates: Annotated[int, Field(ge=1, le=10_000)] | None = Field(
        default=None, description="Replicates of this suite (>= trials.minReplicates, <= 10000 as minReplicates)."
    )
    parameters: dict[str, ParameterValue] = Field(
        default_factory=dict, description="Free suite parameters, passed as JSON in BENCHRUN_PARAMS."
    )
    nodes: Annotated[int, Field(ge=1, le=4096)] = Field(
        default=1,
        description="Nodes one launch spans, as one gang (a JobSet on Kubernetes, process groups locally).",
    )
    gpus_per_node: Annotated[int, Field(ge=0, le=64)] | None = Field(
        default=None,
        description="Ranks per node of a multi-node suite (LOCAL_WORLD_SIZE), and on Kubernetes the GPUs each pod "
        "of its JobSet asks for (gpus, when set, must equal it); unset: one rank per node, and each pod asks for "
        "gpus as a single-node suite's pod does.",
    )
    network: Literal["tcp", "rdma"] | None = Field(
        default=None,
        description="Interconnect a multi-node suite needs: rdma adds the RDMA device resource and IPC_LOCK "
        "to every pod of its JobSet; unset or tcp: the pod network.",
    )

    gpus: Annotated[int, Field(ge=0, le=64)] | None = Field(
        default=None,
        description="GPUs one pod asks for on Kubernetes; unset: the launcher's gpus, else 1 when the suite's "
        "parameters ask for CUDA (device: cuda or backend: nccl), else none (the pod then sees no GPU: "
        "NVIDIA_VISIBLE_DEVICES=void).",
    )
    cpu: CpuQuantity | None = Field(
        default=None,
        description="CPU request and limit of one pod on Kubernetes, in whole CPUs (e.g. '8' or '8000m'; a fraction "
        "such as '500m' is refused: a benchmark pod is Guaranteed QoS with exclusive cores); unset: the launcher's, "
        "else the suite's default.",
    )
    memory: Quantity | None = Field(
        default=None, description="Memory request and limit of one pod (a Kubernetes quantity, e.g. '64Gi')."
    )
    shm_size: Quantity | None = Field(
        default=None,
        description="Size of the memory-backed /dev/shm of one pod (e.g. '16Gi'); unset: the launcher's default.",
    )

    @property
    def multi_node(self) -> bool:
        """True when one launch of this suite spans more than one node."""
        return self.nodes > 1


class Layer(SpecModel):
    """One of the three layers; an enabled layer needs at least one suite."""

    name: LayerName
    enabled: bool
    objective: str | None = None
    suites: list[Suite] = Field(default_factory=list)


# -- workload and comparison -------------------------------------------------------------


class SequenceLengthEntry(SpecModel):
    """One entry of the sequence-length mix: input/output token counts and a weight."""

    input_tokens: PositiveInt
    output_tokens: PositiveInt
    weight: Annotated[float, Field(gt=0, le=1)]


class WorkloadDataset(SpecModel):
    """A prompt dataset file: its path (relative to the spec's folder), its layout and its sha256
    (filled from the file when the spec is read, and checked when written)."""

    path: Text
    format: Literal["auto", "sharegpt", "jsonl", "parquet"] = "auto"
    sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")] | None = None


class Workload(SpecModel):
    """The frozen workload: what is served or trained, identical across trials."""

    model: Text
    sequence_length_mix: list[SequenceLengthEntry] = Field(min_length=1)
    precision: Text
    batching_policy: Text
    concurrency_model: Text
    dataset_ref: str | None = None
    fixed_across_trials: list[str] = Field(default_factory=list)
    dataset: WorkloadDataset | None = Field(
        default=None,
        description="Prompts from a dataset file; its sha256 is pinned into the spec digest (docs/loadgen-workloads.md).",
    )


class ArtifactRef(SpecModel):
    """A baseline or candidate by name in the home that compares: a run id, runs/<run_id> or
    published/<alias> (optional site prefix, e.g. cluster/published/current), never a path."""

    artifact_ref: Text
    description: str | None = None


class SeveralShapes:
    """Marks a field that takes several shapes: the CRD preserves it unchecked (benchrun.spec.crd)."""


def _compact_or_list(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """The compact mix string as written (read by the rules), or the list form checked entry by
    entry as ``workload.sequenceLengthMix`` is (keys, types, bounds; errors at each entry's path)."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise ValueError("must be the compact form '[{512/128@0.7},...]' or a list like spec.workload.sequenceLengthMix")
    return handler(value)


def _dump_compact_or_list(value: Any, handler: SerializerFunctionWrapHandler) -> Any:
    return value if isinstance(value, str) else handler(value)


# list[SequenceLengthEntry], or the compact string kept as text
FixedMix = Annotated[list[SequenceLengthEntry], WrapValidator(_compact_or_list), WrapSerializer(_dump_compact_or_list),
                     SeveralShapes()]


class FixedControls(SpecModel):
    """The workload keys held fixed in a comparison; values must equal ``spec.workload``."""

    model: str | None = None
    sequence_length_mix: FixedMix | None = Field(
        default=None,
        description="Compact form '[{512/128@0.7},...]' or the list form of workload.sequenceLengthMix.",
    )
    precision: str | None = None
    batching_policy: str | None = None
    concurrency_model: str | None = None
    dataset_ref: str | None = None


class Controls(SpecModel):
    """What a comparison holds fixed, and the one-variable-at-a-time switch."""

    fixed: FixedControls
    compare_one_variable_at_a_time: bool


class ConfirmationRound(SpecModel):
    """The confirmation round of a suspected gating regression (extension)."""

    max_pairs: Annotated[int, Field(ge=1, le=100)] | None = Field(
        default=None, description="Most baseline/candidate pairs the round may launch while its answer is "
        "unclear: it starts with as many pairs as the runs had replicates and extends by as many more at a time "
        "(default: three times the replicates).")


class Comparison(SpecModel):
    """Baseline versus candidate differing only in ``variableUnderTest``."""

    variable_under_test: VariableSpec = Field(
        description="One of the named variables, or a spec path such as "
        "layers.micro.suites[gemm].env.OMP_NUM_THREADS (what alone may differ from the baseline)."
    )
    baseline: ArtifactRef | None = None
    candidate: ArtifactRef | None = None
    allow_differences: list[Annotated[str, Field(min_length=1, max_length=512, pattern=r"\S")]] = Field(
        default_factory=list, description="Spec paths allowed to differ from the baseline besides "
        "variableUnderTest (an explicit override of the one-variable gate, recorded in the comparison)."
    )
    controls: Controls
    delta_pct: Annotated[float, Field(ge=0, lt=100)] = Field(
        default=3.0, description="No-change band in percent (extension; default 3.0; below 100: a band of 100 % "
        "or more would hold every halving and doubling, so nothing could regress)."
    )
    delta_pct_by_metric: dict[str, Annotated[float, Field(ge=0, lt=100)]] = Field(
        default_factory=dict, description="Per-metric no-change band in percent, keyed by the bare metric name "
        "(p99_latency_ms: every suite and case reporting it) (extension)."
    )
    absolute_margin_by_metric: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict,
        description="Per-metric no-change margin in the metric's unit, for metrics that can be 0 "
        "(error counts) and are compared by absolute difference (extension).",
    )
    confirmation: ConfirmationRound | None = None


# -- metrics and trials -----------------------------------------------------------------


class Slo(SpecModel):
    """Per-request service-level objectives in milliseconds (extension)."""

    model_config = ConfigDict(alias_generator=None)

    ttft_ms: PositiveFloat | None = None
    decode_ms_per_token: PositiveFloat | None = None
    e2e_ms: PositiveFloat | None = None


class Pricing(SpecModel):
    """Price of the measured system, for cost_per_request_usd / cost_per_token_usd (extension)."""

    price_per_node_hour_usd: PositiveFloat
    nodes: Annotated[int, Field(ge=1, le=1_000_000)]


class TrainingMetrics(SpecModel):
    """Training metrics to report."""

    enabled: bool
    primary: list[str] = Field(default_factory=list)
    secondary: list[str] = Field(default_factory=list)


class InferenceMetrics(SpecModel):
    """Inference metrics to report, with optional SLOs and pricing."""

    enabled: bool
    primary: list[str] = Field(default_factory=list)
    secondary: list[str] = Field(default_factory=list)
    slo: Slo | None = None
    pricing: Pricing | None = None


class Metrics(SpecModel):
    """Metrics by workload type."""

    training: TrainingMetrics | None = None
    inference: InferenceMetrics | None = None


class OutlierPolicy(SpecModel):
    """How outlying replicates are found and treated: MAD, flagged and kept."""

    method: Literal["mad"]
    action: Literal["flag_and_keep"]


class TrialReport(SpecModel):
    """What a trial report must show."""

    distributions: bool
    confidence_intervals: bool
    rank_level_outliers: bool


class Trials(SpecModel):
    """Replicates, confidence level and outlier handling."""

    min_replicates: Annotated[int, Field(ge=3, le=10_000)]
    confidence_level: Annotated[float, Field(ge=0.8, lt=1)]
    outlier_policy: OutlierPolicy
    report: TrialReport
    replicates: Literal["auto"] | None = Field(
        default=None, description="Extension: 'auto' runs each suite (without its own replicates) as many "
        "replicates as `benchrun plan` finds its primary metrics need for a true change of comparison.deltaPct to "
        "be significant with 80 % power (planned for the 80 % upper bound of the noise in the home's history), bounded by minReplicates and maxReplicates (decided once per run, "
        "recorded in structured/<run_id>_replicate_plan.json).")
    max_replicates: Annotated[int, Field(ge=3, le=1000)] = Field(
        default=10, description="Extension: the most replicates `replicates: auto` may plan for a suite.")
    contended_reruns: Annotated[int, Field(ge=0, le=3)] = Field(
        default=1, description="Extension: how many times a replicate whose telemetry says it ran on a contended "
        "machine is launched again before analysis (default 1; 0: never). A replicate still contended is "
        "excluded or kept by benchrun.stats.contention's rule.")


# -- analysis sections -----------------------------------------------------------------


class BottleneckAnalysis(SpecModel):
    """Bottleneck taxonomy, overhead decomposition and instrumentation per class."""

    taxonomy: list[str]
    decompose_overheads: list[str]
    instrumentation: dict[str, list[str]]


class NodeDiagnosis(SpecModel):
    """Node checks and remediations (YAML key ``validate`` is ``validations`` here)."""

    validations: list[str] = Field(alias="validate")
    remediation: list[str]
    exporters: list[str] = Field(default_factory=list)


class Distributed(SpecModel):
    """Distributed visibility: per-rank data, collectives, node diagnosis."""

    require_rank_level_visibility: bool
    collectives: list[str]
    node_diagnosis: NodeDiagnosis


class PublishedNumberLineage(SpecModel):
    """Which lineage a published number carries."""

    raw_artifact_manifest_digest: bool
    warehouse_row_lineage: bool
    query_spec_captured: bool


class Correlation(SpecModel):
    """Join keys and lineage of published numbers."""

    stable_join_keys: list[str]
    published_number_lineage: PublishedNumberLineage


class TelemetrySources(SpecModel):
    """Telemetry by origin."""

    service: list[str]
    infrastructure: list[str]
    scheduler: list[str]


class TelemetrySampling(SpecModel):
    """Extension: the sampler beside every replicate (CPU, memory, I/O; NVML on GPU hosts)."""

    enabled: bool = True
    rate_hz: float = Field(default=1.0, ge=0.1, le=10.0)


class Observability(SpecModel):
    """Correlation, telemetry and the scenario playbooks."""

    correlation: Correlation
    telemetry_sources: TelemetrySources
    scenario_playbooks: list[str]
    telemetry_sampling: TelemetrySampling | None = None  # absent: on, at 1 Hz


class ProvenanceCapture(SpecModel):
    """What provenance is captured with every run."""

    pinned_workload_spec: bool
    image_digest: bool
    driver_cuda_nccl_runtime_versions: bool
    hardware_topology: bool
    immutable_raw_artifacts: bool
    audit_trail: bool


class Signing(SpecModel):
    """Signing of the evidence; publication grade requires it."""

    required: bool
    backend: str | None = None
    attestation_format: str | None = None


class Provenance(SpecModel):
    """Provenance capture and signing."""

    capture: ProvenanceCapture
    signing: Signing


class PublicationGradePolicy(SpecModel):
    """Guarantees a publication-grade run needs from the system."""

    dedicated_nodes: bool
    stable_background_load: bool
    fixed_topology: bool
    topology_exclusive_scheduling: bool


class RealismGradePolicy(SpecModel):
    """What a realism-grade run does instead."""

    multi_tenant_scenarios: bool
    capture_cluster_context: bool


class ExecutionPolicy(SpecModel):
    """Execution guarantees per benchmark class."""

    publication_grade: PublicationGradePolicy
    realism_grade: RealismGradePolicy


# -- sinks and automation -------------------------------------------------------------------


class RawArtifacts(SpecModel):
    """Immutable raw evidence store."""

    store: Text
    path_template: Text
    retention_class: Text
    artifacts: list[str]


class CardinalityBudget(SpecModel):
    """How many hot series may exist, and which labels are never used."""

    max_active_series: PositiveInt
    drop_dimensions: list[str]


class HotMetrics(SpecModel):
    """Hot metrics (Prometheus) and their cardinality budget."""

    store: Text
    retention_days: PositiveInt
    cardinality_budget: CardinalityBudget


class WarehouseLayout(SpecModel):
    """Fact and dimension tables of the curated warehouse."""

    facts: list[str]
    dimensions: list[str]


class WarehouseRetention(SpecModel):
    """Days in the hot, warm and cold tiers (0 < hot <= warm <= cold)."""

    hot_days: PositiveInt
    warm_days: PositiveInt
    cold_days: PositiveInt


class WarehouseLineage(SpecModel):
    """Lineage columns of the curated warehouse."""

    published_numbers_traceable_to_raw: bool
    manifest_digest_column: bool
    workload_spec_digest_column: bool
    artifact_root_column: bool | None = None


class CuratedWarehouse(SpecModel):
    """The parquet + DuckDB warehouse."""

    store: Text
    layout: WarehouseLayout
    retention: WarehouseRetention
    lineage: WarehouseLineage


class Sinks(SpecModel):
    """Where evidence and metrics go."""

    raw_artifacts: RawArtifacts
    hot_metrics: HotMetrics
    curated_warehouse: CuratedWarehouse


class CiCadences(SpecModel):
    """Which CI cadences run this spec."""

    canary: bool
    nightly: bool
    pre_release: bool


class Automation(SpecModel):
    """CI automation switches."""

    ci: CiCadences


# -- the document --------------------------------------------------------------------------


class Spec(SpecModel):
    """The 13 required sections of ``spec`` (CONTRACT.md §1)."""

    intent: Intent
    layers: list[Layer]
    workload: Workload
    comparison: Comparison
    metrics: Metrics
    trials: Trials
    bottleneck_analysis: BottleneckAnalysis
    distributed: Distributed
    observability: Observability
    provenance: Provenance
    execution_policy: ExecutionPolicy
    sinks: Sinks
    automation: Automation


class Condition(SpecModel):
    """A status condition (Kubernetes convention)."""

    type: Text
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None


class OutlierSummary(SpecModel):
    """How many replicates were flagged as outliers (kept, per trials.outlierPolicy)."""

    flagged_replicates: Annotated[int, Field(ge=0)]
    total_replicates: Annotated[int, Field(ge=0)]
    flagged_metrics: list[str] = Field(default_factory=list)


class RunStatus(SpecModel):
    """``status`` of a BenchmarkRun custom resource, written by benchrun."""

    phase: Phase | None = None
    conditions: list[Condition] = Field(default_factory=list)
    run_id: str | None = None
    run_directory: str | None = None
    spec_digest: str | None = None
    workload_spec_digest: str | None = None
    artifact_manifest_digest: str | None = None
    benchmark_class_granted: BenchmarkClass | None = None
    selected_scheduler_path: str | None = None
    hot_metrics_ref: str | None = None
    warehouse_ref: str | None = None
    outlier_summary: OutlierSummary | None = None
    straggler_nodes: list[str] = Field(default_factory=list)
    provenance_ref: str | None = None
    observed_generation: int | None = None
    # Written by the BenchmarkRun controller (benchrun/controller/status.py).
    message: str | None = None
    start_time: str | None = None
    completion_time: str | None = None
    report_ref: str | None = None
    verdicts: dict[str, str] = Field(default_factory=dict)
    # status.json's ``status_seq`` this status was built from: orders the writes of one run, so a
    # run that legitimately leaves a final phase (a retry, a publication failure after Succeeded)
    # is followed while a stale writer still never moves the status back.
    status_seq: int | None = None


class BenchmarkRun(SpecModel):
    """A whole ``BenchmarkRun`` document."""

    api_version: Literal["benchmarking.aisp.dev/v1alpha1"]
    kind: Literal["BenchmarkRun"]
    metadata: Metadata
    spec: Spec
    status: RunStatus | None = None

    def layer(self, name: str) -> Layer | None:
        """The layer called ``name`` (micro, component, end_to_end), or None."""
        return next((layer for layer in self.spec.layers if layer.name == name), None)

    def enabled_layers(self) -> list[Layer]:
        """Enabled layers in execution order micro → component → end_to_end."""
        order = {name: i for i, name in enumerate(LAYER_NAMES)}
        return sorted((layer for layer in self.spec.layers if layer.enabled), key=lambda l: order[l.name])

    def replicates_for(self, suite: Suite) -> int:
        """How many replicates ``suite`` runs: its own ``replicates`` or trials.minReplicates."""
        return suite.replicates if suite.replicates is not None else self.spec.trials.min_replicates

    def workload_env(self) -> dict[str, Any]:
        """The JSON object passed to suites as ``BENCHRUN_WORKLOAD``.

        ``spec.workload`` in the spec's own spelling (camelCase, as written), plus ``slo``
        and ``pricing`` from ``spec.metrics.inference`` (each ``null`` when not declared).
        """
        env: dict[str, Any] = self.spec.workload.model_dump(mode="json", by_alias=True, exclude_none=True)
        inference = self.spec.metrics.inference
        slo = inference.slo if inference is not None else None
        pricing = inference.pricing if inference is not None else None
        env["slo"] = slo.model_dump(mode="json", by_alias=True, exclude_none=True) if slo is not None else None
        env["pricing"] = pricing.model_dump(mode="json", by_alias=True) if pricing is not None else None
        return env

    def workload_env_json(self) -> str:
        """``workload_env()`` as compact JSON text, ready for the environment."""
        return json.dumps(self.workload_env(), sort_keys=True, separators=(",", ":"))
