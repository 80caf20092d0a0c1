"""Benchmark: the warehouse at scale on Iceberg tables vs today's per-run parquet layout (issue 23).

Fabricates ``--runs`` runs spread over 30 days (one benchmark_run_fact row, ``--measurements``
measurement rows, 3 serving-outcome rows and ``--requests`` request rows each) and writes each run

1. as today: one parquet partition per run per table (``benchrun.warehouse.writer.write_partition``);
2. as Iceberg commits: one commit per run per table (``benchrun.warehouse.lake.commit_run``, the
   local sqlite catalog), timing every commit;

then compacts the Iceberg tables (``lake.compact``: one file per day and suite) and times the four
playbook queries (their own SQL, for the newest run against the one before) and a 30-day history
query, through ``benchrun.warehouse.query`` on each layout (before and after compaction for
Iceberg), checking that both layouts give the same rows. Usage::

    .venv/bin/python benchmarks/warehouse_scale.py [--runs 10000] [--requests 5000] [--measurements 8]

The issue's full scale is ``--runs 10000 --requests 5000`` (50 M request rows, 40,000 commits).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa  # noqa: E402

from benchrun.warehouse.schemas import TABLES  # noqa: E402

SUITES = ("gemm", "fio", "serving")
NOW = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)


def run_id_of(i: int) -> str:
    return f"scale-{i:06d}"


def started_of(i: int, runs: int) -> dt.datetime:
    return NOW - dt.timedelta(days=30) + dt.timedelta(seconds=(30 * 86400) * i / max(runs, 1))


def fabricate(i: int, runs: int, requests: int, measurements: int) -> dict[str, pa.Table]:
    """One run's rows of the four tables the playbooks and the history read."""
    from benchrun.warehouse.writer import rows_to_table

    rid, start = run_id_of(i), started_of(i, runs)
    finished = start + dt.timedelta(minutes=20)
    wobble = 1.0 + 0.02 * ((i * 7919) % 13) / 13
    run = rows_to_table("benchmark_run_fact", [dict(run_id=rid, name="scale", phase="Succeeded",
                                                    created_utc=start - dt.timedelta(seconds=30), started_utc=start,
                                                    finished_utc=finished, selected_scheduler_path="local")])
    meas = rows_to_table("measurement_fact", [
        dict(run_id=rid, layer="micro", suite=SUITES[k % 2], replicate=k // 4, case="c", unit="GFLOP/s" if k % 2 == 0 else "s",
             metric="gflops" if k % 2 == 0 else "queue_wait_s", value=100.0 * wobble + k, direction="higher",
             status="ok", finished_utc=finished, gpu_uuid=None)
        for k in range(measurements)])
    outcome = rows_to_table("serving_outcome_fact", [
        dict(run_id=rid, layer="serving", suite="serving", replicate=k, point="p1", bucket=None, n_requests=requests // 3,
             e2e_ms_mean=50.0 * wobble, e2e_ms_p50=45.0 * wobble, e2e_ms_p99=90.0 * wobble,
             ttft_ms_mean=10.0 * wobble, ttft_ms_p50=9.0 * wobble, ttft_ms_p99=20.0 * wobble)
        for k in range(3)])
    schema = TABLES["serving_request_fact"]
    n = requests
    cols = {f.name: pa.nulls(n, f.type) for f in schema}
    cols["run_id"] = pa.array([rid] * n, pa.string())
    cols["suite"] = pa.array(["serving"] * n, pa.string())
    cols["replicate"] = pa.array([k % 3 for k in range(n)], pa.int64())
    cols["request_id"] = pa.array([f"{rid}-{k}" for k in range(n)], pa.string())
    for name, scale in (("e2e_ms", 50.0), ("ttft_ms", 10.0)):
        if name in cols:
            cols[name] = pa.array([scale * wobble * (1 + (k % 97) / 97) for k in range(n)], pa.float64())
    req = pa.table([cols[f.name] for f in schema], schema=schema)
    return {"benchmark_run_fact": run, "measurement_fact": meas, "serving_outcome_fact": outcome,
            "serving_request_fact": req}


HISTORY_SQL = """
SELECT date_trunc('day', finished_utc) AS day, suite, metric, count(*) AS n, median(value) AS median_value
FROM measurement_fact
WHERE suite = 'gemm' AND metric = 'gflops' AND finished_utc >= TIMESTAMPTZ '2026-11-01 00:00:00+00'
GROUP BY ALL ORDER BY day
"""
REQUEST_SQL = "SELECT count(*) AS n, quantile_cont(e2e_ms, 0.99) AS p99 FROM serving_request_fact WHERE suite = 'serving'"


