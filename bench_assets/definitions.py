"""The Dagster code location: every asset, check, job, schedule, sensor and resource."""

import dagster as dg

from bench_assets.playbook_assets import playbook_assets
from bench_assets.publish_assets import hot_metrics, provenance_attestation, publish_assets
from bench_assets.run_assets import (
    component_layer,
    end_to_end_layer,
    micro_layer,
    pinned_spec,
    run_evidence,
    run_status_asset,
    run_succeeded,
)
from bench_assets.stats_assets import change_points, run_report, stats_assets, stats_checks, stats_resources
from bench_assets.warehouse_assets import (
    warehouse_assets,
    warehouse_maintenance,
    warehouse_resources,
    warehouse_retention,
    warehouse_run_assets,
    warehouse_views,
)
from benchrun.automation.settings import starts_on
from resources.launcher import LauncherResource
from schedules import all_schedules
from sensors import all_sensors

# run_status settles the phase last: after the evidence, the warehouse, the report and
# what is published (hot metrics, the signed attestation).
run_status = run_status_asset(
    [warehouse_views.key, run_report.key, hot_metrics.key, provenance_attestation.key]
)

run_assets = [pinned_spec, micro_layer, component_layer, end_to_end_layer, run_evidence, run_status]
# Everything partitioned by run_id; change_points reads history across runs and runs on its own.
partitioned = [
    *run_assets,
    *warehouse_run_assets,
    *[a for a in stats_assets if a is not change_points],
    *playbook_assets,
    *publish_assets,
]

benchmark_run_job = dg.define_asset_job(
    "benchmark_run_job",
    selection=dg.AssetSelection.assets(*partitioned),
    executor_def=dg.in_process_executor,
    description="One BenchmarkRun, end to end, for its partition (run_id).",
)

history_job = dg.define_asset_job(
    "history_job",
    selection=dg.AssetSelection.assets(change_points),
    executor_def=dg.in_process_executor,
    description="Change points over the history of every series.",
)

retention_job = dg.define_asset_job(
    "retention_job",
    selection=dg.AssetSelection.assets(warehouse_retention),
    executor_def=dg.in_process_executor,
    description="Warehouse retention (dry run unless configured with apply: true).",
)

maintenance_job = dg.define_asset_job(
    "warehouse_maintenance_job",
    selection=dg.AssetSelection.assets(warehouse_maintenance),
    executor_def=dg.in_process_executor,
    description="Iceberg compaction and snapshot expiry (BENCHRUN_WAREHOUSE_FORMAT=iceberg).",
)
# Daily at 03:30 UTC; off until an operator turns it on (the parquet layout has nothing to
# maintain): the UI toggle, or BENCHRUN_AUTOMATION_ON=warehouse_maintenance_schedule (or all).
maintenance_schedule = dg.ScheduleDefinition(
    name="warehouse_maintenance_schedule", job=maintenance_job, cron_schedule="30 3 * * *",
    execution_timezone="UTC",
    default_status=(dg.DefaultScheduleStatus.RUNNING if starts_on("warehouse_maintenance_schedule", False)
                    else dg.DefaultScheduleStatus.STOPPED),
)

# Change points over every series once a day, after the nightly window (03:15 UTC) has run: on by
# default (it reads the warehouse and writes change_point_fact; before, nothing ran history_job, so
# the nightly alarms never reached the warehouse; found in review). BENCHRUN_AUTOMATION_OFF=history_schedule
# turns it off.
history_schedule = dg.ScheduleDefinition(
    name="history_schedule", job=history_job, cron_schedule="0 8 * * *", execution_timezone="UTC",
    default_status=(dg.DefaultScheduleStatus.RUNNING if starts_on("history_schedule", True)
                    else dg.DefaultScheduleStatus.STOPPED),
)
# Retention applied daily at 05:00 UTC (hotDays/coldDays, raw objects past their class): it deletes,
# so it is off until an operator turns it on (the UI toggle, or BENCHRUN_AUTOMATION_ON=retention_schedule);
# `benchrun retention` (a dry run by default) lists what it would remove.
retention_schedule = dg.ScheduleDefinition(
    name="retention_schedule", job=retention_job, cron_schedule="0 5 * * *", execution_timezone="UTC",
    run_config={"ops": {"warehouse_retention": {"config": {"apply": True}}}},
    default_status=(dg.DefaultScheduleStatus.RUNNING if starts_on("retention_schedule", False)
                    else dg.DefaultScheduleStatus.STOPPED),
)

defs = dg.Definitions(
    assets=[*run_assets, *warehouse_assets, *stats_assets, *playbook_assets, *publish_assets],
    asset_checks=[*stats_checks, run_succeeded],
    jobs=[benchmark_run_job, history_job, retention_job, maintenance_job],
    schedules=[*all_schedules, maintenance_schedule, history_schedule, retention_schedule],
    sensors=all_sensors,
    resources={"launcher": LauncherResource.from_env(), **warehouse_resources, **stats_resources},
)
