"""`benchrun query` output read back whole (review 3): columns that share a name keep their own values
in every output mode, `--csv` writes floats whole, a reader that stops early (`| head`) is a normal
end, records stream; `query_spec_digest` tells apart queries that differ only inside quotes;
`maintain-warehouse` makes no Iceberg table in a parquet home; `serving_outcome_fact`'s rollup row
is documented with the filter to use."""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from benchrun.cli import app
from benchrun.fsio import atomic_write_json
from benchrun.store import open_store
from benchrun.warehouse import curate_run, query, query_spec_digest
from benchrun.warehouse.display import print_rows
from benchrun.warehouse.views import normalise_sql
from test_store_helpers import make_run_dir

REPO = Path(__file__).resolve().parents[1]
JOIN = ("SELECT m.raw_path, l.raw_path FROM measurement_fact m JOIN launch_fact l USING (run_id, suite, replicate) "
        "WHERE m.suite = 'gemm' ORDER BY m.replicate LIMIT 1")


def _curate(home: Path, run_id: str = "run-a") -> Path:
    run_dir = make_run_dir(home, run_id)
    curate_run(run_dir, home, open_store(None, home).put_run_dir(run_dir, run_id))
    return run_dir


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    _curate(tmp_path)
    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    return tmp_path


def _invoke(*args: str):
    out = CliRunner().invoke(app, list(args))
    assert out.exit_code == 0, (out.output, out.exception)
    return out.stdout


# --- 1. columns that share a name -----------------------------------------------------------------

def test_columns_of_the_same_name_keep_their_own_values_in_every_output_mode(home: Path) -> None:
    """Before: rows were dicts keyed by name, so `select 1 as x, 2 as x` printed `2,2` and a join's
    `m.raw_path, l.raw_path` showed the launch's path twice (lineage naming the wrong file)."""
    sql = "SELECT 1 AS x, 2 AS x, 3 AS x_2"
    assert list(csv.reader(io.StringIO(_invoke("query", "--csv", sql)))) == [["x", "x", "x_2"], ["1", "2", "3"]]
    doc = json.loads(_invoke("query", "--json", sql))
    # every value kept: a repeated name made unique, skipping a name the result already has
    assert doc["columns"] == ["x", "x_3", "x_2"] and doc["rows"] == [{"x": 1, "x_3": 2, "x_2": 3}]
    records = _invoke("query", "-x", sql)
    assert "x    1\n" in records and "x    2\n" in records and "x_2  3\n" in records
    table = _invoke("query", "--table", sql)
    assert "│ 1 │ 2 │ 3   │" in table

    truth = query(JOIN, home).table
    measured, launched = truth.column(0)[0].as_py(), truth.column(1)[0].as_py()
    assert measured != launched and measured.endswith("_gemm_r1.json") and launched.endswith("_launches.json")
    doc = json.loads(_invoke("query", "--json", JOIN))
    assert doc["columns"] == ["raw_path", "raw_path_2"]
    assert doc["rows"] == [{"raw_path": measured, "raw_path_2": launched}]
    assert list(csv.reader(io.StringIO(_invoke("query", "--csv", JOIN))))[1] == [measured, launched]
    records = _invoke("query", "-x", JOIN)
    assert f"raw_path  {measured}\n" in records and f"raw_path  {launched}\n" in records


# --- 2. --csv keeps full precision -----------------------------------------------------------------

def test_csv_writes_floats_whole_while_the_table_keeps_a_short_form(home: Path) -> None:
    """Before: `.6g` made 1796616697.659352 `1.79662e+09`, collapsing 640 distinct send times into one."""
    sql = ("SELECT 1796616697.659352::DOUBLE AS t, 0.1::DOUBLE + 0.2::DOUBLE AS s, 1e-300::DOUBLE AS tiny, "
           "NULL::DOUBLE AS gap")
    rows = list(csv.reader(io.StringIO(_invoke("query", "--csv", sql))))
    assert rows[1] == ["1796616697.659352", "0.30000000000000004", "1e-300", ""]
    exact = query(sql, home).table.to_pylist()[0]
    assert [float(v) for v in rows[1][:3]] == [exact["t"], exact["s"], exact["tiny"]]
    assert "1.79662e+09" in _invoke("query", "--table", sql)  # the terminal keeps its short form

    times = "SELECT send_ts + replicate / 7.0 AS t FROM serving_request_fact"
    distinct = query(f"SELECT count(DISTINCT t) AS n FROM ({times})", home).table.column(0)[0].as_py()
    written = list(csv.reader(io.StringIO(_invoke("query", "--csv", "--limit", "0", times))))[1:]
    assert len({float(r[0]) for r in written}) == distinct == 60


