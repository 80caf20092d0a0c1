"""Dagster-level tests: the warehouse assets materialize a run's partition through a real instance."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from bench_assets.warehouse_assets import warehouse_assets, warehouse_retention, warehouse_tables, warehouse_views
from benchrun.rundir import MUTABLE_FILES
from benchrun.store import open_store
from benchrun.fsio import atomic_write_json
from benchrun.warehouse import TABLES, query
from resources.warehouse import WarehouseResource
from test_store_helpers import load_json, make_run_dir


PARTITIONED = [warehouse_tables, warehouse_views]


@dg.asset(partitions_def=dg.DynamicPartitionsDefinition(name="benchmark_run"), name="run_evidence")
def stub_run_evidence() -> None:
    """Test-only stand-in for the lead's run_evidence asset (the run dir is built by hand)."""


def _stored(home: Path, run_id: str) -> None:
    run_dir = make_run_dir(home, run_id)
    # sealed as record_evidence seals a real run: status.json keeps changing, so it is left out
    manifest = open_store(None, home).put_run_dir(run_dir, run_id, exclude=MUTABLE_FILES)
    status = load_json(run_dir / "status.json")
    status["artifact_manifest_digest"] = manifest.digest
    atomic_write_json(run_dir / "status.json", status)


def test_asset_definitions() -> None:
    specs = {spec.key.to_user_string(): spec for spec in warehouse_tables.specs}
    assert set(specs) == set(TABLES)
    for spec in specs.values():
        assert spec.group_name == "warehouse" and dg.AssetKey("run_evidence") in {d.asset_key for d in spec.deps}
        assert set(spec.kinds) == {"iceberg", "duckdb"}
        assert spec.partitions_def.name == "benchmark_run"
    assert warehouse_views.op.pool == "duckdb_writer"
    defs = dg.Definitions(assets=[stub_run_evidence, *warehouse_assets], resources={"warehouse": WarehouseResource()})
    assert defs.resolve_asset_graph().get(dg.AssetKey("measurement_fact")).parent_keys == {dg.AssetKey("run_evidence")}


@pytest.mark.slow
def test_materialize_partition(tmp_path: Path) -> None:
    _stored(tmp_path, "run-a")
    _stored(tmp_path, "run-b")
    resources = {"warehouse": WarehouseResource(home=str(tmp_path))}
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("benchmark_run", ["run-a", "run-b"])
        for run_id in ("run-a", "run-a", "run-b"):  # run-a twice: re-materializing replaces, no duplicates
            result = dg.materialize(PARTITIONED, instance=instance, partition_key=run_id, resources=resources)
            assert result.success
        mats = {m.asset_key.to_user_string(): m
                for m in (e.event_specific_data.materialization for e in result.get_asset_materialization_events())}
        assert mats["measurement_fact"].metadata["dagster/row_count"].value == 9
        assert mats["serving_request_fact"].metadata["dagster/row_count"].value == 60
        assert mats["training_outcome_fact"].metadata["dagster/row_count"].value == 0
        assert mats["warehouse_views"].metadata["measurement_rows_this_run"].value == 9
        assert mats["measurement_fact"].partition == "run-b"
        checks = result.get_asset_check_evaluations()
        assert [(c.check_name, c.passed) for c in checks] == [("lineage_complete", True)]
        assert checks[0].metadata["rows"].value == 9
        # a run whose evidence was never stored: curated, but the lineage check fails
        make_run_dir(tmp_path, "run-c")
        instance.add_dynamic_partitions("benchmark_run", ["run-c"])
        result = dg.materialize(PARTITIONED, instance=instance, partition_key="run-c", resources=resources)
        assert result.success
        checks = result.get_asset_check_evaluations()
        assert [(c.check_name, c.passed) for c in checks] == [("lineage_complete", False)]
        assert checks[0].metadata["rows_without_raw_object"].value == 9
    # the retention asset: a dry run over young runs lists nothing and removes nothing
    result = dg.materialize([warehouse_retention], resources=resources)
    meta = result.asset_materializations_for_node("warehouse_retention")[0].metadata
    assert meta["applied"].value is False and meta["partitions"].value == 0 and meta["raw_objects"].value == 0
    assert query("SELECT count(*) FROM measurement_fact", tmp_path).table.column(0)[0].as_py() == 27
    assert query("SELECT count(*) FROM measurement_fact WHERE raw_uri IS NULL", tmp_path).table.column(0)[0].as_py() == 9
    # the run row of a stored run walks back to its sealed manifest.json, even without status.json stored
    runs = query("SELECT run_id, raw_path, raw_uri IS NOT NULL AS stored FROM benchmark_run_fact ORDER BY run_id",
                 tmp_path).table.to_pylist()
    assert runs == [{"run_id": "run-a", "raw_path": "manifest.json", "stored": True},
                    {"run_id": "run-b", "raw_path": "manifest.json", "stored": True},
                    {"run_id": "run-c", "raw_path": "manifest.json", "stored": False}]
    assert (tmp_path / "warehouse.duckdb").is_file()


def test_every_table_asset_is_described_as_the_kind_it_is():
    """Found in review: launch_fact (one row per launch) read in the UI as "The launch_fact dimension",
    the fallback of a table with no description of its own."""
    from bench_assets.warehouse_assets import _spec
    from benchrun.warehouse.schemas import DIMENSIONS, TABLES

    for table in TABLES:
        spec = _spec(table)
        kind = spec.metadata["table_kind"]
        assert kind == ("dimension" if table in DIMENSIONS else "fact")
        assert kind == "dimension" or "dimension" not in spec.description, (table, spec.description)
