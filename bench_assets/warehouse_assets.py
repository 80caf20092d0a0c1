"""The warehouse assets: each fact and dimension table per run, and the DuckDB views over them."""


from typing import Iterator

import dagster as dg

from bench_assets import tables
from bench_assets.partitions import benchmark_run_partitions
from benchrun.paths import validate_run_id
from benchrun.warehouse.schemas import DIMENSIONS, TABLES
from resources.store import artifact_store
from resources.warehouse import WarehouseResource, warehouse

GROUP = "warehouse"
RUN_EVIDENCE = dg.AssetKey("run_evidence")

_DESCRIPTIONS = {
    "benchmark_run_fact": "One row per run: identity, intent, scheduler path, class requested and granted, phase, times, digests.",
    "measurement_fact": "One row per run x case x replicate x metric: value, unit, direction, status.",
    "serving_outcome_fact": "One row per run x load point x bucket x replicate with the serving metrics.",
    "serving_request_fact": "One row per served request (tail analysis), from the raw requests parquet.",
    "telemetry_slice_fact": "Run x time window x node/gpu/rank scope samples (environment capture, suite samples).",
    "launch_fact": "One row per replicate launch: status, reason and exit code, its Job/Kueue workload and queue, "
                   "the admission and start-up times and waits, its image and any eviction.",
    "training_outcome_fact": "Training outcomes per run x case x replicate (schema only until a training suite fills it).",
}


def _spec(table: str) -> dg.AssetSpec:
    kind = "dimension" if table in DIMENSIONS else "fact"
    return dg.AssetSpec(
        key=table,
        deps=[RUN_EVIDENCE],
        partitions_def=benchmark_run_partitions,
        group_name=GROUP,
        kinds={"iceberg", "duckdb"},
        description=_DESCRIPTIONS.get(table, f"The {table} dimension, keyed by a hash of its natural attributes."),
        metadata={"table_kind": kind, "columns": dg.TableSchema(
            columns=[dg.TableColumn(f.name, str(f.type)) for f in TABLES[table]])},
        skippable=True,
    )


LINEAGE_CHECK = dg.AssetCheckSpec(
    "lineage_complete",
    asset="measurement_fact",
    description="Every measurement row of the run names its stored raw object and artifact_manifest_digest.",
)


@dg.multi_asset(specs=[_spec(t) for t in TABLES], check_specs=[LINEAGE_CHECK], can_subset=True, name="warehouse_tables")
def warehouse_tables(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource
) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
    """Curate the run's rows of every selected table: one Iceberg commit per table replacing exactly
    them (the default), or its parquet partition, atomically replaced (BENCHRUN_WAREHOUSE_FORMAT=parquet)."""
    from benchrun.warehouse import lake

    run_id = validate_run_id(context.partition_key)
    selected = [key.to_user_string() for key in context.selected_asset_keys]
    from benchrun.lifecycle import pull_sealed_if_absent
    from benchrun.rundir import RunDir

    pull_sealed_if_absent(RunDir.for_run(run_id))  # a re-execution in a fresh run-worker pod
    counts = warehouse.curate(run_id, selected)
    root = warehouse.home_path() / "warehouse"
    iceberg = lake.enabled()
    for table, rows in counts.items():
        where = ({"iceberg_table": f"{lake.NAMESPACE}.{table}",
                  "table_location": dg.MetadataValue.text(lake.table_location(warehouse.home_path()))} if iceberg else
                 {"partition_file": tables.path(root / table / f"run_id={run_id}" / "part.parquet")})
        yield dg.MaterializeResult(asset_key=table, metadata={"dagster/row_count": rows, **where})
    if LINEAGE_CHECK.key in context.selected_asset_check_keys:
        missing = warehouse.query(
            "SELECT count(*) FILTER (WHERE raw_uri IS NULL OR artifact_manifest_digest IS NULL), count(*) "
            f"FROM measurement_fact WHERE run_id = '{run_id}'"  # a DNS-1123 label: safe inside a SQL literal
        ).table.to_pylist()[0]
        bad, total = list(missing.values())
        yield dg.AssetCheckResult(
            check_name="lineage_complete", asset_key="measurement_fact", passed=bad == 0,
            metadata={"rows": total, "rows_without_raw_object": bad},
            description=None if bad == 0 else f"{bad} of {total} rows lack a stored raw object; store the evidence first",
        )


