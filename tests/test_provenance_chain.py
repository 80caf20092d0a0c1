"""The provenance chain around the warehouse: a run's signed rows removed by hand fail verify and
promote; `verify --store` fails rows of a run that no evidence stands behind; a run signed with no
rows accepts none added later."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from benchrun.cli import app
from benchrun.errors import BenchrunError
from benchrun.provenance import sign_run
from benchrun.provenance.keys import KEY_ENV, load_signing_key
from test_commands_keep_signatures import _signed_run
from test_provenance import RUN_ID, make_sealed_run


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (KEY_ENV, "BENCHRUN_TRUSTED_KEYIDS", "BENCHRUN_VERIFY_PUBLIC_KEY", "BENCHRUN_STORE_ROOTS"):
        monkeypatch.delenv(name, raising=False)


def _envelope(rd: Path) -> Path:
    return rd / "reports" / f"{rd.name}_provenance.dsse.json"


def _predicate(rd: Path) -> dict:
    return json.loads(base64.b64decode(json.loads(_envelope(rd).read_text())["payload"]))["predicate"]


# -- 2. a run's signed rows removed by hand --------------------------------------------------------


def _retention_record(home: Path, name: str, *parts: tuple[str, str]) -> None:
    record = home / "warehouse" / "_retention" / f"retention-{name}.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"applied": True, "partitions": [
        {"table": table, "run_id": run_id, "path": f"iceberg:benchrun.{table}"} for table, run_id in parts]}))


def test_signed_partitions_removed_by_hand_fail_verify_and_promote(bench_home: Path, parquet_layout: None,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A signed table whose rows were removed passed verify and promote ("no longer present
    (retention?)"): only an applied retention record or the run's delete record accounts for it."""
    from benchrun.stats.baseline import promote
    from benchrun.warehouse.removed import record_deleted
    from benchrun.warehouse.sources import parse_ts

    rid = "run-g"
    rd = _signed_run(bench_home, monkeypatch, rid)
    part = f"warehouse/measurement_fact/run_id={rid}/part.parquet"
    assert part.removeprefix("warehouse/") in _predicate(rd)["warehouse_partitions"]
    shutil.rmtree(bench_home / "warehouse" / "measurement_fact" / f"run_id={rid}")
    cli = CliRunner()
    for command in (["verify", rid], ["verify", "--store"]):
        out = cli.invoke(app, command)
        assert out.exit_code == 1, (command, out.output)
        assert "no applied retention record or delete record removed them" in str(out.exception) + out.output
        assert part in str(out.exception) + out.output
    with pytest.raises(BenchrunError, match="no applied retention record or delete record"):
        promote(rid, bench_home)
    _retention_record(bench_home, "20260101T000000Z", ("launch_fact", rid), ("measurement_fact", "run-other"))
    assert cli.invoke(app, ["verify", rid]).exit_code == 1  # another table's record, another run's
    # a delete record older than the run: a run made after a delete under the same id, not the one deleted
    created = parse_ts(json.loads((rd / "status.json").read_text())["created_utc"])
    record_deleted(bench_home, rid, now=created.replace(year=created.year - 1))
    assert cli.invoke(app, ["verify", rid]).exit_code == 1
    record_deleted(bench_home, rid, now=created.replace(year=created.year + 1))
    out = cli.invoke(app, ["verify", rid])
    assert out.exit_code == 0 and f"{part} (removed by `benchrun delete`" in out.output, out.output
    (bench_home / "warehouse" / "_deleted" / f"{rid}.json").unlink()
    _retention_record(bench_home, "20260102T000000Z", ("measurement_fact", rid))
    out = cli.invoke(app, ["verify", rid])
    assert out.exit_code == 0, out.output
    assert f"{part} (removed by retention, record warehouse/_retention/retention-20260102T000000Z.json)" in out.output
    assert promote(rid, bench_home).is_file()


# -- 3. `verify --store`: rows no evidence stands behind ------------------------------------------


@pytest.mark.parametrize("layout", ["parquet", "iceberg"])
def test_verify_store_fails_warehouse_rows_of_a_run_with_no_evidence(bench_home: Path,
                                                                     monkeypatch: pytest.MonkeyPatch,
                                                                     layout: str) -> None:
    """A whole run fabricated in the warehouse (rows under a run id with no run directory, manifest,
    envelope or stored object) passed `verify --store`, which walked run directories and stored
    manifests only."""
    from benchrun.rundir import MUTABLE_FILES
    from benchrun.store import open_store
    from benchrun.warehouse import curate_run
    from benchrun.warehouse.removed import record_deleted

    monkeypatch.setenv("BENCHRUN_WAREHOUSE_FORMAT", layout)
    good = make_sealed_run(bench_home, stored=True)
    curate_run(good.path, bench_home, open_store(None, bench_home).put_run_dir(good.path, RUN_ID,
                                                                               exclude=MUTABLE_FILES))
    sign_run(good.path, bench_home)
    stored = make_sealed_run(bench_home, "run-stored", stored=True)  # its directory gone, its evidence stored
    curate_run(stored.path, bench_home)
    shutil.rmtree(stored.path)
    forged = make_sealed_run(bench_home, "run-forged")  # never stored: curated, then its directory removed
    curate_run(forged.path, bench_home)
    shutil.rmtree(forged.path)
    monkeypatch.setenv("BENCHRUN_TRUSTED_KEYIDS", load_signing_key(bench_home).keyid)
    cli = CliRunner()
    out = cli.invoke(app, ["verify", "--store"])
    assert out.exit_code == 1, out.output
    assert "warehouse run run-forged: rows in" in str(out.exception), out.output
    assert "no run directory, signed run or stored manifest stands behind them" in str(out.exception)
    assert "run-stored" not in str(out.exception) and RUN_ID not in str(out.exception)
    record_deleted(bench_home, "run-forged")  # a delete that stopped before the rows: named, not failed
    out = cli.invoke(app, ["verify", "--store"])
    assert out.exit_code == 0, out.output
    assert "warehouse run run-forged: rows left in" in out.output


# -- 4. a run signed with no rows ------------------------------------------------------------------


def test_rows_added_to_a_run_signed_with_none_fail_verify(bench_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``warehouse_rows: {}`` (signed before any of the run's rows were curated) turned the "added since"
    check off: any rows committed for the run later passed verify."""
    import datetime as dt

    from benchrun.warehouse import curate_run, lake
    from benchrun.warehouse.writer import rows_to_table

    monkeypatch.setenv(lake.FORMAT_ENV, "iceberg")
    other = make_sealed_run(bench_home, "run-other")
    curate_run(other.path, bench_home)  # the home has Iceberg tables; RUN_ID has no rows in them
    rd = make_sealed_run(bench_home, stored=True)
    sign_run(rd.path, bench_home)
    assert _predicate(rd.path)["warehouse_rows"] == {}
    monkeypatch.setenv("BENCHRUN_TRUSTED_KEYIDS", load_signing_key(bench_home).keyid)
    cli = CliRunner()
    assert cli.invoke(app, ["verify", RUN_ID]).exit_code == 0
    row = {"run_id": RUN_ID, "suite": "gemm", "replicate": 1, "metric": "tflops", "value": 999.0}
    lake.commit_run(bench_home, "measurement_fact", RUN_ID, [rows_to_table("measurement_fact", [row])],
                    dt.datetime(2026, 11, 30, 9, tzinfo=dt.timezone.utc))
    out = cli.invoke(app, ["verify", RUN_ID])
    assert out.exit_code == 1, out.output
    assert "iceberg measurement_fact: 1 rows of the run that were not signed (added since)" in str(out.exception)
