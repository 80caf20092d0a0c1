"""Turning one run directory into its rows of every fact and dimension table."""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import json
import logging
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchrun.errors import BenchrunError
from benchrun.paths import sample_path
from benchrun.store import ObjectManifest, portable_address, portable_store_uri
from benchrun.telemetry.facts import slice_tables
from benchrun.warehouse.schemas import (
    JOIN_KEY_NAMES,
    REQUEST_COLUMNS,
    SERVING_DISTRIBUTION_COLUMNS,
    SERVING_REQUEST_FACT,
    SERVING_SCALAR_COLUMNS,
    TABLES,
    TRAINING_SCALAR_COLUMNS,
    dim_key,
    dim_key_column,
)
from benchrun.warehouse.sources import RunSources, dig, load_sources, parse_ts, run_start
from benchrun.warehouse.writer import rows_to_table, write_partition

log = logging.getLogger(__name__)

REQUEST_BATCH_ROWS = 256_000


def _keys(src: RunSources, **given: Any) -> dict[str, Any]:
    """Join keys: the run's id, what the caller knows, and nothing invented."""
    row = {name: None for name in JOIN_KEY_NAMES}
    row["run_id"] = src.run_id
    for name, value in given.items():
        if name in row and value not in (None, ""):
            row[name] = int(value) if name == "rank_id" else str(value)
    return row


def _launch_keys(src: RunSources, suite: str, replicate: int) -> dict[str, Any]:
    launch = src.launch_for(suite, replicate)
    return {k: launch.get(k) for k in ("scheduler_run_id", "job_uid", "pod_uid", "node_name") if launch.get(k)}


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return str(value)


# -- dimensions ----------------------------------------------------------------


def _packages(env: dict[str, Any]) -> dict[str, str]:
    pkgs = env.get("packages") or {}
    if isinstance(pkgs, list):
        out = {}
        for p in pkgs:
            if isinstance(p, dict) and p.get("name"):
                out[str(p["name"])] = str(p.get("version"))
        return out
    return {str(k): str(v) for k, v in pkgs.items()} if isinstance(pkgs, dict) else {}


def _first(env: dict[str, Any], *paths: tuple[str, ...]) -> Any:
    for path in paths:
        value = dig(env, *path)
        if value not in (None, "", [], {}):
            return value
    return None


