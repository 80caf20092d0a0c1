"""Tests for curation into parquet, the DuckDB views, read-only queries and lineage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from benchrun.errors import BenchrunError
from benchrun.store import open_store
from benchrun.warehouse import TABLES, curate_run, query, query_spec_digest, refresh_views
from benchrun.warehouse.lineage import trace
from benchrun.warehouse.schemas import JOIN_KEY_NAMES
from benchrun.warehouse.views import normalise_sql
from test_store_helpers import make_run_dir

REPO = Path(__file__).resolve().parents[1]


def _stored_run(home: Path, run_id: str, **kw):
    run_dir = make_run_dir(home, run_id, **kw)
    manifest = open_store(None, home).put_run_dir(run_dir, run_id)
    return run_dir, manifest


def _count(home: Path, sql: str) -> int:
    return query(sql, home).table.column(0)[0].as_py()


def test_curate_writes_every_table_with_keys_and_lineage(tmp_path: Path) -> None:
    run_dir, manifest = _stored_run(tmp_path, "run-a")
    counts = curate_run(run_dir, tmp_path, manifest)
    assert counts == {
        "benchmark_run_fact": 1, "launch_fact": 6, "measurement_fact": 9, "serving_outcome_fact": 3, "serving_request_fact": 60,
        "telemetry_slice_fact": 7, "training_outcome_fact": 0, "software_version_dim": 1,
        "hardware_topology_dim": 1, "cluster_region_dim": 1, "workload_dim": 1, "artifact_lineage_dim": 1,
    }
    for table, schema in TABLES.items():  # the views show exactly the table's own columns (Iceberg adds run_started_utc)
        assert query(f'SELECT * FROM "{table}" LIMIT 0', tmp_path).table.column_names == schema.names, table
        if table.endswith("_fact"):
            assert set(JOIN_KEY_NAMES) <= set(schema.names)
            assert {"workload_spec_digest", "artifact_manifest_digest", "raw_uri"} <= set(schema.names)
    rows = query(
        "SELECT replicate, value, layer, suite, \"case\", unit, direction, status, benchmark_case_id, node_name, "
        "rank_id, request_id, raw_uri, raw_path, raw_sha256, artifact_manifest_digest, workload_spec_digest "
        "FROM measurement_fact WHERE metric = 'gflops' ORDER BY replicate",
        tmp_path,
    ).table.to_pylist()
    assert [r["value"] for r in rows] == [10.0, 12.0, 11.0]
    first = rows[0]
    entry = manifest.entry("structured/run-a_gemm_r1.json")
    assert (first["layer"], first["suite"], first["case"], first["unit"], first["direction"], first["status"]) == (
        "micro", "gemm", "n=256,fp32", "GFLOP/s", "higher", "ok")
    assert first["benchmark_case_id"] == "case-micro-1"
    assert first["node_name"] is None and first["rank_id"] is None and first["request_id"] is None  # never invented
    # the address is relative to the store's root (issue 16 N: a moved home keeps its lineage)
    assert (first["raw_uri"], first["raw_path"], first["raw_sha256"]) == (entry.key, entry.path, entry.sha256)
    assert first["artifact_manifest_digest"] == manifest.digest and first["workload_spec_digest"] == "b" * 64
    # a metric that carried node_name keeps it
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact WHERE metric='wall_ms' AND node_name='node-a'") == 3
    req = query("SELECT request_id, trace_id, replicate, benchmark_case_id, ttft_ms, raw_path FROM serving_request_fact "
                "WHERE request_id = 'r2-3'", tmp_path).table.to_pylist()
    assert req == [{"request_id": "r2-3", "trace_id": "t2-3", "replicate": 2, "benchmark_case_id": "case-serve-2",
                    "ttft_ms": 13.0, "raw_path": "raw/run-a_serving_r2_requests.parquet"}]
    so = query("SELECT point, bucket, n_requests, e2e_ms_p99, request_goodput, verdict FROM serving_outcome_fact "
               "WHERE replicate = 1", tmp_path).table.to_pylist()
    assert so == [{"point": "c=4", "bucket": "512/128", "n_requests": 20, "e2e_ms_p99": 137.6,
                   "request_goodput": None, "verdict": "valid"}]
    run = query("SELECT phase, duration_s, retention_cold_days, raw_retention_class, workload_key FROM benchmark_run_fact",
                tmp_path).table.to_pylist()[0]
    assert run["phase"] == "Succeeded" and run["duration_s"] == 50.0
    # the run row walks back to manifest.json, the root of the sealed evidence
    root = manifest.entry("manifest.json")
    assert query("SELECT raw_uri, raw_path, raw_sha256 FROM benchmark_run_fact", tmp_path).table.to_pylist() == [
        {"raw_uri": root.key, "raw_path": "manifest.json", "raw_sha256": root.sha256}]
    assert run["retention_cold_days"] == 730 and run["raw_retention_class"] == "cold_immutable"
    tel = query("SELECT node_name, scope, source, value, window_start_utc, window_end_utc FROM telemetry_slice_fact "
                "WHERE metric = 'background_load_average_1m'", tmp_path).table.to_pylist()
    assert len(tel) == 1 and tel[0]["node_name"] == "node-a" and tel[0]["value"] == 0.5
    assert tel[0]["source"] == "environment.background_load.before"
    assert (tel[0]["window_end_utc"] - tel[0]["window_start_utc"]).total_seconds() == 0.5
    sw = query("SELECT python_version, os, framework_version, packages_json FROM software_version_dim", tmp_path).table.to_pylist()
    assert sw == [{"python_version": "3.12.3", "os": "Debian 13", "framework_version": "2.13.0",
                   "packages_json": '{"duckdb":"1.4.1","numpy":"2.3.4","torch":"2.13.0"}'}]
    hw = query("SELECT cpu_model, cpu_cores, memory_gib, gpu_count, numa_layout FROM hardware_topology_dim", tmp_path).table.to_pylist()
    assert hw == [{"cpu_model": "Test CPU", "cpu_cores": 2, "memory_gib": 24, "gpu_count": 0, "numa_layout": '[[0,"0-1"]]'}]
    lin = query("SELECT manifest_uri, object_count FROM artifact_lineage_dim", tmp_path).table.to_pylist()[0]
    assert open_store(None, tmp_path).exists(lin["manifest_uri"])  # relative to the store's root
    assert lin == {"manifest_uri": f"manifests/run-a/{manifest.digest}.json", "object_count": len(manifest.objects)}
    wl = query("SELECT * FROM workload_dim", tmp_path).table.to_pylist()
    assert wl[0]["workload_key"] == run["workload_key"] and wl[0]["model"] == "tiny-llm"


def test_recurate_replaces_and_dims_are_shared(tmp_path: Path) -> None:
    run_a, man_a = _stored_run(tmp_path, "run-a")
    curate_run(run_a, tmp_path, man_a)
    curate_run(run_a, tmp_path, man_a)
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact") == 9
    assert _count(tmp_path, "SELECT count(*) FROM serving_request_fact") == 60
    run_b, man_b = _stored_run(tmp_path, "run-b", gflops=(20.0,))
    curate_run(run_b, tmp_path, man_b)
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact") == 18
    # same software, hardware, workload: one dimension row each; lineage differs per run
    for dim in ("software_version_dim", "hardware_topology_dim", "cluster_region_dim", "workload_dim"):
        assert _count(tmp_path, f"SELECT count(*) FROM {dim}") == 1, dim
    assert _count(tmp_path, "SELECT count(*) FROM artifact_lineage_dim") == 2
    # a join from facts to dims works for both runs
    assert _count(tmp_path, "SELECT count(DISTINCT f.run_id) FROM benchmark_run_fact f "
                            "JOIN software_version_dim s USING (software_version_key)") == 2
    # re-curating after the run lost its serving results replaces exactly its rows
    for p in (run_b / "structured").glob("run-b_serving_r*.json"):
        p.unlink()
    curate_run(run_b, tmp_path, None)
    assert _count(tmp_path, "SELECT count(*) FROM serving_request_fact WHERE run_id='run-b'") == 0
    assert _count(tmp_path, "SELECT count(*) FROM serving_request_fact WHERE run_id='run-a'") == 60


def test_views_built_once_until_a_partition_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parquet_layout: None) -> None:
    from benchrun.warehouse import views

    run_a, man_a = _stored_run(tmp_path, "run-a")
    curate_run(run_a, tmp_path, man_a)
    built = []
    real = views.create_views
    monkeypatch.setattr(views, "create_views", lambda con, home: built.append(home) or real(con, home))
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact") == 9
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact") == 9
    assert len(built) == 1  # the second query reused the views
    run_b, man_b = _stored_run(tmp_path, "run-b", gflops=(20.0,))
    curate_run(run_b, tmp_path, man_b)  # new partitions: the views are rebuilt
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact") == 18
    assert len(built) == 2
    curate_run(run_b, tmp_path, man_b)  # rewritten partitions (same content, new files): rebuilt too
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact") == 18
    assert len(built) == 3


def test_absent_optional_files_give_empty_tables(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path, "run-min", replicates=1)
    for name in ("run-min_environment.json", "run-min_launches.json", "run-min_spec.yaml"):
        (run_dir / "structured" / name).unlink()
    for p in (run_dir / "structured").glob("*_r*.json"):
        p.unlink()
    counts = curate_run(run_dir, tmp_path, None)
    assert counts["benchmark_run_fact"] == 1 and counts["measurement_fact"] == 0
    assert counts["telemetry_slice_fact"] == 0 and counts["serving_request_fact"] == 0
    row = query("SELECT raw_uri, artifact_manifest_digest, retention_cold_days FROM benchmark_run_fact", tmp_path).table.to_pylist()
    assert row == [{"raw_uri": None, "artifact_manifest_digest": None, "retention_cold_days": None}]
    with pytest.raises(BenchrunError, match="status.json"):
        curate_run(tmp_path / "nowhere", tmp_path, None)


def test_views_in_duckdb_file_and_empty_warehouse(tmp_path: Path) -> None:
    from benchrun.warehouse.duck import connect_with_extensions

    # no runs yet: every view exists and is empty, typed
    db = refresh_views(tmp_path)
    assert _count(tmp_path, "SELECT count(*) FROM training_outcome_fact") == 0
    run_dir, manifest = _stored_run(tmp_path, "run-a")
    curate_run(run_dir, tmp_path, manifest)
    refresh_views(tmp_path)
    # the Iceberg tables' views need the iceberg extension in whatever opens the file (here: the pinned wheels')
    con = connect_with_extensions(str(db), access_mode="READ_ONLY")
    try:
        assert con.execute("SELECT count(*) FROM measurement_fact").fetchone()[0] == 9
        views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    finally:
        con.close()
    assert views == set(TABLES)
    refresh_views(tmp_path)  # the file is not held open by anyone: the writer gets it again


def test_query_is_read_only_and_digest_is_normalised(tmp_path: Path) -> None:
    with pytest.raises(BenchrunError, match="COPY (statements are|is) refused"):
        query("COPY (SELECT 1) TO '/tmp/x.csv'", tmp_path)
    with pytest.raises(BenchrunError, match="exactly one statement"):
        query("SELECT 1; SELECT 2", tmp_path)
    with pytest.raises(BenchrunError, match="query failed"):
        query("SELECT nope FROM measurement_fact", tmp_path)
    a = "SELECT  metric -- the name\n FROM measurement_fact ;"
    b = "SELECT metric FROM /* x */ measurement_fact"
    assert normalise_sql(a) == "SELECT metric FROM measurement_fact"
    assert query_spec_digest(a) == query_spec_digest(b) != query_spec_digest("SELECT 'a  b'")
    assert normalise_sql("SELECT 'a  --b'") == "SELECT 'a  --b'"


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "BENCHRUN_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "benchrun.cli", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=120)


@pytest.mark.slow
def test_cli_query_lineage_and_tamper(tmp_path: Path) -> None:
    run_dir, manifest = _stored_run(tmp_path, "run-a")
    curate_run(run_dir, tmp_path, manifest)
    out = _cli(tmp_path, "query", "SELECT count(*) AS n FROM measurement_fact", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["rows"] == [{"n": 9}] and len(doc["query_spec_digest"]) == 64
    out = _cli(tmp_path, "query", "SELECT metric, value FROM measurement_fact WHERE metric='gflops' ORDER BY value", "--csv")
    # a DOUBLE written whole, as itself (`.6g` wrote 10 here, and 1796616697.659352 as 1.79662e+09)
    assert out.stdout.splitlines() == ["metric,value", "gflops,10.0", "gflops,11.0", "gflops,12.0"]
    out = _cli(tmp_path, "query", "DROP VIEW measurement_fact")
    assert out.returncode == 1 and out.stderr.startswith("error: query: DROP") and "Traceback" not in out.stderr

    reports = trace(tmp_path, "run-a", "gflops")
    assert len(reports) == 1 and reports[0].median == 11.0 and reports[0].replicates == 3
    assert reports[0].artifact_manifest_digest == manifest.digest
    assert [s.raw_path for s in reports[0].steps] == [f"structured/run-a_gemm_r{k}.json" for k in (1, 2, 3)]
    out = _cli(tmp_path, "lineage", "run-a", "gflops", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)[0]["median"] == 11.0

    # tamper with the raw object behind replicate 2
    entry = manifest.entry("structured/run-a_gemm_r2.json")
    stored = open_store(None, tmp_path).path_of(entry.key)
    os.chmod(stored, 0o644)
    stored.write_text(stored.read_text().replace("12.0", "99.0"))
    out = _cli(tmp_path, "lineage", "run-a", "gflops")
    assert out.returncode == 1
    assert "tampered" in out.stderr and entry.uri in out.stderr and "run-a_gemm_r2.json" in out.stderr
    assert "Traceback" not in out.stderr
    out = _cli(tmp_path, "lineage", "run-a", "no_such_metric")
    assert out.returncode == 1 and "no rows of metric 'no_such_metric'" in out.stderr


_KILL_SCRIPT = r"""
import sys, time, pathlib
import pyarrow as pa
from benchrun.warehouse.writer import write_partition
from benchrun.warehouse.schemas import MEASUREMENT_FACT
home, flag = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
def batches():
    n = 50_000
    for i in range(1000):
        cols = [pa.nulls(n, f.type) for f in MEASUREMENT_FACT]
        cols[MEASUREMENT_FACT.get_field_index("run_id")] = pa.array(["run-a"] * n)
        cols[MEASUREMENT_FACT.get_field_index("metric")] = pa.array(["junk"] * n)
        yield pa.RecordBatch.from_arrays(cols, schema=MEASUREMENT_FACT)
        if i == 2:
            flag.write_text("mid-write")
            time.sleep(60)