def _queries(runs: int) -> list[tuple[str, str, list]]:
    from benchrun.playbooks import backpressure, gpu_utilization, straggler, tail_latency

    run, base = run_id_of(runs - 1), run_id_of(runs - 2)
    return [("tail_latency", tail_latency.SQL, [run, base]),
            ("gpu_utilization", gpu_utilization.SQL, [run, base]),
            ("backpressure", backpressure.SQL, [run, base]),
            ("straggler", straggler.SQL, [run, straggler.Z_MIN, straggler.MIN_RANKS_FOR_Z, straggler.LAG_SHARE_MIN]),
            ("history_30d", HISTORY_SQL, []),
            ("requests_p99_all_runs", REQUEST_SQL, [])]


def time_queries(home: Path, runs: int, fmt: str, repeats: int = 3) -> tuple[dict[str, float], dict[str, str]]:
    from benchrun.warehouse import lake, views

    os.environ[lake.FORMAT_ENV] = fmt
    views._BUILT.clear()
    out, answers = {}, {}
    for name, sql, params in _queries(runs):
        best = None
        for _ in range(repeats):
            t = time.perf_counter()
            res = views.query(sql, home, params)
            took = time.perf_counter() - t
            best = took if best is None else min(best, took)
        out[name] = round(best, 3)
        answers[name] = json.dumps(res.table.to_pylist(), sort_keys=True, default=str)
    return out, answers


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--requests", type=int, default=5_000, help="request rows per run")
    ap.add_argument("--measurements", type=int, default=8, help="measurement rows per run")
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()

    from benchrun.warehouse import lake
    from benchrun.warehouse.writer import write_partition

    home = Path(args.dir or tempfile.mkdtemp(prefix="benchrun-scale-"))
    home.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    latencies: list[float] = []
    by_run: list[float] = []  # the run's commits, all tables: how commit time grows with history
    t_parquet = t_iceberg = 0.0
    t0 = time.perf_counter()
    for i in range(args.runs):
        tables = fabricate(i, args.runs, args.requests, args.measurements)
        t = time.perf_counter()
        for name, data in tables.items():
            write_partition(home, name, run_id_of(i), [data])
        t_parquet += time.perf_counter() - t
        t = time.perf_counter()
        for name, data in tables.items():
            c = time.perf_counter()
            lake.commit_run(home, name, run_id_of(i), [data], started_of(i, args.runs))
            latencies.append(time.perf_counter() - c)
        by_run.append(time.perf_counter() - t)
        t_iceberg += time.perf_counter() - t
        if (i + 1) % max(1, args.runs // 10) == 0:
            print(f"  {i + 1}/{args.runs} runs written ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    n_tables = len(latencies) // max(args.runs, 1)
    deciles = []
    step = max(1, args.runs // 10)
    for lo in range(0, args.runs, step):
        chunk = sorted(latencies[lo * n_tables:(lo + step) * n_tables])
        if chunk:
            deciles.append({"runs": f"{lo + 1}-{min(lo + step, args.runs)}",
                            "commit_p50_s": round(chunk[len(chunk) // 2], 4),
                            "commit_p99_s": round(chunk[min(len(chunk) - 1, int(0.99 * len(chunk)))], 4),
                            "s_per_run": round(sum(by_run[lo:lo + step]) / len(by_run[lo:lo + step]), 3)})
    latencies.sort()
    p = (lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))])
    files_before = {t: lake.table_files(home, t) for t in ("measurement_fact", "serving_request_fact")}
    q_parquet, a_parquet = time_queries(home, args.runs, "parquet")
    q_ice_before, a_ice = time_queries(home, args.runs, "iceberg")
    t = time.perf_counter()
    compacted = {name: lake.compact(home, name) for name in ("benchmark_run_fact", "measurement_fact",
                                                             "serving_outcome_fact", "serving_request_fact")}
    t_compact = time.perf_counter() - t
    q_ice_after, a_ice_after = time_queries(home, args.runs, "iceberg")
    agree = {n: a_parquet[n] == a_ice[n] == a_ice_after[n] for n in a_parquet}
    report = {
        "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "load_avg_before": [round(x, 2) for x in load_before], "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "runs": args.runs, "request_rows": args.runs * args.requests, "commits": len(latencies),
        "commit_growth": deciles,
        "commit_p50_s": round(p(0.50), 4), "commit_p99_s": round(p(0.99), 4), "commit_max_s": round(latencies[-1], 4),
        "write_parquet_s": round(t_parquet, 1), "write_iceberg_s": round(t_iceberg, 1),
        "files_before_compaction": files_before,
        "files_after_compaction": {t: compacted[t][1] for t in files_before},
        "compaction_s": round(t_compact, 1),
        "queries_parquet_s": q_parquet, "queries_iceberg_before_compaction_s": q_ice_before,
        "queries_iceberg_after_compaction_s": q_ice_after, "same_rows": agree, "home": str(home),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
