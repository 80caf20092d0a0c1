"""Issue 16 A/L/M: `benchrun query` is read-only, confined to the warehouse, bounded and streamed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchrun.errors import BenchrunError
from benchrun.store import open_store
from benchrun.warehouse import curate_run, query
from benchrun.warehouse.views import check_read_only, stream_query
from test_store_helpers import make_run_dir

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def home(tmp_path: Path) -> Path:
    for run_id in ("run-a", "run-b"):
        run_dir = make_run_dir(tmp_path, run_id)
        curate_run(run_dir, tmp_path, open_store(None, tmp_path).put_run_dir(run_dir, run_id))
    (tmp_path / "keys").mkdir(exist_ok=True)
    (tmp_path / "keys" / "ed25519.pem").write_text("-----BEGIN PRIVATE KEY-----\nsecret\n")
    return tmp_path


@pytest.mark.parametrize("sql", [
    "EXPLAIN ANALYZE COPY (SELECT 42 AS x) TO 'out.csv'",
    "EXPLAIN COPY (SELECT 42 AS x) TO 'out.csv'",
    "explain analyze copy (select 1) to 'warehouse/measurement_fact/run_id=run-a/part.parquet' (format parquet)",
    "EXPORT DATABASE 'exp'",
    "ATTACH 'other.db'",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "EXPLAIN SET enable_external_access = true",
    "PRAGMA version",
    "EXPLAIN ANALYZE CREATE TABLE t AS SELECT 1",
    "CALL pragma_version()",
    "SELECT 1; COPY (SELECT 1) TO 'x.csv'",
    # the S3 secret's access key id and endpoint, and SQL run from a string the checks cannot see into
    "SELECT secret_string FROM duckdb_secrets()",
    'SELECT * FROM "DuckDB_Secrets"()',
    "SELECT * FROM which_secret('s3://lake/x', 's3')",
    "SELECT * FROM query('SELECT * FROM duckdb_' || 'secrets()')",
    "SELECT * FROM query_table('measurement_fact')",
    # a comment between the name and its parenthesis (the tokenizer yields no comment tokens)
    "SELECT * FROM query /**/ ('SELECT 42 AS x')",
    "SELECT * FROM query -- c\n('SELECT 42')",
    "SELECT * FROM json_execute_serialized_sql /**/ (json_serialize_sql /**/ ('SELECT 1'))",
    "SELECT * FROM which_secret /* x */ ('s3://lake/x', 's3')",
    "EXPLAIN ANALYZE COPY/**/(SELECT 42 AS x) TO 'out.csv'",
])
def test_writes_and_settings_are_refused_in_any_position(home: Path, sql: str, monkeypatch) -> None:
    monkeypatch.chdir(home)
    before = {p: p.stat().st_mtime_ns for p in home.rglob("*") if p.is_file()}
    with pytest.raises(BenchrunError, match="refused|exactly one statement"):
        query(sql, home)
    after = {p: p.stat().st_mtime_ns for p in home.rglob("*") if p.is_file()}
    assert after == before  # nothing written, nothing rewritten


def test_keywords_inside_strings_or_quoted_names_are_not_refused(home: Path) -> None:
    check_read_only("SELECT 'copy; set x' AS \"load\" -- COPY in a comment")
    check_read_only("SELECT query, 'duckdb_secrets()' AS s FROM (SELECT 1 AS query) t")  # a column, a string
    rows = query("SELECT 'COPY' AS \"set\"", home).table.to_pylist()
    assert rows == [{"set": "COPY"}]
    plan = query("EXPLAIN SELECT count(*) FROM measurement_fact", home).table.to_pylist()
    assert plan[0]["explain_key"] == "physical_plan"


@pytest.mark.parametrize("sql", [
    "SELECT content FROM read_text('{home}/keys/ed25519.pem')",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('{home}/warehouse/../keys/ed25519.pem')",
    "SELECT * FROM glob('/**')",
    "SELECT * FROM read_parquet('https://example.invalid/x.parquet')",
])
def test_no_file_outside_the_warehouse_is_readable(home: Path, sql: str) -> None:
    with pytest.raises(BenchrunError, match="query failed: .*(Permission|disabled)"):
        query(sql.format(home=home), home)


def test_only_the_warehouse_views_and_locked_configuration(home: Path) -> None:
    rows = query("SELECT current_setting('enable_external_access') AS e, current_setting('lock_configuration') AS l, "
                 "current_setting('memory_limit') AS m", home).table.to_pylist()
    assert rows[0]["e"] is False and rows[0]["l"] is True and rows[0]["m"] in ("1.8 GiB", "1.9 GiB", "2.0 GiB", "1.8GiB")
    views = {r["view_name"] for r in query("SELECT view_name FROM duckdb_views() WHERE NOT internal", home).table.to_pylist()}
    tables = query("SELECT count(*) AS n FROM duckdb_tables()", home).table.to_pylist()
    assert "measurement_fact" in views and tables == [{"n": 0}]


def test_stream_cuts_at_the_limit_and_says_so(home: Path) -> None:
    total = query("SELECT count(*) AS n FROM serving_request_fact", home).table.column(0)[0].as_py()
    assert total == 120
    stream = stream_query("SELECT request_id FROM serving_request_fact", home, limit=50, batch_rows=16)
    got = [r for batch in stream.batches() for r in batch]
    assert len(got) == 50 and stream.truncated and stream.rows_out == 50
    whole = stream_query("SELECT request_id FROM serving_request_fact", home, limit=None, batch_rows=16)
    assert sum(len(b) for b in whole.batches()) == 120 and not whole.truncated


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "BENCHRUN_HOME": str(home), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "benchrun.cli", *args], capture_output=True, text=True, env=env,
                          cwd=home, timeout=120)


@pytest.mark.slow
def test_cli_attacks_fail_cleanly_and_limit_applies(home: Path) -> None:
    out = _cli(home, "query", "EXPLAIN ANALYZE COPY (SELECT 42 AS x) TO 'out.csv'")
    assert out.returncode == 1 and "COPY is refused" in out.stderr and "Traceback" not in out.stderr
    assert not (home / "out.csv").exists()
    out = _cli(home, "query", f"SELECT content FROM read_text('{home}/keys/ed25519.pem')")
    assert out.returncode == 1 and "secret" not in out.stdout + out.stderr and "Traceback" not in out.stderr
    out = _cli(home, "query", "SELECT request_id FROM serving_request_fact ORDER BY request_id", "--json", "--limit", "7")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert len(doc["rows"]) == 7 and doc["truncated"] is True and doc["limit"] == 7 and "--limit 7" in out.stderr
    out = _cli(home, "query", "SELECT request_id FROM serving_request_fact", "--csv", "--limit", "0")
    assert out.returncode == 0 and len(out.stdout.splitlines()) == 121


@pytest.mark.slow
def test_cli_names_a_damaged_partition_and_the_others_answer(parquet_layout: None, home: Path) -> None:
    """The parquet layout's damaged file (the Iceberg tables' own: test_warehouse_iceberg,
    test_a_damaged_data_file_is_left_out_with_a_note)."""
    bad = home / "warehouse" / "measurement_fact" / "run_id=run-a" / "part.parquet"
    bad.write_bytes(b"PAR1 truncated")
    out = _cli(home, "query", "SELECT DISTINCT run_id FROM measurement_fact", "--csv")
    assert out.returncode == 0 and out.stdout.splitlines() == ["run_id", "run-b"] and str(bad) in out.stderr


@pytest.mark.slow
@pytest.mark.parametrize("signum, code", [(2, 130), (15, 143)])
def test_a_runaway_query_stops_at_once_on_sigint_or_sigterm(home: Path, signum: int, code: int) -> None:
    """Issue 28 item 6 (8 of the attack): Ctrl-C ran on ~56 s, since the query blocks the main
    thread inside DuckDB; now the signal interrupts it (DuckDB interrupt()) and the CLI ends."""
    import signal
    import time

    env = {**os.environ, "BENCHRUN_HOME": str(home), "BENCHRUN_WARM": "0", "PYTHONPATH": str(REPO)}
    runaway = "SELECT sum(a.range * b.range) FROM range(1000000000) a, range(1000000) b"
    prog = ("import sys, duckdb, benchrun.cli as cli, benchrun.warehouse.commands, benchrun.warehouse.views; "
            "print('imported', file=sys.stderr, flush=True); sys.argv = ['benchrun', 'query', sys.argv[1]]; cli.main()")
    proc = subprocess.Popen([sys.executable, "-c", prog, runaway], env=env, cwd=home,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr.readline() == "imported\n"
        time.sleep(2.0)  # the views are built and the query runs
        assert proc.poll() is None
        t0 = time.monotonic()
        proc.send_signal(signum)
        _out, err = proc.communicate(timeout=20)
        assert time.monotonic() - t0 < 3.0
        assert proc.returncode == code, err
        assert "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_no_credential_of_the_process_is_readable(home: Path, monkeypatch) -> None:
    # before: httpfs copies AWS_* from the environment into its settings, and
    # current_setting('s3_secret_access_key') printed the secret
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAQUERYTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "query-test-secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "query-test-token")
    rows = query("SELECT name, value FROM duckdb_settings()", home).table.to_pylist()
    leaked = [r["name"] for r in rows if any(s in str(r["value"]) for s in ("AKIAQUERYTEST", "query-test-"))]
    assert leaked == []
    for name in ("s3_access_key_id", "s3_secret_access_key", "s3_session_token"):
        if any(r["name"] == name for r in rows):
            assert query(f"SELECT current_setting('{name}') AS v", home).table.to_pylist() == [{"v": ""}]
    try:  # a local warehouse holds no secret (and DuckDB may not look for stored ones: file access is off)
        secrets = str(query("SELECT * FROM duckdb_secrets()", home).table.to_pylist())
    except BenchrunError as exc:
        secrets = str(exc)
    assert "query-test-secret" not in secrets
