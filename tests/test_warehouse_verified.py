"""Issue 28 items 4 and 9: a run's curated warehouse partitions are hashed into its signed
statement; `verify` and `verify --store` catch an edited partition, `query` warns on it, and a
partition with another schema than its table's is left out with a warning."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from benchrun.cli import app
from benchrun.errors import BenchrunError
from benchrun.provenance import sign_run
from benchrun.provenance.keys import KEY_ENV, load_signing_key
from benchrun.rundir import MUTABLE_FILES
from benchrun.store import open_store
from benchrun.warehouse import curate_run, query
from test_provenance import RUN_ID, make_sealed_run


@pytest.fixture()
def signed_home(bench_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in (KEY_ENV, "BENCHRUN_VERIFY_PUBLIC_KEY", "BENCHRUN_STORE_ROOTS"):
        monkeypatch.delenv(name, raising=False)
    rd = make_sealed_run(bench_home, stored=True)
    curate_run(rd.path, bench_home, open_store(None, bench_home).put_run_dir(rd.path, RUN_ID, exclude=MUTABLE_FILES))
    sign_run(rd.path, bench_home)
    monkeypatch.setenv("BENCHRUN_TRUSTED_KEYIDS", load_signing_key(bench_home).keyid)
    return bench_home


def _partition(home: Path, table: str = "measurement_fact") -> Path:
    return home / "warehouse" / table / f"run_id={RUN_ID}" / "part.parquet"


def test_values_multiplied_by_ten_fail_verify_and_query_warns(parquet_layout: None, signed_home: Path) -> None:
    cli = CliRunner()
    ok = cli.invoke(app, ["verify", RUN_ID])
    assert ok.exit_code == 0, ok.output
    assert "warehouse partitions unchanged" in ok.output
    before = query("SELECT sum(value) AS s FROM measurement_fact", signed_home).table.to_pylist()[0]["s"]
    part = _partition(signed_home)
    table = pq.ParquetFile(part).read()
    i = table.schema.get_field_index("value")
    table = table.set_column(i, table.schema.field(i), pc.multiply(table["value"], 10.0))
    pq.write_table(table, part)
    out = cli.invoke(app, ["verify", RUN_ID])
    assert out.exit_code != 0 and f"warehouse/measurement_fact/run_id={RUN_ID}/part.parquet" in str(out.exception)
    store = cli.invoke(app, ["verify", "--store"])
    assert store.exit_code != 0 and "measurement_fact" in str(store.exception) + store.output
    res = query("SELECT sum(value) AS s FROM measurement_fact", signed_home)
    assert res.table.to_pylist()[0]["s"] == pytest.approx(before * 10)  # read, but not silently
    assert any("does not match the sha256 signed" in n and str(part) in n for n in res.notes)


def test_a_partition_with_value_as_text_is_left_out_with_a_warning(parquet_layout: None, signed_home: Path) -> None:
    other = make_sealed_run(signed_home, run_id="prov-20261130090001-00000001", stored=True)
    curate_run(other.path, signed_home,
               open_store(None, signed_home).put_run_dir(other.path, other.run_id, exclude=MUTABLE_FILES))
    part = _partition(signed_home)
    table = pq.ParquetFile(part).read()
    i = table.schema.get_field_index("value")
    table = table.set_column(i, pa.field("value", pa.string()), pc.cast(table["value"], pa.string()))
    pq.write_table(table, part)
    res = query("SELECT run_id, avg(value) AS v FROM measurement_fact GROUP BY run_id", signed_home)
    assert [r["run_id"] for r in res.table.to_pylist()] == [other.run_id]  # avg(VARCHAR) broke every run
    assert any(str(part) in n and "another schema" in n and "value is string" in n for n in res.notes)


def test_on_a_copied_home_verify_and_lineage_name_the_copy(signed_home: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28 item 7: on a copied home, verify and lineage named the original home's objects."""
    import shutil

    from benchrun.warehouse.lineage import trace

    copy = tmp_path / "copied-home"
    shutil.copytree(signed_home, copy)
    monkeypatch.setenv("BENCHRUN_HOME", str(copy))
    # the Iceberg tables address their files by absolute path: the copy's name the original's until rebuilt
    with pytest.raises(BenchrunError, match=f"written under {signed_home}.*moved or copied.*rebuild-warehouse"):
        trace(copy, RUN_ID, "tflops")
    from benchrun.warehouse.rebuild import rebuild_warehouse

    assert list(rebuild_warehouse(copy).rebuilt) == [RUN_ID]  # what `benchrun rebuild-warehouse` runs
    reports = trace(copy, RUN_ID, "tflops")
    assert reports and str(signed_home) not in json_dump(reports) and reports[0].store_uri.startswith(copy.as_uri())
    store = open_store(None, copy)
    entry = store.load_manifest(RUN_ID).entry(f"raw/{RUN_ID}_gemm_r1.log")
    obj = store.path_of(entry.key)
    obj.chmod(0o644)
    obj.write_text("forged\n")
    out = CliRunner().invoke(app, ["verify", RUN_ID])
    assert out.exit_code != 0 and str(obj) in str(out.exception) and str(signed_home) not in str(out.exception)