write_partition(home, "measurement_fact", "run-a", batches())
"""


@pytest.mark.slow
def test_sigkill_mid_write_leaves_previous_state(tmp_path: Path, parquet_layout: None) -> None:
    run_dir, manifest = _stored_run(tmp_path, "run-a")
    curate_run(run_dir, tmp_path, manifest)
    part = tmp_path / "warehouse" / "measurement_fact" / "run_id=run-a" / "part.parquet"
    before = part.read_bytes()
    flag = tmp_path / "flag"
    proc = subprocess.Popen([sys.executable, "-c", _KILL_SCRIPT, str(tmp_path), str(flag)], cwd=REPO)
    try:
        for _ in range(600):
            if flag.exists() or proc.poll() is not None:
                break
            import time

            time.sleep(0.05)
        assert flag.exists(), "writer never reached the middle of its write"
        temps = list(part.parent.glob(".part.*.tmp"))
        assert temps and temps[0].stat().st_size > 0  # it really was writing
        proc.kill()
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert part.read_bytes() == before
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact") == 9
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact WHERE metric = 'junk'") == 0
    # the next curation clears the dead writer's temporary and the state stays exact
    curate_run(run_dir, tmp_path, manifest)
    assert not list(part.parent.glob(".part.*.tmp"))
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact") == 9


_CURATE_SCRIPT = r"""
import sys, pathlib
from benchrun.warehouse import curate_run, refresh_views
home = pathlib.Path(sys.argv[1])
curate_run(home / "runs" / sys.argv[2], home, None)
refresh_views(home)
"""


@pytest.mark.slow
def test_concurrent_curation_loses_no_rows(tmp_path: Path) -> None:
    manifests = {}
    for run_id in ("run-a", "run-b", "run-c"):
        run_dir, manifests[run_id] = _stored_run(tmp_path, run_id)
        status = json.loads((run_dir / "status.json").read_text())
        status["artifact_manifest_digest"] = manifests[run_id].digest  # curation loads the manifest itself
        (run_dir / "status.json").write_text(json.dumps(status))
    procs = [subprocess.Popen([sys.executable, "-c", _CURATE_SCRIPT, str(tmp_path), r], cwd=REPO, stderr=subprocess.PIPE)
             for r in ("run-a", "run-b", "run-c")]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact") == 27
    assert _count(tmp_path, "SELECT count(DISTINCT run_id) FROM benchmark_run_fact") == 3
    assert _count(tmp_path, "SELECT count(*) FROM serving_request_fact") == 180
    assert _count(tmp_path, "SELECT count(*) FROM software_version_dim") == 1
    assert _count(tmp_path, "SELECT count(*) FROM artifact_lineage_dim") == 3
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact WHERE raw_uri IS NULL") == 0


def test_old_partitions_without_a_new_column_still_read(tmp_path: Path, parquet_layout: None) -> None:

    run_dir, manifest = _stored_run(tmp_path, "run-a")
    curate_run(run_dir, tmp_path, manifest)
    part = tmp_path / "warehouse" / "hardware_topology_dim" / "run_id=run-a" / "part.parquet"
    old = pq.read_table(part).drop_columns(["memory_gib"])  # as written before the column existed
    pq.write_table(old, part)
    rows = query("SELECT cpu_model, memory_gib FROM hardware_topology_dim", tmp_path).table.to_pylist()
    assert rows == [{"cpu_model": "Test CPU", "memory_gib": None}]
    # a damaged partition file is named, with the fix, and left out (issue 16 M: only its own run)
    bad = tmp_path / "warehouse" / "measurement_fact" / "run_id=run-a" / "part.parquet"
    bad.write_bytes(b"not parquet")
    result = query("SELECT count(*) AS n FROM measurement_fact", tmp_path)
    assert result.table.to_pylist() == [{"n": 0}]
    assert len(result.notes) == 1 and str(bad) in result.notes[0] and "curate run run-a again" in result.notes[0]


def test_command_modules_import_light() -> None:
    """The CLI imports these for every command: pyarrow, duckdb and cryptography load only when used."""
    code = ("import sys, benchrun.warehouse.commands, benchrun.stats.commands, benchrun.provenance.commands; "
            "print(sorted(m for m in ('pyarrow', 'duckdb', 'cryptography', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"
    import benchrun.warehouse as wh  # the lazy names still resolve

    assert wh.curate_run is curate_run and "TABLES" in dir(wh)


def test_a_renamed_run_directory_is_refused_not_curated_under_its_status_id(tmp_path: Path) -> None:
    # a run directory copied by hand to another name would put its rows under the id in its status.json
    run_dir = make_run_dir(tmp_path, "run-orig", replicates=1)
    copy = run_dir.parent / "run-copy"
    run_dir.rename(copy)
    with pytest.raises(BenchrunError, match=r"run_id is 'run-orig' but the directory is 'run-copy'.*rename it to run-orig"):
        curate_run(copy, tmp_path, None)
    assert not (tmp_path / "warehouse").exists() or _count(tmp_path, "SELECT count(*) FROM benchmark_run_fact") == 0
