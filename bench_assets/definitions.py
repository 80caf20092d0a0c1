"""The Dagster code location: every asset, check, job, schedule, sensor and resource."""

from __future__ import annotations

import dagster as dg

from bench_assets.run_assets import (
    component_layer,
    end_to_end_layer,
    micro_layer,
    pinned_spec,
    run_evidence,
    run_status_asset,
)
from resources.launcher import LauncherResource

run_status = run_status_asset([])

benchmark_run_job = dg.define_asset_job(
    "benchmark_run_job",
    selection=dg.AssetSelection.assets(
        pinned_spec, micro_layer, component_layer, end_to_end_layer, run_evidence, run_status
    ),
    executor_def=dg.in_process_executor,
    description="One BenchmarkRun, end to end, for its partition (run_id).",
)

defs = dg.Definitions(
    assets=[pinned_spec, micro_layer, component_layer, end_to_end_layer, run_evidence, run_status],
    jobs=[benchmark_run_job],
    resources={"launcher": LauncherResource()},
)