# --- 3. maintain-warehouse in a parquet home -----------------------------------------------------------

def test_maintain_warehouse_is_refused_in_a_parquet_home_and_makes_no_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: even `--dry-run` created the Iceberg tables in a parquet home; switched to Iceberg later,
    the first use saw tables, copied nothing by itself, and the old runs were silently missing."""
    monkeypatch.setenv("BENCHRUN_WAREHOUSE_FORMAT", "parquet")
    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    _curate(tmp_path)
    catalog = tmp_path / "warehouse" / "catalog.sqlite"
    for args in (["maintain-warehouse", "--dry-run"], ["maintain-warehouse"]):
        out = CliRunner().invoke(app, args)
        said = out.output + str(out.exception)
        assert out.exit_code != 0 and "BENCHRUN_WAREHOUSE_FORMAT=parquet" in said and "unset it" in said, said
        assert not catalog.exists() and not (tmp_path / "warehouse" / "iceberg").exists()
    monkeypatch.delenv("BENCHRUN_WAREHOUSE_FORMAT")  # the home switched to Iceberg: its first use copies the run in
    assert query("SELECT count(DISTINCT run_id) AS n FROM measurement_fact", tmp_path).table.column(0)[0].as_py() == 1


def test_a_dry_run_of_maintain_warehouse_makes_no_catalog_or_table(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    out = CliRunner().invoke(app, ["maintain-warehouse", "--dry-run"])
    assert out.exit_code == 0, (out.output, out.exception)
    assert "measurement_fact: data files 0 -> 0" in out.output
    assert not (tmp_path / "warehouse" / "catalog.sqlite").exists()


# --- 4. query_spec_digest ----------------------------------------------------------------------------

@pytest.mark.parametrize("a,b", [
    ('SELECT metric AS "x--a", value FROM t', 'SELECT metric AS "x--b" FROM t'),
    ("SELECT $$a--x$$ AS v", "SELECT $$a--y$$ AS v"),
    ("SELECT $tag$ a /* b $tag$ AS v", "SELECT $tag$ a /* c $tag$ AS v"),
    ('SELECT 1 AS "a  b"', 'SELECT 1 AS "a b"'),
    ("SELECT E'it\\'s -- a' AS v", "SELECT E'it\\'s -- b' AS v"),
    ('SELECT 1 AS "a""--x"', 'SELECT 1 AS "a""--y"'),
])
def test_queries_that_differ_inside_quotes_have_different_digests(a: str, b: str) -> None:
    """Before: comments were cut by a regex that protected only single-quoted strings, and whitespace
    inside quoted identifiers and `$$` strings was collapsed: each pair here shared one digest."""
    assert query_spec_digest(a) != query_spec_digest(b)
    assert normalise_sql(a) == a and normalise_sql(b) == b  # quoted tokens verbatim


def test_the_digest_stays_put_under_whitespace_and_comments_outside_quotes() -> None:
    plain = "SELECT metric AS \"x--a\", 'it''s  here' AS s FROM measurement_fact WHERE v > 1"
    for same in (
        "  SELECT  metric AS \"x--a\",\n  'it''s  here' AS s -- a comment\nFROM /* block */ measurement_fact WHERE v > 1 ;",
        "/* lead */ SELECT metric AS \"x--a\", 'it''s  here' AS s\tFROM measurement_fact WHERE v > 1;;",
        # a comment holding quotes (the driver's, it's): before, they were read as a string literal
        "SELECT metric AS \"x--a\", 'it''s  here' AS s -- the driver's, it's\nFROM measurement_fact WHERE v > 1",
    ):
        assert normalise_sql(same) == plain and query_spec_digest(same) == query_spec_digest(plain)
    assert query_spec_digest("SELECT 'a  b'") != query_spec_digest("SELECT 'a b'")


# --- 5. serving_outcome_fact's rollup row ------------------------------------------------------------

def test_serving_outcome_facts_rollup_row_is_documented_with_the_filter_to_use(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Beside its per-bucket rows each point has a bucket='all' row: a plain sum(n_requests) counts every
    request twice. The schema and docs/warehouse.md say so and give the filter, which counts right."""
    import benchrun.warehouse.schemas as schemas

    run_dir = make_run_dir(tmp_path, "run-a")
    for path in sorted((run_dir / "structured").glob("run-a_serving_r*.json")):
        doc = json.loads(path.read_text())
        point = doc["serving"][0]
        doc["serving"] = [{**point, "bucket": "all", "n_requests": 20},
                          {**point, "bucket": "512/128", "n_requests": 12},
                          {**point, "bucket": "1024/256", "n_requests": 8}]
        atomic_write_json(path, doc)
    curate_run(run_dir, tmp_path, open_store(None, tmp_path).put_run_dir(run_dir, "run-a"))

    def one(sql: str) -> int:
        return query(sql, tmp_path).table.column(0)[0].as_py()

    requests = one("SELECT count(*) FROM serving_request_fact")
    assert requests == 60 and one("SELECT sum(n_requests) FROM serving_outcome_fact") == 2 * requests
    assert one("SELECT sum(n_requests) FROM serving_outcome_fact WHERE bucket = 'all'") == requests
    assert one("SELECT sum(n_requests) FROM serving_outcome_fact WHERE bucket <> 'all'") == requests

    docs = (REPO / "docs" / "warehouse.md").read_text()
    said = docs[docs.index("`serving_outcome_fact`'s rollup row"):][:800]
    assert "WHERE bucket = 'all'" in said and "WHERE bucket <> 'all'" in said and "twice" in said
    source = Path(schemas.__file__).read_text()
    comment = source[:source.index("SERVING_OUTCOME_FACT = _fact(")].rsplit("\n\n", 1)[-1]
    assert "bucket = 'all'" in comment and "twice" in comment