def dimension_rows(src: RunSources) -> dict[str, dict[str, Any]]:
    """One row per dimension for this run, each keyed by the hash of its natural attributes."""
    env, status = src.environment, src.status
    gpus = [g for g in env.get("gpus") or [] if isinstance(g, dict)]
    pkgs = _packages(env)
    python = env.get("python")
    os_doc = env.get("os")
    runtime = env.get("gpu_runtime") if isinstance(env.get("gpu_runtime"), dict) else {}
    software = {
        "image_digest": _str(_first(env, ("image_digest",), ("container", "image_digest"))),
        "driver_version": _str(runtime.get("driver_version") or env.get("driver_version")),
        "cuda_version": _str(runtime.get("cuda_driver_version") or runtime.get("torch_cuda") or env.get("cuda_version")),
        "nccl_version": _str(runtime.get("nccl_version") or env.get("nccl_version")),
        "framework_version": _str(pkgs.get("torch") or runtime.get("torch_version")),
        "runtime_version": _str(_first(env, ("runtime_version",)) or pkgs.get("vllm") or pkgs.get("sglang")),
        "python_version": _str(python.get("version") if isinstance(python, dict) else python),
        "os": _str((os_doc.get("distro") or os_doc.get("system")) if isinstance(os_doc, dict) else os_doc),
        "kernel": _str(env.get("kernel")),
        "packages_json": json.dumps({k: v for k, v in sorted(pkgs.items()) if k != "benchrun"},
                                    separators=(",", ":")) if pkgs else None,
    }
    gpu_models = sorted({str(g.get("name") or g.get("model")) for g in gpus if g.get("name") or g.get("model")})
    numa_nodes = dig(env, "numa", "nodes")
    cores = _first(env, ("cpu", "logical_cores"), ("cores",), ("cpu_cores",))
    memory = _first(env, ("memory", "total_bytes"), ("memory_bytes",))
    hardware = {
        "gpu_model": ",".join(gpu_models) or None,
        "gpu_count": len(gpus),
        "pcie_layout": _str(env.get("pcie_layout")),
        "nvlink_topology": _str(env.get("nvlink_topology")),
        "gpu_nic_affinity": _str(env.get("gpu_nic_affinity")),
        "numa_layout": _str([[n.get("node"), n.get("cpus")] for n in numa_nodes if isinstance(n, dict)])
        if isinstance(numa_nodes, list) else _str(env.get("numa_layout")),
        "cpu_model": _str(_first(env, ("cpu", "model"), ("cpu_model",))),
        "cpu_cores": int(cores) if isinstance(cores, (int, float)) else None,
        # whole GiB: kernel reservations move the exact figure between boots
        "memory_gib": round(memory / 2**30) if isinstance(memory, (int, float)) else None,
    }
    cluster = {
        "cluster": _str(_first(env, ("cluster",), ("kubernetes", "cluster"))),
        "region": _str(_first(env, ("region",), ("kubernetes", "region"))),
        "availability_zone": _str(_first(env, ("availability_zone",), ("kubernetes", "zone"))),
        "node_pool": _str(_first(env, ("node_pool",), ("kubernetes", "node_pool"))),
        "scheduler_path": _str(status.get("selected_scheduler_path") or status.get("scheduler_path_requested")),
        "resource_flavor": _str(_first(env, ("resource_flavor",), ("kueue", "resource_flavor"))),
    }
    workload = dig(src.spec, "spec", "workload") or {}
    wl = {
        "model": _str(workload.get("model")),
        "precision": _str(workload.get("precision")),
        "protocol": _str(workload.get("protocol")),
        "deployment_model": _str(workload.get("deploymentModel")),
        "batching_policy": _str(workload.get("batchingPolicy")),
        "concurrency_model": _str(workload.get("concurrencyModel")),
        "sequence_length_mix_json": _str(workload.get("sequenceLengthMix")),
    }
    manifest = src.manifest
    lineage = {
        "run_id": src.run_id,
        "artifact_manifest_digest": src.artifact_manifest_digest,
        "workload_spec_digest": src.workload_spec_digest,
        "spec_digest": _str(status.get("spec_digest")),
        "store_uri": portable_store_uri(manifest.store_uri, src.home or src.run_dir.parent.parent) if manifest else None,
        "manifest_uri": None,
        "object_count": len(manifest.objects) if manifest else None,
        "total_bytes": sum(o.size for o in manifest.objects) if manifest else None,
    }
    if manifest is not None and manifest.objects:
        # Objects live at <prefix>sha256/..; the manifest version at <prefix>manifests/<run_id>/<digest>.json.
        first = manifest.objects[0]
        prefix = portable_address(first.uri, first.key).rsplit("sha256/", 1)[0]
        lineage["manifest_uri"] = f"{prefix}manifests/{src.run_id}/{manifest.digest}.json"
    out = {}
    for table, attrs in (
        ("software_version_dim", software),
        ("hardware_topology_dim", hardware),
        ("cluster_region_dim", cluster),
        ("workload_dim", wl),
        ("artifact_lineage_dim", lineage),
    ):
        key_col = dim_key_column(table)
        out[table] = {key_col: dim_key(attrs), **attrs}
    return out


# -- facts ---------------------------------------------------------------------


def _retention(src: RunSources) -> dict[str, Any]:
    sinks = src.sinks()
    ret = dig(sinks, "curatedWarehouse", "retention") or {}
    raw = sinks.get("rawArtifacts") or {}

    def days(name: str) -> int | None:
        v = ret.get(name)
        return int(v) if isinstance(v, (int, float)) else None

    return {
        "retention_hot_days": days("hotDays"),
        "retention_warm_days": days("warmDays"),
        "retention_cold_days": days("coldDays"),
        "raw_retention_class": _str(raw.get("retentionClass")),
        "raw_path_template": _str(raw.get("pathTemplate")),
    }


