"""The ``benchrun query``, ``benchrun lineage`` and ``benchrun retention`` commands."""

from __future__ import annotations

import decimal
import json
import math
from typing import Any, Optional

import typer
from benchrun.console import console


def _home(command: str | None = None):
    """This home; for a read-only ``command``, only one that exists (it is never created)."""
    from benchrun.paths import benchrun_home, existing_home

    return existing_home(command) if command else benchrun_home()


def _cell(value: Any) -> str:
    """A CSV cell: every value whole (a float as its shortest exact repr, never rounded: ``.6g`` made
    640 distinct send times one), NULL as empty."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def json_keys(columns: list[str]) -> list[str]:
    """The keys of ``query --json``'s rows: the column names, a repeated one made unique as ``name_2``,
    ``name_3``, ... (a name the result already has is skipped), so no value is lost to a shared key."""
    taken, keys = set(columns), []
    for name in columns:
        if name in keys:
            n = 2
            while f"{name}_{n}" in taken:
                n += 1
            name = f"{name}_{n}"
            taken.add(name)
        keys.append(name)
    return keys


_EXACT = 2**53 - 1  # the largest integer every JSON reader (jq, JavaScript) holds exactly


def _strict(value: Any) -> Any:
    """``value`` as strict JSON reads it back: an integer beyond ±(2**53 - 1) (an Iceberg snapshot
    id) as a string of its digits, which jq would otherwise round; a DECIMAL as a number when a
    double holds it exactly (it was always a string), else its digits as a string; NaN and
    ±Infinity, which strict JSON has no token for, as null."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if -_EXACT <= value <= _EXACT else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, decimal.Decimal):  # DuckDB's DECIMAL (`SELECT 1.5` is one): a number where it is exact
        if not value.is_finite():
            return None
        as_float = float(value)
        return as_float if decimal.Decimal(repr(as_float)) == value else str(value)
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    return value