def json_dump(reports) -> str:
    import json

    return json.dumps([r.to_json() for r in reports], default=str)


@pytest.mark.slow
def _signed_iceberg_run(bench_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """RUN_ID sealed, stored, curated into the Iceberg warehouse and signed; its key trusted."""
    from benchrun.warehouse import lake

    for name in (KEY_ENV, "BENCHRUN_VERIFY_PUBLIC_KEY", "BENCHRUN_STORE_ROOTS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(lake.FORMAT_ENV, "iceberg")
    rd = make_sealed_run(bench_home, stored=True)
    curate_run(rd.path, bench_home, open_store(None, bench_home).put_run_dir(rd.path, RUN_ID, exclude=MUTABLE_FILES))
    sign_run(rd.path, bench_home)
    monkeypatch.setenv("BENCHRUN_TRUSTED_KEYIDS", load_signing_key(bench_home).keyid)


def test_iceberg_rows_are_signed_by_content_and_an_edit_fails_verify(bench_home: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28 item 4 on the Iceberg warehouse (it had "0 warehouse partitions"): the run's rows of
    each table are hashed into the statement by content, so compaction (files rewritten, rows the
    same) keeps verify passing, an overwrite with other values fails it naming the table, and rows
    removed fail it unless a retention record removed them (then they are listed as no longer present)."""
    import json

    from pyiceberg.expressions import EqualTo

    from benchrun.warehouse import lake

    _signed_iceberg_run(bench_home, monkeypatch)
    cli = CliRunner()
    scans = []
    digest = lake.run_rows_digest
    monkeypatch.setattr(lake, "run_rows_digest", lambda *a, **kw: scans.append(a) or digest(*a, **kw))
    ok = cli.invoke(app, ["verify", RUN_ID])
    assert ok.exit_code == 0, ok.output
    assert len(scans) == 1  # the changed rows and the missing ones from one read of each table
    signed = lake.run_rows_digest(bench_home, RUN_ID)
    assert "measurement_fact" in signed and f"Iceberg: the run's rows of {len(signed)} tables" in ok.output
    for table in signed:  # compaction rewrites the files, not the rows
        lake.compact(bench_home, table)
    assert lake.run_rows_digest(bench_home, RUN_ID) == signed
    assert cli.invoke(app, ["verify", RUN_ID]).exit_code == 0
    # the run's measurement rows overwritten with every value times ten, as one valid Iceberg commit
    tbl = lake.load_or_create(lake.catalog(bench_home), "measurement_fact")
    rows = tbl.scan(row_filter=EqualTo("run_id", RUN_ID)).to_arrow()
    i = rows.schema.get_field_index("value")
    rows = rows.set_column(i, rows.schema.field(i), pc.multiply(rows["value"], 10.0))
    started = rows.column(lake.RUN_START)[0].as_py()
    lake.commit_run(bench_home, "measurement_fact", RUN_ID, [rows.drop_columns([lake.RUN_START])], started)
    out = cli.invoke(app, ["verify", RUN_ID])
    assert out.exit_code != 0 and "iceberg measurement_fact: the run's" in str(out.exception), out.output
    store = cli.invoke(app, ["verify", "--store"])
    assert store.exit_code != 0 and "iceberg measurement_fact" in str(store.exception) + store.output
    # the rows removed (retention's delete): gone, not altered; by hand, with no record, they fail verify
    for table in signed:
        lake.delete_run(bench_home, table, RUN_ID)
    gone = cli.invoke(app, ["verify", RUN_ID])
    assert gone.exit_code == 1 and "no applied retention record or delete record removed them" in str(gone.exception)
    record = bench_home / "warehouse" / "_retention" / "retention-20270101T000000Z.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"applied": True, "partitions": [
        {"table": t, "run_id": RUN_ID, "path": f"iceberg:benchrun.{t}"} for t in signed]}))
    gone = cli.invoke(app, ["verify", RUN_ID])
    assert gone.exit_code == 0, gone.output
    assert f"{len(signed)} no longer present: iceberg " in gone.output, gone.output
    assert "(removed by retention, record warehouse/_retention/retention-20270101T000000Z.json)" in gone.output


def test_a_request_sample_path_outside_the_run_is_not_curated(bench_home: Path, caplog) -> None:
    """``samples.requests`` comes from the suite's own result document: an absolute or ``../`` path
    curated any parquet on the machine into serving_request_fact, where verify never looks."""
    import json

    import pandas as pd

    from benchrun.stats.synthetic import make_run

    outside = bench_home / "outside.parquet"
    pd.DataFrame({"request_id": ["SECRET-1"], "e2e_ms": [1.0]}).to_parquet(outside)
    rd = make_run(bench_home, "run-b", {("s", "c", "tps"): ([1.0], "tok/s", "higher")}, manifest=False)
    res = rd / "structured" / "run-b_s_r1.json"
    for sample in (str(outside), "../../outside.parquet"):
        doc = json.loads(res.read_text())
        doc["samples"] = {"requests": sample}
        res.write_text(json.dumps(doc))
        with caplog.at_level("WARNING"):
            curate_run(rd, bench_home)
        assert f"names {sample}, outside the run directory: not read" in caplog.text
        got = query("SELECT count(*) AS n FROM serving_request_fact", bench_home).table.to_pylist()
        assert got == [{"n": 0}]


def test_a_damaged_iceberg_data_file_is_an_error_naming_the_table_and_the_repair(bench_home: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """``verify``, ``verify --store`` and ``promote`` ended in pyarrow's ArrowInvalid traceback
    ("magic bytes not found"), naming neither the table nor the fix."""
    from benchrun.warehouse import lake

    _signed_iceberg_run(bench_home, monkeypatch)
    tbl = lake.load_or_create(lake.catalog(bench_home), "measurement_fact")
    data = Path(next(iter(tbl.scan().plan_files())).file.file_path.removeprefix("file://"))
    data.write_bytes(data.read_bytes()[:100])  # truncated
    out = CliRunner().invoke(app, ["verify", RUN_ID])
    assert out.exit_code == 1 and not isinstance(out.exception, ValueError), out.output
    assert "warehouse table measurement_fact: its data cannot be read" in out.output + str(out.exception)
    assert f"benchrun rebuild-warehouse {RUN_ID}" in out.output + str(out.exception)


def test_rows_of_the_run_added_after_signing_to_a_table_it_had_none_in_fail_verify(bench_home: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch
                                                                                   ) -> None:
    """verify compared only the tables that held the run's rows when it was signed: a forged
    serving_outcome_fact row of the run, which query returns, passed."""
    import datetime as dt

    from benchrun.warehouse import lake
    from benchrun.warehouse.writer import rows_to_table

    _signed_iceberg_run(bench_home, monkeypatch)
    assert "serving_outcome_fact" not in lake.run_rows_digest(bench_home, RUN_ID)
    assert CliRunner().invoke(app, ["verify", RUN_ID]).exit_code == 0
    row = {"run_id": RUN_ID, "suite": "s", "replicate": 1, "layer": "forged"}
    lake.commit_run(bench_home, "serving_outcome_fact", RUN_ID, [rows_to_table("serving_outcome_fact", [row])],
                    dt.datetime(2026, 1, 5, 10, tzinfo=dt.timezone.utc))
    out = CliRunner().invoke(app, ["verify", RUN_ID])
    assert out.exit_code == 1
    assert "iceberg serving_outcome_fact: 1 rows of the run that were not signed (added since)" in \
        out.output + str(out.exception)
