"""The provenance chain around the warehouse: re-signing after `rebuild-warehouse` signs no edit of
the unsigned status.json; a run's signed rows removed by hand fail verify and promote; `verify
--store` fails rows of a run that no evidence stands behind; a run signed with no rows accepts none
added later."""

from __future__ import annotations

import base64
import dataclasses
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


def _edit_status(rd: Path, **fields) -> None:
    st = json.loads((rd / "status.json").read_text())
    st.update(fields)
    (rd / "status.json").write_text(json.dumps(st))


def _signed_before_curated_status(rd: Path, home: Path) -> None:
    """The run's envelope as a release that did not record ``curated_status`` signed it (the home's key)."""
    from benchrun.provenance import dsse
    from benchrun.provenance.statement import canonical_json

    statement = json.loads(dsse.Envelope.from_json(json.loads(_envelope(rd).read_text())).payload)
    del statement["predicate"]["curated_status"]
    key = load_signing_key(home)
    env = dsse.sign(dsse.IN_TOTO_PAYLOAD_TYPE, canonical_json(statement), key.private, key.keyid)
    _envelope(rd).write_text(json.dumps(env.to_json()))


# -- 1. re-signing never signs an edit of status.json ----------------------------------------------


def test_curation_reads_no_status_field_a_signature_does_not_record(bench_home: Path, parquet_layout: None,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Re-signing checks STATUS_FIELDS against what the signed rows were curated from: a field curation
    reads that is not listed would come out signed from any edit."""
    from benchrun.provenance.status_fields import STATUS_FIELDS
    from benchrun.stats.synthetic import make_run
    from benchrun.warehouse import curate

    class Recording(dict):
        read: set = set()

        def get(self, key, default=None):
            Recording.read.add(key)
            return super().get(key, default)

        def __getitem__(self, key):
            Recording.read.add(key)
            return super().__getitem__(key)

        def __contains__(self, key):
            Recording.read.add(key)
            return super().__contains__(key)

    real = curate.load_sources
    monkeypatch.setattr(curate, "load_sources", lambda *a, **kw: dataclasses.replace(
        real(*a, **kw), status=Recording(real(*a, **kw).status)))
    rd = make_run(bench_home, "run-f", {("s", "c", "tps"): ([1.0, 2.0], "tok/s", "higher")},
                  status={"started_utc": "2026-01-05T10:00:00Z", "finished_utc": "2026-01-05T10:05:00Z"})
    curate.curate_run(rd, bench_home)
    assert {"cadence", "phase", "selected_scheduler_path", "started_utc"} <= Recording.read  # it records
    assert Recording.read <= set(STATUS_FIELDS), sorted(Recording.read - set(STATUS_FIELDS))


@pytest.mark.parametrize("edit", [
    {"cadence": "nightly"},
    {"selected_scheduler_path": "kueue"},
    {"scheduler_path_requested": "kueue"},
    {"variable_under_test": "scheduler_path"},
    {"phase": "Failed", "outcome": "failed"},
    {"started_utc": "2026-01-01T00:00:00Z"},
    {"dagster_run_id": "forged"},
])
def test_rebuild_warehouse_does_not_sign_an_edited_status_field_the_warehouse_curates(
        bench_home: Path, parquet_layout: None, monkeypatch: pytest.MonkeyPatch, edit: dict) -> None:
    """status_drift compared only the name, class and digests: an edited cadence, scheduler path,
    variable under test or phase was curated into benchmark_run_fact by `rebuild-warehouse RUN` and
    the run signed again over it; verify passed with the forged row signed."""
    rid = "run-e"
    rd = _signed_run(bench_home, monkeypatch, rid)
    before = _envelope(rd).read_bytes()
    _edit_status(rd, **edit)
    cli = CliRunner()
    out = cli.invoke(app, ["rebuild-warehouse", rid])
    assert "not signed again: status.json no longer names the run as its signature does" in out.output, out.output
    field = next(iter(edit))
    assert f"{field} (signed " in out.output, out.output
    assert _envelope(rd).read_bytes() == before  # the signature stays what it was
    check = cli.invoke(app, ["verify", rid])  # ... and the rows curated from the edit do not verify
    assert check.exit_code == 1 and "benchmark_run_fact" in str(check.exception), check.output


def test_the_moves_benchrun_makes_after_signing_are_signed_again(bench_home: Path, parquet_layout: None,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A run signed while Analyzing and then marked Failed (killed) is curated and signed again with
    its final phase; moved to Succeeded with no final signing pending, it is not."""
    from benchrun.rundir import mark_run_failed

    rid = "run-m"
    rd = _signed_run(bench_home, monkeypatch, rid)
    _edit_status(rd, phase="Analyzing", outcome="succeeded")
    sign_run(rd, bench_home)
    cli = CliRunner()
    _edit_status(rd, phase="Succeeded")
    out = cli.invoke(app, ["rebuild-warehouse", rid])
    assert "phase (signed 'Analyzing', status.json 'Succeeded')" in out.output, out.output
    _edit_status(rd, phase="Analyzing")
    assert mark_run_failed(bench_home, rid, "killed")
    out = cli.invoke(app, ["rebuild-warehouse", rid])
    assert "not signed again" not in out.output, out.output
    assert cli.invoke(app, ["verify", rid]).exit_code == 0
    assert _predicate(rd)["curated_status"]["phase"] == "Failed"
    # a Failed run whose outcome says otherwise is not a move benchrun makes
    _edit_status(rd, phase="Analyzing", outcome="succeeded", finished_utc=None)
    sign_run(rd, bench_home)
    _edit_status(rd, phase="Failed", outcome="succeeded")
    out = cli.invoke(app, ["rebuild-warehouse", rid])
    assert "outcome (status.json 'succeeded' with phase Failed" in out.output, out.output


def test_a_run_signed_before_curated_status_was_recorded_is_checked_against_its_sealed_sources(
        bench_home: Path, parquet_layout: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its statement records no curated values: the pinned spec (sealed) proves the fields submission
    copied from it, the signed timestamps the start and finish; the next signing records them all."""
    rid = "run-l"
    rd = _signed_run(bench_home, monkeypatch, rid)
    # as submission copies the spec; signed finished (in its final phase)
    _edit_status(rd, name="local-canary", scheduler_path_requested="local", started_utc="2026-11-30T23:00:00Z",
                 finished_utc="2026-12-01T00:00:00Z")
    sign_run(rd, bench_home)
    _signed_before_curated_status(rd, bench_home)
    cli = CliRunner()
    assert cli.invoke(app, ["verify", rid]).exit_code == 0
    signed = json.loads((rd / "status.json").read_text())
    for edit, said in (({"cadence": "nightly"}, "cadence (pinned spec 'canary', status.json 'nightly')"),
                       ({"variable_under_test": "driver_stack"}, "variable_under_test (pinned spec 'runtime_version'"),
                       ({"started_utc": "2026-01-01T00:00:00Z"}, "started_utc (signed "),
                       ({"finished_utc": "2026-01-01T00:00:00Z"}, "finished_utc (signed ")):
        before = _envelope(rd).read_bytes()
        _edit_status(rd, **edit)
        out = cli.invoke(app, ["rebuild-warehouse", rid])
        assert said in out.output, (edit, out.output)
        assert _envelope(rd).read_bytes() == before
        (rd / "status.json").write_text(json.dumps(signed))
    out = cli.invoke(app, ["rebuild-warehouse", rid])
    assert "not signed again" not in out.output, out.output
    assert _predicate(rd)["curated_status"]["cadence"] == "canary"
    assert cli.invoke(app, ["verify", rid]).exit_code == 0


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