@dg.asset(
    partitions_def=benchmark_run_partitions,
    deps=[dg.AssetKey(t) for t in TABLES],
    group_name=GROUP,
    kinds={"duckdb"},
    pool="duckdb_writer",
)
def warehouse_views(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    """The DuckDB views over every table's parquet (the single writer of warehouse.duckdb)."""
    db = warehouse.refresh_views()
    totals = {t: warehouse.query(f'SELECT count(*) FROM "{t}"').table.column(0)[0].as_py() for t in TABLES}
    run_id = validate_run_id(context.partition_key)
    run = warehouse.query(f"SELECT count(*) FROM measurement_fact WHERE run_id = '{run_id}'").table.column(0)[0].as_py()
    lines = ["| table | rows (all runs) |", "|---|---|"] + [f"| {t} | {n} |" for t, n in totals.items()]
    return dg.MaterializeResult(
        metadata={
            "duckdb_file": tables.path(db),
            "rows": dg.MetadataValue.md("\n".join(lines)),
            "measurement_rows_this_run": run,
        }
    )


class RetentionConfig(dg.Config):
    """``apply: true`` removes what the pass lists; the default is a dry run."""

    apply: bool = False


@dg.asset(group_name=GROUP, kinds={"parquet", "duckdb"}, pool="duckdb_writer")
def warehouse_retention(config: RetentionConfig, warehouse: WarehouseResource) -> dg.MaterializeResult:
    """Curated partitions past coldDays and raw objects past their retention class (dry run unless apply).
    With shared state (a fresh run-worker pod on Kubernetes) the pass reads the ``published/`` aliases and
    ``delete``'s tombstones from the shared prefix, and its record goes there (``benchrun.warehouse.retention``)."""
    from benchrun.sharedstate import shared_state
    from benchrun.warehouse.retention import apply_retention, plan_retention

    home = warehouse.home_path()
    plan = plan_retention(home)
    record = apply_retention(home, plan) if config.apply else None
    shared = shared_state()
    tiers = "\n".join(["| run | age (days) | tier |", "|---|---|---|"] + [
        f"| {r.run_id} | {'' if r.age_days is None else f'{r.age_days:.1f}'} | {r.tier} |" for r in plan.runs])
    return dg.MaterializeResult(metadata={
        "applied": config.apply,
        "partitions": len(plan.partitions),
        "raw_objects": len(plan.objects),
        "raw_objects_kept": plan.kept_objects,
        "runs": dg.MetadataValue.md(tiers),
        "notes": dg.MetadataValue.json(plan.notes),
        "record": tables.path(record) if record else "dry run: nothing removed",
        **({"record_shared": f"{shared.uri}{record.relative_to(home).as_posix()}"} if shared and record else {}),
    })


class MaintenanceConfig(dg.Config):
    """Snapshots older than ``expire_days`` are expired; ``dry_run: true`` lists and changes nothing."""

    expire_days: float = 7.0
    dry_run: bool = False


@dg.asset(group_name=GROUP, kinds={"iceberg", "duckdb"})
def warehouse_maintenance(context: dg.AssetExecutionContext, config: MaintenanceConfig,
                          warehouse: WarehouseResource) -> dg.MaterializeResult:
    """The Iceberg tables compacted (one file per day and suite), their old snapshots expired and the
    files no snapshot references any more removed."""
    import datetime as dt

    from benchrun.warehouse import lake

    home = warehouse.home_path()
    if not lake.enabled():
        return dg.MaterializeResult(metadata={"skipped": f"{lake.FORMAT_ENV} is not iceberg: nothing to maintain"})
    from benchrun.warehouse.lake_commands import maintain_tables
    from benchrun.warehouse.migrate import migrate_on_first_use

    # The first-use migration first, as `maintain-warehouse` does. Found in review: maintaining a home of an
    # earlier release created the (empty) tables, the migration then held back (tables exist), and the
    # home's runs no longer read. A dry run changes nothing, so it does not migrate either.
    if not config.dry_run:
        migrate_on_first_use(home)
    cutoff = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=config.expire_days)

    lines = ["| table | files before | files after | snapshots expired | unreferenced files removed |",
             "|---|---|---|---|---|"]
    done, failed = maintain_tables(home, cutoff, dry_run=config.dry_run)
    for table, (before, after, expired, removed) in done.items():
        dry = " (dry run)" if config.dry_run else ""
        lines.append(f"| {table} | {before} | {after} | {expired}{dry} | {removed}{dry} |")
    for table, why in failed.items():  # one damaged table: said, and the others still maintained (as the CLI does)
        context.log.error(f"{table}: not maintained: {why}")
        lines.append(f"| {table} | not maintained: {why} | | | |")
    if failed:
        raise dg.Failure(description=f"{len(failed)} table(s) not maintained ({', '.join(failed)}); the others were",
                         metadata={"tables": dg.MetadataValue.md("\n".join(lines))})
    return dg.MaterializeResult(metadata={"dry_run": config.dry_run, "tables": dg.MetadataValue.md("\n".join(lines))})


# Per-run assets (partitioned by benchmark_run: put them in the run's job) and everything.
warehouse_run_assets: list = [warehouse_tables, warehouse_views]
warehouse_assets: list = [*warehouse_run_assets, warehouse_retention, warehouse_maintenance]
warehouse_resources: dict = {"warehouse": warehouse, "artifact_store": artifact_store}