# --- 6. a reader that stops early ----------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["--csv", "-x", "--json"])
def test_a_reader_that_stops_early_is_a_normal_end(tmp_path: Path, mode: str) -> None:
    """`benchrun query --csv | head` exited 1 without a word (click and rich turn EPIPE into exit 1),
    which `set -o pipefail` cannot tell from an error. Now 141, as SIGPIPE ends a Unix filter (not 0:
    `compare --json | head` must not turn a regression's exit 3 into a pass)."""
    env = {**os.environ, "BENCHRUN_HOME": str(tmp_path), "PYTHONPATH": str(REPO)}
    env.pop("BENCHRUN_WAREHOUSE_FORMAT", None)
    proc = subprocess.Popen([sys.executable, "-m", "benchrun.cli", "query", mode, "--limit", "0",
                             "SELECT range AS i, repeat('x', 80) AS pad FROM range(200000)"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=REPO)
    assert proc.stdout.readline()  # the first line, then the reader goes away (as `head -1` does)
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141, err.decode()
    assert b"Traceback" not in err and b"Exception ignored" not in err, err.decode()


def test_an_epipe_that_is_not_stdouts_is_not_taken_for_one() -> None:
    from benchrun import cli

    here = cli._stdout_file()
    assert not cli._broken_pipe(BrokenPipeError(errno.EPIPE, "a socket's peer went away"), here)
    assert not cli._broken_pipe(SystemExit(1), here)


# --- 7. records stream -----------------------------------------------------------------------------

def test_records_print_as_the_batches_come() -> None:
    """Before: every row was held before the first printed (`list(stream.batches())`)."""
    con = Console(file=io.StringIO(), width=100, force_terminal=False, color_system=None)
    wide = [f"column_{i:02d}" for i in range(27)]
    printed_before: list[int] = []

    def batches():
        for b in range(4):
            printed_before.append(con.file.getvalue().count("── row "))
            yield [tuple(f"v{b}-{r}-{c}" for c in wide) for r in range(150)]

    print_rows(con, wide, batches(), caption=lambda: "600 rows")
    # the first 200 rows decide table or records (two batches here); then each batch prints as it comes
    assert printed_before == [0, 0, 300, 450]
    text = con.file.getvalue()
    assert text.count("── row ") == 600 and "600 rows; one record per row (the table is wider" in text


def test_query_streams_its_records(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import benchrun.warehouse.commands as commands
    import benchrun.warehouse.views as views

    out = io.StringIO()
    monkeypatch.setattr(commands, "console", lambda: Console(file=out, width=100, force_terminal=False,
                                                             color_system=None))
    printed_before: list[int] = []
    real = views.stream_query

    def stream_query(sql, home, *, limit=None, as_of=None, params=None):
        stream = real(sql, home, limit=limit, as_of=as_of, batch_rows=10, params=params)
        batches = stream.batches

        def counted():
            for batch in batches():
                printed_before.append(out.getvalue().count("── row "))
                yield batch

        stream.batches = counted
        return stream

    monkeypatch.setattr(views, "stream_query", stream_query)
    _invoke("query", "-x", "SELECT range AS i FROM range(100)")
    assert printed_before[:3] == [0, 10, 20] and len(printed_before) == 10
    assert out.getvalue().count("── row ") == 100 and "100 rows · query_spec_digest" in out.getvalue()
