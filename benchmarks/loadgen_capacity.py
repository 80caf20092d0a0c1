"""Capacity of one load-generator worker: the streamed-chunk rate it sustains within 1 ms p99 timing error.

For each level the reference server (its own process) streams to the load generator at a
rising chunk rate (closed loop, concurrency c, one token per chunk, decode step
``--step-ms`` + 0.01 ms per sequence); the client's TTFT and e2e of every request are
compared with the server's ground truth for the same ``X-Request-Id``. A level is
*sustained* when p99 |client - server| ≤ 1 ms for both. Then the same is repeated with
more client workers to show how it scales.

Usage::

    .venv/bin/python benchmarks/loadgen_capacity.py [--levels 8,16,32,64,128] [--workers 1,2]
        [--seconds 2] [--step-ms 1.0] [--realtime] [--json OUT]

``--realtime`` runs client and server under SCHED_FIFO (needs CAP_SYS_NICE) to separate
the client's own limits from other tenants of a shared machine. The figures recorded in
benchmarks/README.md come from this script; nothing here is a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchrun.loadgen.client import Endpoint, get_json  # noqa: E402
from benchrun.loadgen.refserver import PerfModel, ServerProcess  # noqa: E402
from benchrun.loadgen.runner import LoadPoint, SweepConfig, run_sweep  # noqa: E402
from benchrun.loadgen.workload import parse_mix  # noqa: E402

OUT_TOKENS = 64


@contextlib.contextmanager
def fifo(pid: int, prio: int, enabled: bool):
    if not enabled:
        yield
        return
    old = (os.sched_getscheduler(pid), os.sched_getparam(pid))
    os.sched_setscheduler(pid, os.SCHED_FIFO, os.sched_param(prio))
    try:
        yield
    finally:
        try:
            os.sched_setscheduler(pid, *old)
        except ProcessLookupError:
            pass


def level(srv: ServerProcess, c: int, workers: int, seconds: float, step_ms: float, realtime: bool) -> dict:
    offered = c * 1000.0 / (step_ms + 0.01 * c)
    n = max(2 * c, int(offered * seconds / OUT_TOKENS))
    cfg = SweepConfig(url=srv.url, model="m", mix=tuple(parse_mix(f"16/{OUT_TOKENS}")), points=(LoadPoint("closed_loop", c),), requests_per_point=n, warmup=c, workers=workers, seed=1)
    t0 = time.perf_counter()
    with fifo(srv.proc.pid, 10, realtime), fifo(0, 20, realtime):
        res = run_sweep(cfg)
    wall = time.perf_counter() - t0
    truth = asyncio.run(get_json(Endpoint.from_url(srv.url), "/debug/requests", 30))["requests"]
    gt = {r["request_id"]: r for r in truth}
    ok = [r for r in res.rows if r["error"] is None]
    d_ttft = [abs(r["ttft_ms"] - (gt[r["request_id"]]["first_token_ns"] - gt[r["request_id"]]["arrival_ns"]) / 1e6) for r in ok]
    d_e2e = [abs(r["e2e_ms"] - (gt[r["request_id"]]["last_token_ns"] - gt[r["request_id"]]["arrival_ns"]) / 1e6) for r in ok]
    s = next(x for x in res.summaries if x["bucket"] == "all")
    return {
        "concurrency": c,
        "workers": workers,
        "requests": len(res.rows),
        "errors": len(res.rows) - len(ok),
        "offered_chunks_per_s": round(offered),
        "achieved_chunks_per_s": round(s["tokens_per_second"] or 0),
        "chunks_per_s_per_worker": round((s["tokens_per_second"] or 0) / max(1, res.context["points"][0]["workers_active"])),
        "client_cpu_max": round(s["client_cpu_max"] or 0, 3),
        "ttft_err_p99_ms": round(float(np.percentile(d_ttft, 99)), 3) if d_ttft else None,
        "e2e_err_p99_ms": round(float(np.percentile(d_e2e, 99)), 3) if d_e2e else None,
        "sustained": bool(d_ttft and np.percentile(d_ttft, 99) <= 1.0 and np.percentile(d_e2e, 99) <= 1.0 and not (len(res.rows) - len(ok))),
        "wall_s": round(wall, 2),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--levels", default="8,16,32,64,128")
    p.add_argument("--workers", default="1,2")
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--step-ms", type=float, default=1.0)
    p.add_argument("--realtime", action="store_true")
    p.add_argument("--json", default=None)
    a = p.parse_args()
    levels = [int(x) for x in a.levels.split(",")]
    results = []
    perf = PerfModel(decode_base_ms=a.step_ms, decode_ms_per_seq=0.01, prefill_ms_per_token=0.0, max_batch=1024, max_batched_tokens=1 << 20)
    for w in [int(x) for x in a.workers.split(",")]:
        with ServerProcess(perf) as srv:
            for c in levels:
                r = level(srv, c, w, a.seconds, a.step_ms, a.realtime)
                results.append(r)
                print(json.dumps(r), flush=True)
    print()
    print("| workers | concurrency | offered chunks/s | achieved chunks/s | per worker | client CPU (max) | TTFT err p99 ms | e2e err p99 ms | within 1 ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['workers']} | {r['concurrency']} | {r['offered_chunks_per_s']} | {r['achieved_chunks_per_s']} | {r['chunks_per_s_per_worker']} | {r['client_cpu_max']:.0%} | {r['ttft_err_p99_ms']} | {r['e2e_err_p99_ms']} | {'yes' if r['sustained'] else 'no'} |")
    if a.json:
        Path(a.json).write_text(json.dumps({"realtime": a.realtime, "step_ms": a.step_ms, "results": results}, indent=2))


if __name__ == "__main__":
    main()
