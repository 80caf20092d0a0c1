"""The pyarrow schema of every curated table (facts and dimensions) and their DuckDB types."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pyarrow as pa

from benchrun.suites.result import PERCENTILE_SUFFIXES, SERVING_DISTRIBUTIONS

TS = pa.timestamp("us", tz="UTC")

# ARCHITECTURE.md §5: in every fact row, null where not applicable, never invented.
JOIN_KEYS: tuple[tuple[str, pa.DataType], ...] = (
    ("run_id", pa.string()),
    ("benchmark_case_id", pa.string()),
    ("scheduler_run_id", pa.string()),
    ("job_uid", pa.string()),
    ("pod_uid", pa.string()),
    ("node_name", pa.string()),
    ("gpu_uuid", pa.string()),
    ("rank_id", pa.int64()),
    ("request_id", pa.string()),
    ("trace_id", pa.string()),
)
JOIN_KEY_NAMES = tuple(name for name, _ in JOIN_KEYS)

# Lineage: which run's spec and stored evidence, and the stored object the number came from.
LINEAGE: tuple[tuple[str, pa.DataType], ...] = (
    ("workload_spec_digest", pa.string()),
    ("artifact_manifest_digest", pa.string()),
    ("raw_uri", pa.string()),
    ("raw_path", pa.string()),  # relative path of that object inside the run directory
    ("raw_sha256", pa.string()),
)


def _fact(*columns: tuple[str, pa.DataType]) -> pa.Schema:
    return pa.schema([*JOIN_KEYS, *columns, *LINEAGE])


BENCHMARK_RUN_FACT = _fact(
    ("name", pa.string()),
    ("phase", pa.string()),
    ("outcome", pa.string()),
    ("benchmark_class_requested", pa.string()),
    ("benchmark_class_granted", pa.string()),
    ("workload_type", pa.string()),
    ("cadence", pa.string()),
    ("scheduler_path_requested", pa.string()),
    ("selected_scheduler_path", pa.string()),
    ("variable_under_test", pa.string()),
    ("created_utc", TS),
    ("started_utc", TS),
    ("finished_utc", TS),
    ("duration_s", pa.float64()),
    ("spec_digest", pa.string()),
    ("dagster_run_id", pa.string()),
    ("n_suite_results", pa.int64()),
    ("n_metrics", pa.int64()),
    ("retention_hot_days", pa.int64()),
    ("retention_warm_days", pa.int64()),
    ("retention_cold_days", pa.int64()),
    ("raw_retention_class", pa.string()),
    ("raw_path_template", pa.string()),
    ("software_version_key", pa.string()),
    ("hardware_topology_key", pa.string()),
    ("cluster_region_key", pa.string()),
    ("workload_key", pa.string()),
    ("artifact_lineage_key", pa.string()),
)

MEASUREMENT_FACT = _fact(
    ("layer", pa.string()),
    ("suite", pa.string()),
    ("replicate", pa.int64()),
    ("case", pa.string()),
    ("metric", pa.string()),
    ("value", pa.float64()),
    ("unit", pa.string()),
    ("direction", pa.string()),
    ("status", pa.string()),
    ("reason", pa.string()),
    ("synthetic", pa.bool_()),
    ("finished_utc", TS),
)

SERVING_SCALAR_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("point", pa.string()),
    ("load_model", pa.string()),
    ("offered_load", pa.float64()),
    ("bucket", pa.string()),
    ("n_requests", pa.int64()),
    ("n_errors", pa.int64()),
    ("window_s", pa.float64()),
    ("jitter_ms", pa.float64()),
    ("tokens_per_second", pa.float64()),
    ("per_user_output_tokens_per_s", pa.float64()),
    ("request_throughput_rps", pa.float64()),
    ("request_goodput", pa.float64()),
    ("slo_attainment", pa.float64()),
    ("cost_per_request_usd", pa.float64()),
    ("cost_per_token_usd", pa.float64()),
    ("achieved_rate_rps", pa.float64()),
    ("schedule_lag_p99_ms", pa.float64()),
    ("verdict", pa.string()),
    ("verdict_reasons", pa.list_(pa.string())),
)
SERVING_DISTRIBUTION_COLUMNS: tuple[tuple[str, pa.DataType], ...] = tuple(
    (f"{base}_{suffix}", pa.float64()) for base in SERVING_DISTRIBUTIONS for suffix in PERCENTILE_SUFFIXES
)
# One row per serving point (run, suite, replicate, point) and request-size bucket (``bucket`` its
# label, e.g. '128/32'), and beside them one rollup row with bucket = 'all': the whole point, its
# requests of every bucket pooled (percentiles of the pooled requests). A sum over
# the table counts every request twice: filter bucket = 'all' for the points' totals (its
# sum(n_requests) matches serving_request_fact's rows), bucket <> 'all' for the per-bucket figures.
SERVING_OUTCOME_FACT = _fact(
    ("layer", pa.string()),
    ("suite", pa.string()),
    ("replicate", pa.int64()),
    ("synthetic", pa.bool_()),
    *SERVING_SCALAR_COLUMNS,
    *SERVING_DISTRIBUTION_COLUMNS,
)

# Columns taken from raw/*_requests.parquet (others in the file are left in the raw object).
REQUEST_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("point", pa.string()),
    ("bucket", pa.string()),
    ("send_ts", pa.float64()),
    ("ttft_ms", pa.float64()),
    ("e2e_ms", pa.float64()),
    ("input_tokens", pa.int64()),
    ("output_tokens", pa.int64()),
    ("decode_ms_per_token", pa.float64()),
    ("error", pa.string()),
)
SERVING_REQUEST_FACT = _fact(
    ("suite", pa.string()),
    ("replicate", pa.int64()),
    *REQUEST_COLUMNS,
)

TELEMETRY_SLICE_FACT = _fact(
    ("window_start_utc", TS),
    ("window_end_utc", TS),
    ("scope", pa.string()),  # run | node | core | gpu | process | cluster | rank
    ("source", pa.string()),  # environment.* | psutil | nvml | prometheus:<dcgm|node|kueue>
    ("metric", pa.string()),
    ("value", pa.float64()),
    ("unit", pa.string()),
    # replicate samples (benchrun.telemetry); null for the run-wide environment slices
    ("suite", pa.string()),
    ("replicate", pa.int64()),
    ("device_index", pa.int64()),  # core number or GPU index
    ("point", pa.string()),  # a serving point's label (server metrics scraped during it); null otherwise
)

# One row per replicate of a training suite (benchrun.suites.training's ``training`` rows).
TRAINING_SCALAR_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("case", pa.string()),
    ("world_size", pa.int64()),
    ("nodes", pa.int64()),
    ("ranks_per_node", pa.int64()),
    ("device", pa.string()),
    ("dtype", pa.string()),
    ("backend", pa.string()),
    ("global_batch", pa.int64()),
    ("seq_len", pa.int64()),
    ("measured_steps", pa.int64()),
    ("warmup_steps", pa.int64()),
    ("time_to_train_hours", pa.float64()),
    ("mfu_pct", pa.float64()),
    ("mfu_reason", pa.string()),
    ("peak_tflops_used", pa.float64()),
    ("scaling_efficiency_pct", pa.float64()),
    ("training_reliability_pct", pa.float64()),
    ("tokens_per_second", pa.float64()),
    ("tokens_per_second_per_device", pa.float64()),
    ("step_time_p50_ms", pa.float64()),
    ("step_time_p99_ms", pa.float64()),
    ("model_params_matmul", pa.int64()),
    ("model_flops_per_token", pa.float64()),
    ("flops_formula", pa.string()),
    ("time_to_first_step_s", pa.float64()),
    ("checkpoint_save_s", pa.float64()),
    ("checkpoint_restore_s", pa.float64()),
    ("checkpoint_bytes", pa.int64()),
    ("peak_memory_bytes", pa.int64()),
    ("peak_memory_kind", pa.string()),
    ("loss_first", pa.float64()),
    ("loss_last", pa.float64()),
    ("slowest_rank", pa.int64()),
    ("slowest_rank_node", pa.string()),
)
TRAINING_OUTCOME_FACT = _fact(
    ("layer", pa.string()),
    ("suite", pa.string()),
    ("replicate", pa.int64()),
    *TRAINING_SCALAR_COLUMNS,
)
SOFTWARE_VERSION_DIM = pa.schema([
    ("software_version_key", pa.string()),
    ("image_digest", pa.string()),
    ("driver_version", pa.string()),
    ("cuda_version", pa.string()),
    ("nccl_version", pa.string()),
    ("framework_version", pa.string()),
    ("runtime_version", pa.string()),
    ("python_version", pa.string()),
    ("os", pa.string()),
    ("kernel", pa.string()),
    ("packages_json", pa.string()),
])
HARDWARE_TOPOLOGY_DIM = pa.schema([
    ("hardware_topology_key", pa.string()),
    ("gpu_model", pa.string()),
    ("gpu_count", pa.int64()),
    ("pcie_layout", pa.string()),
    ("nvlink_topology", pa.string()),
    ("gpu_nic_affinity", pa.string()),
    ("numa_layout", pa.string()),
    ("cpu_model", pa.string()),
    ("cpu_cores", pa.int64()),
    ("memory_gib", pa.int64()),
])
CLUSTER_REGION_DIM = pa.schema([
    ("cluster_region_key", pa.string()),
    ("cluster", pa.string()),
    ("region", pa.string()),
    ("availability_zone", pa.string()),
    ("node_pool", pa.string()),
    ("scheduler_path", pa.string()),
    ("resource_flavor", pa.string()),
])
WORKLOAD_DIM = pa.schema([
    ("workload_key", pa.string()),
    ("model", pa.string()),
    ("precision", pa.string()),
    ("protocol", pa.string()),
    ("deployment_model", pa.string()),
    ("batching_policy", pa.string()),
    ("concurrency_model", pa.string()),
    ("sequence_length_mix_json", pa.string()),
])
ARTIFACT_LINEAGE_DIM = pa.schema([
    ("artifact_lineage_key", pa.string()),
    ("run_id", pa.string()),
    ("artifact_manifest_digest", pa.string()),
    ("workload_spec_digest", pa.string()),
    ("spec_digest", pa.string()),
    ("store_uri", pa.string()),
    ("manifest_uri", pa.string()),
    ("object_count", pa.int64()),
    ("total_bytes", pa.int64()),
])

# One row per replicate launch: its outcome and, on Kubernetes, the scheduler timeline
# (Job created → Kueue quota reserved → admitted → pod scheduled → container started →
# finished), so "queue wait" is a query (benchrun.launch.k8s_status.job_timeline).
LAUNCH_FACT = _fact(
    ("layer", pa.string()),
    ("suite", pa.string()),
    ("replicate", pa.int64()),
    ("status", pa.string()),
    ("reason", pa.string()),
    ("exit_code", pa.int64()),
    ("wall_s", pa.float64()),
    ("requested_utc", TS),
    ("finished_utc", TS),
    ("job_name", pa.string()),
    ("workload_name", pa.string()),
    ("cluster_queue", pa.string()),
    ("job_created_utc", TS),
    ("quota_reserved_utc", TS),
    ("admitted_utc", TS),
    ("pods_ready_utc", TS),
    ("pod_scheduled_utc", TS),
    ("container_started_utc", TS),
    ("container_finished_utc", TS),
    ("queue_wait_s", pa.float64()),
    ("scheduled_s", pa.float64()),
    ("started_s", pa.float64()),
    ("run_s", pa.float64()),
    ("image_id", pa.string()),
    ("evicted", pa.string()),
)

FACTS: dict[str, pa.Schema] = {
    "launch_fact": LAUNCH_FACT,
    "benchmark_run_fact": BENCHMARK_RUN_FACT,
    "measurement_fact": MEASUREMENT_FACT,
    "serving_outcome_fact": SERVING_OUTCOME_FACT,
    "serving_request_fact": SERVING_REQUEST_FACT,
    "telemetry_slice_fact": TELEMETRY_SLICE_FACT,
    "training_outcome_fact": TRAINING_OUTCOME_FACT,
}
DIMENSIONS: dict[str, pa.Schema] = {
    "software_version_dim": SOFTWARE_VERSION_DIM,
    "hardware_topology_dim": HARDWARE_TOPOLOGY_DIM,
    "cluster_region_dim": CLUSTER_REGION_DIM,
    "workload_dim": WORKLOAD_DIM,
    "artifact_lineage_dim": ARTIFACT_LINEAGE_DIM,
}
TABLES: dict[str, pa.Schema] = {**FACTS, **DIMENSIONS}


def dim_key_column(table: str) -> str:
    """The key column of a dimension (its first column)."""
    return DIMENSIONS[table].names[0]


def dim_key(attributes: dict[str, Any]) -> str:
    """Key of a dimension row: sha256 of the canonical JSON of its natural attributes."""
    canonical = json.dumps(attributes, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


_DUCKDB_TYPES = {
    pa.string(): "VARCHAR",
    pa.float64(): "DOUBLE",
    pa.int64(): "BIGINT",
    pa.bool_(): "BOOLEAN",
    TS: "TIMESTAMP WITH TIME ZONE",
    pa.list_(pa.string()): "VARCHAR[]",
}


def duckdb_type(dtype: pa.DataType) -> str:
    """DuckDB SQL type for a schema column type (used for views over tables with no files yet)."""
    return _DUCKDB_TYPES[dtype]
