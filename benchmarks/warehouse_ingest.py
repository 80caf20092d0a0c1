"""Benchmark: curating generated serving request rows into serving_request_fact vs DuckDB's own COPY.

Generates ``--rows`` request rows spread over ``--runs`` runs (raw ``*_requests.parquet``
files, one per run, as a serving suite writes them), then in separate child processes
(so each phase's peak RSS is its own, read with ``os.wait4``):

1. ``ours``: ``benchrun.warehouse.writer.write_partition`` + ``curate.stream_request_file``
   per run, the code path ``curate_run`` uses (streaming batches, temp name + fsync +
   rename per partition);
2. ``duckdb``: the same rows with the same added columns written by DuckDB's own
   ``COPY (SELECT ...) TO ... (FORMAT parquet, PARTITION_BY run_id)``.

Then three playbook-like queries (p99 by bucket across all runs; worst node by p99; runs
whose p99/p50 ratio doubled against the previous run) through the warehouse views
(``benchrun.warehouse.query``) and as a bare DuckDB scan of the same files; results must
agree. Usage::

    .venv/bin/python benchmarks/warehouse_ingest.py [--rows 10000000] [--runs 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NODES = 16


def run_id_of(i: int) -> str:
    return f"bench-{i:05d}"


def node_of(i: int) -> str:
    return f"node-{i % NODES:02d}"


def generate(raw_dir: Path, rows: int, runs: int, seed: int = 7) -> None:
    """One requests parquet per run; a few runs get a heavy tail (their p99/p50 ratio jumps)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    per_run = rows // runs
    buckets = np.array(["128/128", "512/128", "2048/256", "4096/512"])
    raw_dir.mkdir(parents=True, exist_ok=True)
    tail_runs = set(range(50, runs, max(1, runs // 10)))
    for i in range(runs):
        n = per_run + (1 if i < rows % runs else 0)
        base = rng.lognormal(mean=4.6, sigma=0.25, size=n)
        if i in tail_runs:
            base = np.where(rng.random(n) < 0.05, base * 8.0, base)
        idx = pa.array(np.arange(n)).cast(pa.string())
        ttft = base * 0.2
        out_tok = rng.integers(64, 512, size=n)
        table = pa.table({
            "request_id": pc.binary_join_element_wise(f"{i}-", idx, ""),
            "trace_id": pc.binary_join_element_wise(f"t{i}-", idx, ""),
            "point": np.full(n, "c=8"),
            "bucket": buckets[rng.integers(0, len(buckets), size=n)],
            "send_ts": 1.7e9 + i * 100 + np.arange(n) * 0.01,
            "ttft_ms": ttft,
            "e2e_ms": base,
            "input_tokens": rng.integers(128, 4096, size=n),
            "output_tokens": out_tok,
            "decode_ms_per_token": (base - ttft) / np.maximum(out_tok - 1, 1),
            "error": pa.nulls(n, pa.string()),
        })
        pq.write_table(table, raw_dir / f"{run_id_of(i)}_serving_r1_requests.parquet", compression="snappy")


def phase_ours(raw_dir: Path, home: Path, runs: int) -> None:
    from benchrun.warehouse.curate import stream_request_file
    from benchrun.warehouse.writer import write_partition

    for i in range(runs):
        run_id = run_id_of(i)
        relpath = f"raw/{run_id}_serving_r1_requests.parquet"
        consts = {"run_id": run_id, "benchmark_case_id": f"case-{i}", "node_name": node_of(i), "suite": "serving",
                  "replicate": 1, "workload_spec_digest": "w" * 64, "artifact_manifest_digest": "a" * 64,
                  "raw_uri": f"file:///objects/{run_id}", "raw_path": relpath, "raw_sha256": "s" * 64}
        write_partition(home, "serving_request_fact", run_id, stream_request_file(raw_dir / Path(relpath).name, consts))


def phase_duckdb(raw_dir: Path, out_dir: Path, runs: int) -> None:
    import duckdb

    from benchrun.warehouse.schemas import SERVING_REQUEST_FACT, duckdb_type

    con = duckdb.connect()
    con.execute("CREATE TEMP TABLE nodes AS SELECT * FROM (VALUES " +
                ",".join(f"('{run_id_of(i)}','{node_of(i)}',{i})" for i in range(runs)) + ") t(run_id, node_name, i)")
    exprs = {
        "run_id": "n.run_id", "benchmark_case_id": "'case-' || n.i", "node_name": "n.node_name",
        "suite": "'serving'", "replicate": "1", "workload_spec_digest": f"'{'w' * 64}'",
        "artifact_manifest_digest": f"'{'a' * 64}'", "raw_uri": "'file:///objects/' || n.run_id",
        "raw_path": "'raw/' || n.run_id || '_serving_r1_requests.parquet'", "raw_sha256": f"'{'s' * 64}'",
    }
    cols = []
    raw_cols = {"request_id", "trace_id", "point", "bucket", "send_ts", "ttft_ms", "e2e_ms", "input_tokens",
                "output_tokens", "decode_ms_per_token", "error"}
    for f in SERVING_REQUEST_FACT:
        src = f"r.{f.name}" if f.name in raw_cols else exprs.get(f.name, "NULL")
        cols.append(f'CAST({src} AS {duckdb_type(f.type)}) AS "{f.name}"')
    glob = str(raw_dir / "*_requests.parquet")
    con.execute(
        f"COPY (SELECT {', '.join(cols)} FROM read_parquet('{glob}', filename = true) r "
        f"JOIN nodes n ON n.run_id = regexp_extract(r.filename, '(bench-[0-9]+)_serving', 1)) "
        f"TO '{out_dir}' (FORMAT parquet, PARTITION_BY (run_id), OVERWRITE_OR_IGNORE)"
    )
    con.close()


QUERIES = {
    "p99_by_bucket": """SELECT bucket, quantile_cont(e2e_ms, 0.99) AS p99 FROM {t} GROUP BY bucket ORDER BY bucket""",
    "worst_node_by_p99": """SELECT node_name, quantile_cont(e2e_ms, 0.99) AS p99 FROM {t}
                            GROUP BY node_name ORDER BY p99 DESC LIMIT 1""",
    "p99_p50_ratio_doubled": """WITH r AS (SELECT run_id, quantile_cont(e2e_ms, 0.99) / quantile_cont(e2e_ms, 0.5) AS ratio
                                FROM {t} GROUP BY run_id),
                               l AS (SELECT run_id, ratio, lag(ratio) OVER (ORDER BY run_id) AS prev FROM r)
                               SELECT run_id, ratio, prev FROM l WHERE ratio >= 2 * prev ORDER BY run_id""",
}


def time_queries(home: Path, repeats: int = 3) -> dict:
    import duckdb

    from benchrun.warehouse import query
    from benchrun.warehouse.writer import table_glob

    out = {}
    bare_src = f"read_parquet('{table_glob(home, 'serving_request_fact')}')"
    for name, sql in QUERIES.items():
        ours_t, bare_t = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            ours = query(sql.format(t="serving_request_fact"), home).table.to_pylist()
            ours_t.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            con = duckdb.connect()
            bare = con.execute(sql.format(t=bare_src)).to_arrow_table().to_pylist()
            con.close()
            bare_t.append(time.perf_counter() - t0)
        if ours != bare:
            raise SystemExit(f"{name}: warehouse view and bare scan disagree")
        out[name] = {"ours_s": min(ours_t), "bare_s": min(bare_t), "rows": len(ours),
                     "sample": ours[:3]}
    return out


def child(argv: list[str]) -> tuple[float, float]:
    """Run a phase in a child process; (wall seconds, peak RSS MiB of that child)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, __file__, *argv])
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"phase {argv} failed with {proc.returncode}")
    return wall, usage.ru_maxrss / 1024.0


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*.parquet"))


def main() -> None:
    # What this measures is the per-run parquet layout (write_partition, the views over its files);
    # the default warehouse, the Iceberg tables, is benchmarks/warehouse_scale.py's.
    os.environ["BENCHRUN_WAREHOUSE_FORMAT"] = "parquet"
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--phase", choices=["ours", "duckdb"], default=None)
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()
    if args.phase:
        work = args.workdir
        if args.phase == "ours":
            phase_ours(work / "raw", work / "home", args.runs)
        else:
            phase_duckdb(work / "raw", work / "duckdb_copy", args.runs)
        return
    work = args.workdir or Path(tempfile.mkdtemp(prefix="benchrun-wh-bench-"))
    try:
        t0 = time.perf_counter()
        generate(work / "raw", args.rows, args.runs)
        gen_s = time.perf_counter() - t0
        common = ["--workdir", str(work), "--runs", str(args.runs), "--rows", str(args.rows)]
        ours_s, ours_rss = child(["--phase", "ours", *common])
        duck_s, duck_rss = child(["--phase", "duckdb", *common])
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from benchrun.warehouse import query

        n = query("SELECT count(*) FROM serving_request_fact", work / "home").table.column(0)[0].as_py()
        if n != args.rows:
            raise SystemExit(f"curated {n} rows, expected {args.rows}")
        queries = time_queries(work / "home")
        figures = {
            "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
            "rows": args.rows, "runs": args.runs, "generate_s": round(gen_s, 2),
            "ours_s": round(ours_s, 2), "ours_peak_rss_mib": round(ours_rss, 1),
            "duckdb_copy_s": round(duck_s, 2), "duckdb_peak_rss_mib": round(duck_rss, 1),
            "ratio_time": round(ours_s / duck_s, 2),
            "ours_bytes": dir_bytes(work / "home" / "warehouse"), "duckdb_bytes": dir_bytes(work / "duckdb_copy"),
            "queries": queries,
        }
        print(json.dumps(figures, indent=2, default=str))
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2, default=str))
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
