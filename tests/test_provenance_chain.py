"""The provenance chain around the warehouse: a run signed with no rows accepts none added later."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from benchrun.cli import app
from benchrun.provenance import sign_run
from benchrun.provenance.keys import KEY_ENV, load_signing_key
from test_provenance import RUN_ID, make_sealed_run


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (KEY_ENV, "BENCHRUN_TRUSTED_KEYIDS", "BENCHRUN_VERIFY_PUBLIC_KEY", "BENCHRUN_STORE_ROOTS"):
        monkeypatch.delenv(name, raising=False)


def _envelope(rd: Path) -> Path:
    return rd / "reports" / f"{rd.name}_provenance.dsse.json"


def _predicate(rd: Path) -> dict:
    return json.loads(base64.b64decode(json.loads(_envelope(rd).read_text())["payload"]))["predicate"]


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
