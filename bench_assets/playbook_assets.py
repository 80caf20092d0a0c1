"""The scenario playbooks asset: the four playbook verdicts of one run, over the warehouse views."""

import dagster as dg

from bench_assets import tables
from bench_assets.partitions import benchmark_run_partitions
from benchrun.paths import validate_run_id
from resources.warehouse import WarehouseResource

GROUP = "statistics"


@dg.asset(
    partitions_def=benchmark_run_partitions,
    deps=[dg.AssetKey("warehouse_views"), dg.AssetKey("baseline_comparison")],
    group_name=GROUP,
    kinds={"duckdb", "json"},
)
def scenario_playbooks(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    """The four scenario playbooks (tail latency, GPU utilization, straggler, backpressure) for one run."""
    from benchrun.playbooks import record_straggler_nodes, run_playbooks, write_playbooks_report
    from benchrun.playbooks.baseline import default_baseline

    run_id = validate_run_id(context.partition_key)
    from benchrun.lifecycle import pull_sealed_if_absent
    from benchrun.rundir import RunDir

    pull_sealed_if_absent(RunDir.for_run(run_id))  # a re-execution in a fresh run-worker pod
    # the baseline baseline_comparison compared the run with, when its gate passed and it is curated
    baseline, note = default_baseline(warehouse.home_path(), run_id, spec=False)
    if baseline is None and note:
        context.log.warning(f"playbooks run without a baseline: {note}")
    results = run_playbooks(warehouse.home_path(), run_id, baseline)
    path = write_playbooks_report(warehouse.run_dir(run_id), results, note)
    stragglers = record_straggler_nodes(warehouse.run_dir(run_id), results)
    lines = ["| playbook | verdict | reason | evidence rows |", "|---|---|---|---|"] + [
        f"| {r.name} | **{r.verdict}** | {r.reason.replace('|', '/')} | {len(r.rows)} |" for r in results]
    return dg.MaterializeResult(metadata={
        "verdicts": dg.MetadataValue.md("\n".join(lines)),
        "flagged": sum(r.verdict == "flagged" for r in results),
        "straggler_nodes": ", ".join(stragglers) or "none",
        "baseline": baseline or (f"none: {note}" if note else "none"),
        "report": tables.path(path),
        **{f"query_spec_digest/{r.name}": r.query_spec_digest for r in results},
    })


playbook_assets = [scenario_playbooks]
