"""`benchrun query --json` is strict JSON that reads back exactly: an Iceberg snapshot id (above
2**53) was a bare number jq rounds (429905274422978900 for ...910, which `--as-of` then could not
find), and a non-finite double was the bare token NaN or Infinity, which strict readers refuse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from benchrun.cli import app

SNAPSHOT = 429905274422978910  # above 2**53: a double cannot hold it


def _strict_loads(text: str) -> dict:
    def refuse(token: str) -> None:
        raise AssertionError(f"{token} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_query_json_writes_big_integers_as_strings_and_non_finite_doubles_as_null(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import benchrun.warehouse.views as views

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    seen: list = []
    real = views.stream_query

    def stream_query(sql, home, *, limit=None, as_of=None, params=None):
        seen.append(as_of)
        stream = real(sql, home, limit=limit, as_of=None, params=params)
        stream.snapshot_ids = {"measurement_fact": SNAPSHOT, "serving_outcome_fact": None}
        return stream

    monkeypatch.setattr(views, "stream_query", stream_query)
    sql = (f"SELECT {SNAPSHOT}::BIGINT AS id, 'nan'::DOUBLE AS x, '-inf'::DOUBLE AS y, "
           "[1.5, 'inf'::DOUBLE] AS l, 3 AS n")
    out = CliRunner().invoke(app, ["query", "--json", sql])
    assert out.exit_code == 0, out.output
    doc = _strict_loads(out.stdout)
    assert doc["snapshot_ids"] == {"measurement_fact": str(SNAPSHOT), "serving_outcome_fact": None}
    assert doc["rows"] == [{"id": str(SNAPSHOT), "x": None, "y": None, "l": [1.5, None], "n": 3}]
    # the id as --json wrote it reads back in --as-of, bare (jq -r) or quoted (jq)
    for given in (doc["snapshot_ids"]["measurement_fact"], json.dumps(doc["snapshot_ids"]["measurement_fact"])):
        assert CliRunner().invoke(app, ["query", "--as-of", given, "--json", "SELECT 1 AS one"]).exit_code == 0
    assert seen[1:] == [SNAPSHOT, SNAPSHOT]


def test_query_json_writes_a_decimal_as_the_number_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DuckDB reads `1.5` as DECIMAL(2,1), and --json wrote every DECIMAL as a string ("1.5"): a reader
    summing a column got text. A DECIMAL a double holds exactly is a number; one it cannot hold keeps
    its digits as a string, as a big integer does."""
    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    sql = "SELECT 1.5 AS a, 0.1 AS b, 12.345::DECIMAL(10,3) AS c, 1234567890.123456789012::DECIMAL(38,18) AS d"
    out = CliRunner().invoke(app, ["query", "--json", sql])
    assert out.exit_code == 0, out.output
    assert _strict_loads(out.stdout)["rows"] == [{"a": 1.5, "b": 0.1, "c": 12.345,
                                                  "d": "1234567890.123456789012000000"}]
