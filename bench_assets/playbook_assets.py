"""The scenario playbooks asset: the four playbook verdicts of one run, over the warehouse views."""

import json
from typing import Optional

import dagster as dg

from bench_assets.partitions import benchmark_run_partitions
from benchrun.paths import validate_run_id
from resources.warehouse import WarehouseResource

GROUP = "statistics"


def _baseline(context: dg.AssetExecutionContext, warehouse: WarehouseResource, run_id: str) -> Optional[str]:
    """The baseline baseline_comparison resolved (its comparison document), when it is in the warehouse."""
    from benchrun.playbooks import in_warehouse

    path = warehouse.run_dir(run_id) / "structured" / f"{run_id}_comparison.json"
    if not path.is_file():
        return None
    base = json.loads(path.read_text(encoding="utf-8")).get("baseline")
    if not base or base == run_id:
        return None
    if not in_warehouse(warehouse.home_path(), validate_run_id(base)):
        context.log.warning(f"baseline {base} is not curated into the warehouse; playbooks run without it")
        return None
    return base


@dg.asset(
    partitions_def=benchmark_run_partitions,
    deps=[dg.AssetKey("warehouse_views"), dg.AssetKey("baseline_comparison")],
    group_name=GROUP,
    kinds={"duckdb", "json"},
)
def scenario_playbooks(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    """The four scenario playbooks (tail latency, GPU utilization, straggler, backpressure) for one run."""
    from benchrun.playbooks import record_straggler_nodes, run_playbooks, write_playbooks_report

    run_id = validate_run_id(context.partition_key)
    baseline = _baseline(context, warehouse, run_id)
    results = run_playbooks(warehouse.home_path(), run_id, baseline)
    path = write_playbooks_report(warehouse.run_dir(run_id), results)
    stragglers = record_straggler_nodes(warehouse.run_dir(run_id), results)
    lines = ["| playbook | verdict | reason | evidence rows |", "|---|---|---|---|"] + [
        f"| {r.name} | **{r.verdict}** | {r.reason.replace('|', '/')} | {len(r.rows)} |" for r in results]
    return dg.MaterializeResult(metadata={
        "verdicts": dg.MetadataValue.md("\n".join(lines)),
        "flagged": sum(r.verdict == "flagged" for r in results),
        "straggler_nodes": ", ".join(stragglers) or "none",
        "baseline": baseline or "none",
        "report": dg.MetadataValue.path(str(path)),
        **{f"query_spec_digest/{r.name}": r.query_spec_digest for r in results},
    })


playbook_assets = [scenario_playbooks]
