"""Closed-loop timing error of the load generator at 16 and 32 streams, before and after opening connections ahead of the go time, with the first wave apart.

For each concurrency c and each mode, a closed-loop sweep runs against the reference server
(its own process; one token per chunk, decode step ``--step-ms`` + 0.01 ms per sequence,
``--tokens`` output tokens) and every request's client TTFT and e2e are compared with the
server's own timestamps for the same ``X-Request-Id`` (arrival of the request head, kernel
stamp -> first / last token written), both on CLOCK_MONOTONIC.

- ``before``: as the load generator was before issue 30 item 2: no warm-up, no connection
  opened before the go time, latency measured from the send (connection set-up included).
- ``after``: the defaults now: one warm-up request per stream, every stream's connection open
  before the go time; latency measured here from the write on the open connection (what the
  server's arrival stamp is compared with). The tool's own ``ttft_ms`` runs from the send, a
  connection opened inside a request included; here no measured request opens one, so the two
  differ only by taking an idle connection from the pool.

The first wave (each stream's first request, ``c`` requests) is reported apart from the rest.
Modes alternate round by round so that the machine's load falls on both alike.

Usage::

    .venv/bin/python benchmarks/loadgen_firstwave.py [--levels 16,32] [--rounds 5] [--waves 8]
        [--step-ms 1.0] [--tokens 64] [--realtime] [--json OUT]

``--realtime`` runs client and server under SCHED_FIFO, as in loadgen_capacity.py, to separate
the client's own error from other tenants of a shared machine.

The figures in benchmarks/README.md come from this script; nothing here is a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchrun.loadgen.client import Endpoint, get_json  # noqa: E402
from benchrun.loadgen.refserver import PerfModel, ServerProcess  # noqa: E402
from benchrun.loadgen.runner import LoadPoint, SweepConfig, run_sweep  # noqa: E402
from benchrun.loadgen.workload import parse_mix  # noqa: E402
from loadgen_capacity import fifo  # noqa: E402


def run(srv: ServerProcess, c: int, mode: str, waves: int, tokens: int) -> list[dict]:
    """One sweep of ``waves * c`` requests; per request: first wave or not, |client - server| errors."""
    before = mode == "before"
    cfg = SweepConfig(url=srv.url, model="m", mix=tuple(parse_mix(f"16/{tokens}")), points=(LoadPoint("closed_loop", c),),
                      requests_per_point=waves * c, warmup=0 if before else None, preconnect=not before, seed=1)
    res = run_sweep(cfg)
    truth = {r["request_id"]: r for r in asyncio.run(get_json(Endpoint.from_url(srv.url), "/debug/requests", 30))["requests"]}
    rows = sorted((r for r in res.rows if r["error"] is None), key=lambda r: r["send_mono_ns"])
    out = []
    for i, r in enumerate(rows):
        g = truth[r["request_id"]]
        origin = r["send_mono_ns"] if before else r["write_mono_ns"]  # before: as the old code measured
        ttft = (r["first_token_mono_ns"] - origin) / 1e6
        e2e = (r["last_token_mono_ns"] - origin) / 1e6
        out.append({
            "first_wave": i < c,
            "ttft_err_ms": abs(ttft - (g["first_token_ns"] - g["arrival_ns"]) / 1e6),
            "e2e_err_ms": abs(e2e - (g["last_token_ns"] - g["arrival_ns"]) / 1e6),
            "connect_ms": r["connect_ms"],
        })
    if len(rows) != len(res.rows):
        raise SystemExit(f"{len(res.rows) - len(rows)} requests failed at c={c} ({mode})")
    return out


def p99(xs: list[float]) -> float | None:
    return round(float(np.percentile(xs, 99)), 3) if xs else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--levels", default="16,32")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--waves", type=int, default=8, help="requests per stream per sweep")
    p.add_argument("--step-ms", type=float, default=1.0)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--realtime", action="store_true", help="client and server under SCHED_FIFO (needs CAP_SYS_NICE)")
    p.add_argument("--json", default=None)
    a = p.parse_args()
    load0 = os.getloadavg()
    perf = PerfModel(decode_base_ms=a.step_ms, decode_ms_per_seq=0.01, prefill_ms_per_token=0.0, max_batch=1024, max_batched_tokens=1 << 20)
    samples: dict[tuple[int, str], list[dict]] = {}
    with ServerProcess(perf) as srv, fifo(srv.proc.pid, 10, a.realtime), fifo(0, 20, a.realtime):
        for _ in range(a.rounds):
            for c in [int(x) for x in a.levels.split(",")]:
                for mode in ("before", "after"):
                    samples.setdefault((c, mode), []).extend(run(srv, c, mode, a.waves, a.tokens))
    load1 = os.getloadavg()
    results = []
    for (c, mode), rows in sorted(samples.items(), key=lambda kv: (kv[0][0], kv[0][1] != "before")):
        rest = [r for r in rows if not r["first_wave"]]
        first = [r for r in rows if r["first_wave"]]
        conn = [r["connect_ms"] for r in rows if r["connect_ms"] is not None]
        results.append({
            "concurrency": c, "mode": mode, "n": len(rows), "n_first_wave": len(first),
            "ttft_err_p99_ms": p99([r["ttft_err_ms"] for r in rows]),
            "e2e_err_p99_ms": p99([r["e2e_err_ms"] for r in rows]),
            "ttft_err_p99_ms_without_first_wave": p99([r["ttft_err_ms"] for r in rest]),
            "e2e_err_p99_ms_without_first_wave": p99([r["e2e_err_ms"] for r in rest]),
            "ttft_err_p99_ms_first_wave": p99([r["ttft_err_ms"] for r in first]),
            "ttft_err_max_ms_first_wave": round(max(r["ttft_err_ms"] for r in first), 3) if first else None,
            "connects_in_measured_requests": len(conn),
            "connect_ms_p99": p99(conn),
        })
    print(json.dumps({"realtime": a.realtime, "loadavg_start": load0, "loadavg_end": load1}))
    print("| streams | mode | n (first wave) | TTFT err p99 | e2e err p99 | TTFT err p99 w/o first wave | e2e err p99 w/o first wave | TTFT err p99, first wave only | connects inside requests (p99 ms) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['concurrency']} | {r['mode']} | {r['n']} ({r['n_first_wave']}) | {r['ttft_err_p99_ms']} ms | {r['e2e_err_p99_ms']} ms | "
              f"{r['ttft_err_p99_ms_without_first_wave']} ms | {r['e2e_err_p99_ms_without_first_wave']} ms | "
              f"{r['ttft_err_p99_ms_first_wave']} ms | {r['connects_in_measured_requests']} ({r['connect_ms_p99']}) |")
    if a.json:
        Path(a.json).write_text(json.dumps({"args": vars(a), "loadavg_start": load0, "loadavg_end": load1, "results": results}, indent=2))


if __name__ == "__main__":
    main()