def benchmark_run_rows(src: RunSources, dims: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    st = src.status
    created, started, finished = (parse_ts(st.get(k)) for k in ("created_utc", "started_utc", "finished_utc"))
    row = _keys(src, scheduler_run_id=st.get("scheduler_run_id"), job_uid=st.get("job_uid"))
    row.update({
        k: _str(st.get(k))
        for k in (
            "name", "phase", "outcome", "benchmark_class_requested", "benchmark_class_granted", "workload_type",
            "cadence", "scheduler_path_requested", "selected_scheduler_path", "variable_under_test",
            "spec_digest", "dagster_run_id",
        )
    })
    row.update(
        created_utc=created,
        started_utc=started,
        finished_utc=finished,
        duration_s=(finished - started).total_seconds() if started and finished else None,
        n_suite_results=len(src.results),
        n_metrics=sum(len(doc.get("metrics", [])) for _, doc in src.results),
        **_retention(src),
    )
    for table, drow in dims.items():
        key_col = dim_key_column(table)
        row[key_col] = drow[key_col]
    # manifest.json is the root of the sealed evidence (it hashes every file); status.json
    # keeps changing after the run is stored, so it is never an object and cannot be raw_uri.
    row.update(src.lineage("manifest.json"))
    return [row]


def _layer(src: RunSources, doc: dict[str, Any]) -> str | None:
    return _str(src.launch_for(doc["suite"], doc.get("replicate", 0)).get("layer") or dig(doc, "parameters", "layer"))


def measurement_rows(src: RunSources) -> list[dict[str, Any]]:
    rows = []
    for relpath, doc in src.results:
        suite, rep = doc.get("suite"), int(doc.get("replicate") or 0)
        base_keys = {**_launch_keys(src, suite, rep), "benchmark_case_id": doc.get("benchmark_case_id")}
        lineage = src.lineage(relpath)
        for m in doc.get("metrics", []):
            keys = dict(base_keys)
            for k in ("scheduler_run_id", "job_uid", "pod_uid", "node_name", "gpu_uuid", "rank_id"):
                if m.get(k) not in (None, ""):
                    keys[k] = m[k]
            row = _keys(src, **keys)
            row.update(
                layer=_layer(src, doc), suite=suite, replicate=rep, case=m.get("case") or "",
                metric=m.get("name"), value=_num(m.get("value")), unit=m.get("unit"),
                direction=m.get("direction"), status=doc.get("status"), reason=_str(doc.get("reason")),
                synthetic=bool(doc.get("synthetic", False)), finished_utc=parse_ts(doc.get("finished_utc")),
                **lineage,
            )
            rows.append(row)
    return rows


def serving_outcome_rows(src: RunSources) -> list[dict[str, Any]]:
    rows = []
    for relpath, doc in src.results:
        serving = doc.get("serving") or []
        if not serving:
            continue
        suite, rep = doc.get("suite"), int(doc.get("replicate") or 0)
        lineage = src.lineage(relpath)
        for point in serving:
            if not isinstance(point, dict):
                continue
            row = _keys(src, **_launch_keys(src, suite, rep), benchmark_case_id=doc.get("benchmark_case_id"))
            row.update(layer=_layer(src, doc), suite=suite, replicate=rep, synthetic=bool(doc.get("synthetic", False)))
            for name, dtype in SERVING_SCALAR_COLUMNS:
                row[name] = _typed(point.get(name), dtype)
            for name, _ in SERVING_DISTRIBUTION_COLUMNS:
                row[name] = _num(point.get(name))
            row.update(lineage)
            rows.append(row)
    return rows


def _typed(value: Any, dtype: pa.DataType) -> Any:
    if pa.types.is_floating(dtype):
        return _num(value)
    if pa.types.is_integer(dtype):
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if pa.types.is_list(dtype):
        return [str(v) for v in value] if isinstance(value, list) else None
    return _str(value)


def training_outcome_rows(src: RunSources) -> list[dict[str, Any]]:
    """One row per ok training replicate, from its result's ``training`` rows."""
    rows = []
    for relpath, doc in src.results:
        training = doc.get("training") or []
        if not training or doc.get("status") != "ok":
            continue
        suite, rep = doc.get("suite"), int(doc.get("replicate") or 0)
        lineage = src.lineage(relpath)
        for point in training:
            if not isinstance(point, dict):
                continue
            # the row is the whole gang's: no rank or node of its own (per-rank step times are
            # measurement_fact's rank_step_time_p50_ms rows, with rank_id and node_name)
            row = _keys(src, **_launch_keys(src, suite, rep), benchmark_case_id=doc.get("benchmark_case_id"))
            row.update(layer=_layer(src, doc), suite=suite, replicate=rep)
            for name, dtype in TRAINING_SCALAR_COLUMNS:
                row[name] = _typed(point.get(name), dtype)
            row.update(lineage)
            rows.append(row)
    return rows


def telemetry_rows(src: RunSources) -> list[dict[str, Any]]:
    """Node- and GPU-scope slices over the run window from the environment capture.

    ``node_name`` is the node the capture describes: a pod's ``pod.node_name`` (its hostname
    is the pod's name), else the hostname. The background-load samples are that node's; the
    orchestrator's (``orchestrator.background_load``, another machine) are not written. A pod
    capture promoted before the orchestrator's were kept apart (no ``orchestrator.background_load``)
    is curated as it was (its hostname, its ``background_load``, the orchestrator's then), so the rows
    of runs signed before stay those their digests cover. The replicates' time series (sampler, Prometheus) come from
    :func:`benchrun.telemetry.facts.slice_tables`.
    """
    env = src.environment
    if not env:
        return []
    start = parse_ts(src.status.get("started_utc")) or parse_ts(src.status.get("created_utc"))
    end = parse_ts(src.status.get("finished_utc"))
    relpath = f"structured/{src.run_id}_environment.json"
    lineage = src.lineage(relpath)
    pod = env.get("pod") if isinstance(env.get("pod"), dict) else {}
    orchestrator = env.get("orchestrator") if isinstance(env.get("orchestrator"), dict) else {}
    # A pod capture promoted before 2026-12-07 (its orchestrator block has no background_load) is curated as it
    # was then (hostname, the load samples as recorded): its rows are in signed digests, which must still verify.
    legacy = env.get("captured_in") == "pod" and "background_load" not in orchestrator
    node = _str(env.get("hostname")) if legacy else (_str(pod.get("node_name")) or _str(env.get("hostname")))
    rows = []

    def add(scope: str, metric: str, value: Any, unit: str, *, source: str = "environment",
            window: tuple[Any, Any] | None = None, **keys: Any) -> None:
        v = _num(value)
        if v is None:
            return
        row = _keys(src, node_name=node, **keys)
        w_start, w_end = window or (start, end)
        row.update(window_start_utc=w_start, window_end_utc=w_end, scope=scope, source=source,
                   metric=metric, value=v, unit=unit, **lineage)
        rows.append(row)

    load = env.get("background_load") if isinstance(env.get("background_load"), dict) else {}
    for when in ("before", "after"):
        sample = load.get(when)
        if not isinstance(sample, dict):
            continue
        t_end = parse_ts(sample.get("sampled_utc"))
        interval = _num(sample.get("interval_s"))
        t_start = t_end - dt.timedelta(seconds=interval) if t_end and interval else t_end
        for metric, unit in (("load_average_1m", "load"), ("load_average_5m", "load"), ("load_average_15m", "load"),
                             ("cpu_busy_share", "fraction"), ("other_processes_cpu_share", "fraction")):
            add("node", f"background_{metric}", sample.get(metric), unit, source=f"environment.background_load.{when}",
                window=(t_start, t_end))
    add("node", "cpu_logical_cores", _first(env, ("cpu", "logical_cores"), ("cores",)), "count")
    add("node", "memory_total_bytes", _first(env, ("memory", "total_bytes"), ("memory_bytes",)), "bytes")
    for gpu in env.get("gpus") or []:
        if isinstance(gpu, dict):
            add("gpu", "gpu_memory_total_mib", gpu.get("memory_total_mib"), "MiB", gpu_uuid=gpu.get("uuid"))
    return rows


def request_files(src: RunSources, *, warn: bool = True) -> Iterator[tuple[Path, str, dict[str, Any]]]:
    """Each result's ``raw/*_requests.parquet``: its path, the name the result gives it, the result."""
    for relpath, doc in src.results:
        sample = (doc.get("samples") or {}).get("requests")
        if not sample:
            continue
        path = sample_path(src.run_dir, sample)
        if path is None:
            if warn:
                log.warning("run %s: %s names %s, outside the run directory: not read", src.run_id, relpath, sample)
            continue
        if not path.is_file():
            if warn:
                log.warning("run %s: %s names %s, which is missing", src.run_id, relpath, sample)
            continue
        yield path, sample, doc


def check_request_files(src: RunSources) -> None:
    """Read every requests file's footer (schema, row groups) before the first table is committed:
    a truncated or foreign file fails the curation while every table still holds the old rows."""
    for path, sample, _ in request_files(src, warn=False):
        try:
            pq.ParquetFile(path).close()
        except (pa.ArrowException, OSError) as exc:
            raise _unreadable(src.run_id, sample, exc) from exc


def _unreadable(run_id: str, name: str, exc: BaseException) -> BenchrunError:
    return BenchrunError(f"run {run_id}: {name} does not read as parquet ({exc}); `benchrun verify {run_id}` "
                         "says whether the evidence changed since it was sealed")


def request_batches(src: RunSources) -> Iterator[pa.RecordBatch]:
    """Rows of every ``raw/*_requests.parquet``, streamed in batches with keys and lineage added."""
    for path, sample, doc in request_files(src):
        suite, rep = doc.get("suite"), int(doc.get("replicate") or 0)
        consts = {
            **_keys(src, **_launch_keys(src, suite, rep), benchmark_case_id=doc.get("benchmark_case_id")),
            "suite": suite, "replicate": rep, **src.lineage(sample),
        }
        try:
            yield from stream_request_file(path, consts)
        except (pa.ArrowException, OSError) as exc:  # damage past the footer shows only while streaming
            raise _unreadable(src.run_id, sample, exc) from exc


def stream_request_file(path: Path, consts: dict[str, Any], batch_rows: int = REQUEST_BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """One requests parquet file as serving_request_fact batches (columns it lacks → null)."""
    schema = SERVING_REQUEST_FACT
    parquet = pq.ParquetFile(path)
    present = set(parquet.schema_arrow.names)
    wanted = [n for n, _ in REQUEST_COLUMNS if n in present] + [k for k in ("request_id", "trace_id", "node_name", "gpu_uuid", "pod_uid") if k in present]
    for batch in parquet.iter_batches(batch_size=batch_rows, columns=wanted):
        n = batch.num_rows
        columns = []
        for field in schema:
            if field.name in present and field.name in wanted:
                col = batch.column(field.name)
                if field.name == "error" and not pa.types.is_string(col.type) and not pa.types.is_null(col.type):
                    col = pc.cast(col, pa.string())
                columns.append(col.cast(field.type))
            else:
                value = consts.get(field.name)
                columns.append(pa.nulls(n, field.type) if value is None else pa.repeat(pa.scalar(value, field.type), n))
        yield pa.RecordBatch.from_arrays(columns, schema=schema)


def launch_rows(src: RunSources) -> list[dict[str, Any]]:
    """One row per replicate launch from ``structured/<run>_launches.json``; the scheduler
    timeline columns come from its ``pod`` message (null for a local launch)."""
    rows = []
    relpath = f"structured/{src.run_id}_launches.json"
    for launch in src.launches:
        if not isinstance(launch, dict):
            continue
        pod = next((m for m in launch.get("messages") or [] if isinstance(m, dict) and m.get("kind") == "pod"), {})
        row = _keys(src, **{k: launch.get(k) for k in ("scheduler_run_id", "job_uid", "pod_uid", "node_name")},
                    benchmark_case_id=launch.get("benchmark_case_id"))
        row.update(
            layer=launch.get("layer"), suite=launch.get("suite"), replicate=int(launch.get("replicate") or 0),
            status=launch.get("status"), reason=_str(launch.get("reason")),
            exit_code=launch.get("exit_code") if isinstance(launch.get("exit_code"), int) else None,
            wall_s=_num(launch.get("wall_s")), requested_utc=parse_ts(launch.get("t_request")),
            finished_utc=parse_ts(launch.get("t_finished")),
            job_name=pod.get("job_name"), workload_name=pod.get("workload_name"), cluster_queue=pod.get("cluster_queue"),
            job_created_utc=parse_ts(pod.get("job_created_utc")), quota_reserved_utc=parse_ts(pod.get("quota_reserved_utc")),
            admitted_utc=parse_ts(pod.get("admitted_utc")), pods_ready_utc=parse_ts(pod.get("pods_ready_utc")),
            pod_scheduled_utc=parse_ts(pod.get("scheduled_utc")),
            container_started_utc=parse_ts(pod.get("container_started_utc")),
            container_finished_utc=parse_ts(pod.get("container_finished_utc")),
            queue_wait_s=_num(pod.get("queue_wait_s")), scheduled_s=_num(pod.get("scheduled_s")),
            started_s=_num(pod.get("started_s")), run_s=_num(pod.get("run_s")),
            image_id=_str(pod.get("image_id")), evicted=_str(pod.get("evicted")),
            **src.lineage(relpath),
        )
        rows.append(row)
    return rows


# The tables whose rows read the run's final status (its phase, finish time): curated while the run
# is Analyzing, they are curated again once the status is final (run_status, before signing, or
# curate_final_status for a run that ended outside it).
FINAL_STATUS_TABLES = ("benchmark_run_fact", "telemetry_slice_fact")
RUN_TABLE = "benchmark_run_fact"  # committed last: its row says the run's curation finished


def curate_final_status(home: Path, run_id: str, run_dir: Path | None = None) -> bool:
    """Curate FINAL_STATUS_TABLES again for a run that ended outside its own asset (its process
    killed, Ctrl-C, a sensor or `cancel` marking it): its facts, curated while it was Analyzing,
    read ``Analyzing | succeeded`` until a rebuild. Read from ``run_dir`` (default ``home/runs/<id>``;
    with shared state, a scratch copy of what these tables read), written to ``home``'s warehouse.
    Only a run that sealed its evidence (curation comes after sealing) is curated, and
    ``warehouse.duckdb``'s views refreshed (they name the metadata files its commits age out); a
    failure is logged, never raised: the run's phase is recorded either way, and
    `benchrun rebuild-warehouse RUN_ID` mends the warehouse. True when curated."""
    from benchrun.paths import validate_run_id
    from benchrun.warehouse.views import refresh_views

    run_dir = Path(run_dir if run_dir is not None else Path(home) / "runs" / validate_run_id(run_id))
    if not (run_dir / "manifest.json").is_file():
        return False
    try:
        curate_run(run_dir, Path(home), tables=list(FINAL_STATUS_TABLES))
    except Exception as exc:  # noqa: BLE001 - the phase is what matters; the warehouse can be rebuilt
        log.warning("run %s ended as recorded, but its warehouse facts still read its earlier phase (%s): "
                    "`benchrun rebuild-warehouse %s` mends them", run_id, exc, run_id)
        return False
    try:
        refresh_views(Path(home))
    except Exception as exc:  # noqa: BLE001 - the facts are committed; the next refresh names them
        log.warning("run %s: warehouse.duckdb's views were not refreshed (%s); the next command that commits, or "
                    "`benchrun maintain-warehouse`, refreshes them", run_id, exc)
    return True


def build_tables(src: RunSources) -> dict[str, Callable[[], Any]]:
    """Producers for every table of one run (called lazily so requests stream)."""
    dims = dimension_rows(src)
    producers: dict[str, Callable[[], Any]] = {
        "benchmark_run_fact": lambda: [rows_to_table("benchmark_run_fact", benchmark_run_rows(src, dims))],
        "launch_fact": lambda: [rows_to_table("launch_fact", launch_rows(src))],
        "measurement_fact": lambda: [rows_to_table("measurement_fact", measurement_rows(src))],
        "serving_outcome_fact": lambda: [rows_to_table("serving_outcome_fact", serving_outcome_rows(src))],
        "serving_request_fact": lambda: request_batches(src),
        "telemetry_slice_fact": lambda: itertools.chain(
            [rows_to_table("telemetry_slice_fact", telemetry_rows(src))],
            slice_tables(src, TABLES["telemetry_slice_fact"])),  # replicate samples (benchrun.telemetry)
        "training_outcome_fact": lambda: [rows_to_table("training_outcome_fact", training_outcome_rows(src))],
    }
    for table, row in dims.items():
        producers[table] = (lambda t=table, r=row: [rows_to_table(t, [r])])
    return producers


def store_rows(home: Path, table: str, run_id: str, batches: Iterable[pa.RecordBatch | pa.Table],
               run_started: dt.datetime | None = None, *, every_day: bool = False) -> int:
    """Replace ``run_id``'s rows of ``table`` in the warehouse this process uses: one Iceberg commit
    (the default; ``run_started`` picks the day partition, or ``every_day``: the run's rows of any
    day are replaced, in the same commit), or the run's parquet partition
    (``BENCHRUN_WAREHOUSE_FORMAT=parquet``). Returns the rows written."""
    from benchrun.warehouse import lake
    from benchrun.warehouse.migrate import migrate_on_first_use

    if lake.enabled():
        migrate_on_first_use(Path(home))  # a home of an earlier release: its parquet layout copied in, once
        return lake.commit_run(Path(home), table, run_id, batches, run_started, every_day=every_day).rows
    return write_partition(Path(home), table, run_id, batches)


STREAMED = ("serving_request_fact", "telemetry_slice_fact")  # read file by file while they are committed


def curate_run(
    run_dir: Path,
    home: Path,
    manifest: ObjectManifest | None = None,
    *,
    tables: list[str] | None = None,
    every_day: bool = False,
) -> dict[str, int]:
    """Write the run's partition of every table (or of ``tables``); return rows per table.

    ``manifest`` is the stored object manifest (``ArtifactStore.put_run_dir``); without it
    the one named by status.json's ``artifact_manifest_digest`` is loaded, else the
    lineage columns stay null. ``every_day``: replace the run's rows whatever day they lie in
    (``rebuild-warehouse``: a run curated before it started, or restored from the store, may
    have them on another day), still one commit per table. The run's files are read, and its
    rows other than the streamed ones built, and the requests files' footers read, before the first
    table is touched: a file that does not read leaves every table as it was.
    """
    src = load_sources(Path(run_dir), manifest, Path(home))
    producers = build_tables(src)
    selected = tables or list(TABLES)
    unknown = [t for t in selected if t not in TABLES]
    if unknown:
        raise ValueError(f"unknown tables {unknown}")
    started = run_start(src.status)
    # Runs finishing together start on different tables, so their Iceberg commits seldom race for one
    # table; the run's own row goes last (as retention removes it last): a curation killed part-way
    # leaves facts without their run row, which readers can tell from a curated run.
    rest = [t for t in selected if t != RUN_TABLE]
    turn = int(hashlib.sha256(src.run_id.encode()).hexdigest(), 16) % max(1, len(rest))
    ordered = rest[turn:] + rest[:turn] + [t for t in selected if t == RUN_TABLE]
    built = {table: producers[table]() if table in STREAMED else list(producers[table]()) for table in ordered}
    if "serving_request_fact" in ordered:
        check_request_files(src)
    counts = {table: store_rows(Path(home), table, src.run_id, built[table], started, every_day=every_day)
              for table in ordered}
    return {table: counts[table] for table in selected}