def query_cmd(
    sql: str = typer.Argument(..., help="One SELECT statement over the warehouse views."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON object with rows and query_spec_digest."),
    as_csv: bool = typer.Option(False, "--csv", help="Print CSV (header + rows)."),
    limit: int = typer.Option(10_000, "--limit", help="Print at most this many rows (0: no limit); a cut says so."),
    vertical: Optional[bool] = typer.Option(None, "--vertical/--table", "-x",
                                            help="One record per row / a table (default: a table when it fits)."),
    as_of: Optional[str] = typer.Option(None, "--as-of", metavar="SNAPSHOT|TIME|TAG",
                                        help="Read the Iceberg tables as of a snapshot id, an ISO 8601 time, or a "
                                             "tag made by `benchrun tag-warehouse`."),
    param: Optional[list[str]] = typer.Option(None, "--param", metavar="VALUE",
                                              help="The value of $1, $2, ... in order (repeat it): JSON where it "
                                                   "reads as JSON (3, null, [\"a\"]), else the text as given; a "
                                                   "playbook's --json records its query's params."),
) -> None:
    """Run read-only SQL over the curated warehouse (a table by default).

    The query runs on a connection that reads only the warehouse's own files (no other
    file, network or extension) and refuses anything that writes or changes settings.
    Rows are streamed (--json, --csv and one record per row; a table holds the rows it shows),
    so memory stays bounded whatever the limit.
    """
    import sys

    from benchrun.errors import BenchrunError
    from benchrun.warehouse.views import stop_queries_on_signal

    if as_json and as_csv:
        raise BenchrunError("query: choose one of --json and --csv")
    if limit < 0:
        raise BenchrunError("query: --limit must be 0 (no limit) or a positive number of rows")
    seen = None
    try:
        with stop_queries_on_signal() as seen:  # Ctrl-C / SIGTERM end a runaway query at once
            _query(sql, as_json, as_csv, limit, vertical, as_of, [_param(v) for v in param or []])
    except (Exception, KeyboardInterrupt, SystemExit):
        if seen is None or seen.take() is None:
            raise
        # DuckDB turns the interrupt into its own error (or Python's handler raised): one line.
        print(f"query interrupted (signal {seen.signum})", file=sys.stderr)
        raise typer.Exit(128 + seen.signum) from None


def _param(text: str) -> Any:
    """A --param value: what it reads as in JSON, else the text (a run id, a name)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _query(sql: str, as_json: bool, as_csv: bool, limit: int, vertical: Optional[bool],
           as_of: Optional[str] = None, params: list[Any] | None = None) -> None:
    import sys

    from benchrun.errors import BenchrunError
    from benchrun.warehouse.views import stream_query

    when = None
    if as_of is not None:
        from benchrun.warehouse.lakeviews import parse_as_of

        when = parse_as_of(as_of.strip().strip('"'))  # a snapshot id as --json wrote it (a string) reads back
    home = _home("query")
    from benchrun.sharedstate import CHANGE_POINTS, pull_paths

    # With BENCHRUN_SHARED_STATE, the file no catalog holds comes from the shared prefix first (as a run
    # worker's first step pulls it): change_point_fact's. Before, a query from a pod or machine that never
    # ran change_points had no change_point_fact. (Not the parquet layout's partitions: every query would
    # download the whole warehouse again, and replace this home's own partitions with the shared copies.)
    try:
        pull_paths(home, CHANGE_POINTS)
    except BenchrunError as exc:  # a read-only command: what this home holds, said so
        print(f"warning: {exc}; the query reads what this home holds of it", file=sys.stderr)
    stream = stream_query(sql, home, limit=limit or None, as_of=when, params=params)
    for note in stream.notes:
        print(f"warning: {note}", file=sys.stderr)
    cols = stream.columns
    cut = (lambda: f"output cut at --limit {limit} rows; narrow the query or raise --limit")
    if as_json:
        # Streamed JSON: the document is written row by row, never held whole in memory.
        keys = json_keys(cols)
        out = sys.stdout
        out.write('{\n  "query_spec_digest": ' + json.dumps(stream.query_spec_digest)
                  + (',\n  "snapshot_ids": ' + json.dumps({t: None if i is None else str(i)
                                                         for t, i in stream.snapshot_ids.items()})
                     if stream.snapshot_ids is not None else "")
                  + ',\n  "columns": ' + json.dumps(keys) + ',\n  "rows": [')
        first = True
        for rows in stream.batches():
            for row in rows:
                out.write(("\n    " if first else ",\n    ")
                          + json.dumps(_strict(dict(zip(keys, row))), default=str, allow_nan=False))
                first = False
        out.write(("\n  ]" if not first else "]") + ',\n  "truncated": ' + json.dumps(stream.truncated)
                  + ',\n  "limit": ' + json.dumps(limit or None) + "\n}\n")
        if stream.truncated:
            print(f"warning: {cut()}", file=sys.stderr)
    elif as_csv:
        import csv

        writer = csv.writer(sys.stdout)
        writer.writerow(cols)
        for rows in stream.batches():
            writer.writerows([_cell(v) for v in row] for row in rows)
        if stream.truncated:
            print(f"warning: {cut()}", file=sys.stderr)
    else:
        from benchrun.warehouse.display import print_rows

        def caption() -> str:  # the count and the cut are known once every row is printed
            more = f" (cut at --limit {limit}; more rows exist)" if stream.truncated else ""
            return (f"{stream.rows_out} rows{more} · query_spec_digest {stream.query_spec_digest[:16]}…"
                    + _snapshot_caption(stream.snapshot_ids))

        # Records stream as they come; a table (it fits the terminal) holds its rows to size its columns.
        print_rows(console(), cols, stream.batches(), vertical=vertical, caption=caption)


def _snapshot_caption(snapshots: Optional[dict]) -> str:
    """The snapshots a query read (Iceberg): enough to read the same numbers again with --as-of."""
    if not snapshots:
        return ""
    return " · snapshots " + ", ".join(f"{t}={s}" for t, s in snapshots.items() if s is not None)


def lineage_cmd(
    run_id: str = typer.Argument(..., help="The run id."),
    metric: str = typer.Argument(..., help="Metric name, e.g. p99_latency_ms."),
    case: Optional[str] = typer.Option(None, "--case", help="Only this case of the metric."),
    as_json: bool = typer.Option(False, "--json", help="Print the lineage as JSON."),
) -> None:
    """Walk a published median (as `benchrun show` prints it) back to its raw objects, re-checking every hash on the way."""
    from benchrun.warehouse.lineage import trace

    reports = trace(_home("lineage"), run_id, metric, case)
    if as_json:
        typer.echo(json.dumps([r.to_json() for r in reports], indent=2, default=str))
        return
    from rich.markup import escape

    con = console()
    for r in reports:
        rank = f" rank {r.rank_id}" if r.rank_id is not None else ""
        rolled = (f" (each replicate's rows, up to {r.rows_per_replicate}, taken as their median first, as published)"
                  if r.rows_per_replicate > 1 else "")
        con.print(f"[bold]{r.run_id}[/] " + escape(f"{r.suite} {r.metric} case={r.case!r}{rank}: median {r.median:.6g} "
                                                    f"{r.unit} over {r.replicates} replicates{rolled}"))
        if r.ranks:  # extra detail, never the published figure
            con.print("  per rank (not published): " + "; ".join(
                f"rank {k.rank_id}: median {k.median:.6g} over {k.replicates} replicates" for k in r.ranks), markup=False)
        con.print(f"  query_spec_digest {r.query_spec_digest}")
        con.print(f"  workload_spec_digest {r.workload_spec_digest}")
        # The store's URI is its path template; show where this run's objects are.
        where = (r.store_uri or "").replace("${RUN_ID}", r.run_id)
        con.print(f"  artifact_manifest_digest {r.artifact_manifest_digest} ({where})", markup=False)
        for s in r.steps:
            at = f" rank {s.rank_id}" if s.rank_id is not None else ""
            con.print(f"  r{s.replicate}{at} = {s.value:.6g} ← {s.raw_path} {s.raw_uri}", markup=False)
            for check in s.checks:
                con.print(f"      ✓ {check}", markup=False)
    con.print("lineage verified: every value re-hashed to its raw bytes")


def retention_cmd(
    apply: bool = typer.Option(False, "--apply", help="Remove what is listed (default: dry run)."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
) -> None:
    """List curated partitions past cold retention and raw objects past theirs; --apply removes them."""
    from benchrun.warehouse.retention import apply_retention, plan_retention

    home = _home("retention")
    plan = plan_retention(home)
    record = apply_retention(home, plan) if apply else None
    if as_json:
        typer.echo(json.dumps({**plan.to_json(), "record": str(record) if record else None}, indent=2, default=str))
        return
    verb = "removed" if apply else "would remove"
    for run in plan.runs:
        age = f"{run.age_days:.1f} d" if run.age_days is not None else "age unknown"
        typer.echo(f"run {run.run_id}: {age}, tier {run.tier}")
    for part in plan.partitions:
        typer.echo(f"{verb} partition {part['table']}/run_id={part['run_id']}")
    for obj in plan.objects:
        typer.echo(f"{verb} raw object {obj['uri']} (runs {', '.join(obj['runs'])})")
    for note in plan.notes:
        typer.echo(f"note: {note}")
    typer.echo(f"{verb}: {len(plan.partitions)} partitions, {len(plan.objects)} raw objects; "
               f"kept {plan.kept_objects} raw objects inside retention"
               + (f"; record {record}" if record else " (dry run; --apply to remove)"))


def register(app: typer.Typer) -> None:
    """Add query, lineage and retention to the benchrun CLI."""
    app.command("query")(query_cmd)
    app.command("lineage")(lineage_cmd)
    app.command("retention")(retention_cmd)
    from benchrun.warehouse.lake_commands import register as register_lake

    register_lake(app)
