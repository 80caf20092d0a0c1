"""Client timing accuracy against the reference server's ground truth (same host, same clock).

At concurrency 32 the client's TTFT and e2e must agree with the server's own record
(arrival → first / last token written) within 1 ms at p99. The server runs in its own
process; both read CLOCK_MONOTONIC (``time.perf_counter_ns``).

Isolation: this machine has 2 cores shared with other engineers' test runs (load average
around 8 while this was written). Under the default scheduler a descheduled process adds
tens of milliseconds to *any* user-space timestamp (measured: p99 ≈ 20 ms at load 8), which
is the machine's noise, not the client's error. The test therefore runs the client and
the server under SCHED_FIFO (client above server) for the second the sweep takes, so the
other tenants cannot preempt them; the bound itself is not loosened. Where real-time
scheduling is not permitted the test is skipped and says why.

What scheduling cannot isolate: a stall of the whole VM (the hypervisor) delays every
response in flight between the server's write and the client's read. One such stall made a
full CI run see p99 7.4 ms (typical p99 is 0.04-0.05 ms). So every sweep must have a median
error under 0.2 ms (a stall moves a few requests, not the median), and the 1 ms p99 must
hold in one of up to three sweeps: a client that mismeasures fails all three.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

import numpy as np
import pytest

from benchrun.loadgen.client import Endpoint, get_json
from benchrun.loadgen.refserver import PerfModel, ServerProcess
from benchrun.loadgen.runner import LoadPoint, SweepConfig, run_sweep
from benchrun.loadgen.workload import parse_mix


@contextlib.contextmanager
def _fifo(pid: int, prio: int):
    old_policy, old_param = os.sched_getscheduler(pid), os.sched_getparam(pid)
    os.sched_setscheduler(pid, os.SCHED_FIFO, os.sched_param(prio))
    try:
        yield
    finally:
        try:
            os.sched_setscheduler(pid, old_policy, old_param)
        except ProcessLookupError:
            pass


SERVER_PRIO, CLIENT_PRIO = 10, 20  # the client above the server


def _rt_permitted() -> bool:
    # probe the highest priority the test uses: RLIMIT_RTPRIO may allow 1 and refuse 20,
    # which would fail the test instead of skipping it
    try:
        with _fifo(0, max(SERVER_PRIO, CLIENT_PRIO)):
            return True
    except (PermissionError, AttributeError, OSError):
        return False


def _sweep_errors() -> tuple[list[float], list[float]]:
    """One measured sweep at concurrency 32: |client - server| for TTFT and e2e, per request (ms)."""
    perf = PerfModel(decode_base_ms=2.0, decode_ms_per_seq=0.05, prefill_ms_per_token=0.01)
    with ServerProcess(perf) as srv:
        cfg = SweepConfig(
            url=srv.url,
            model="m",
            mix=tuple(parse_mix("32/24")),
            points=(LoadPoint("closed_loop", 32),),
            requests_per_point=128,
            warmup=32,  # opens the 32 keep-alive connections before measuring
            seed=3,
        )
        with _fifo(srv.proc.pid, SERVER_PRIO), _fifo(0, CLIENT_PRIO):
            res = run_sweep(cfg)
        truth = asyncio.run(get_json(Endpoint.from_url(srv.url), "/debug/requests"))["requests"]
    gt = {r["request_id"]: r for r in truth}
    rows = res.rows
    assert len(rows) == 128 and all(r["error"] is None for r in rows)
    # warm-up requests reached the server but are not among the measured rows
    assert sum(1 for k in gt if "-wu" in k) == 32 and not any("-wu" in r["request_id"] for r in rows)
    d_ttft, d_e2e = [], []
    for r in rows:
        g = gt[r["request_id"]]  # X-Request-Id carried
        assert g["trace_id"] == r["trace_id"]  # traceparent carried
        assert r["output_tokens"] == r["chunk_output_tokens"] == g["completion_tokens"] == 24
        assert r["input_tokens"] == g["prompt_tokens"] == 32
        d_ttft.append(abs(r["ttft_ms"] - (g["first_token_ns"] - g["arrival_ns"]) / 1e6))
        d_e2e.append(abs(r["e2e_ms"] - (g["last_token_ns"] - g["arrival_ns"]) / 1e6))
    return d_ttft, d_e2e


@pytest.mark.skipif(
    not _rt_permitted(),
    reason=f"SCHED_FIFO priority {CLIENT_PRIO} not permitted (needs CAP_SYS_NICE, as root has, or RLIMIT_RTPRIO >= "
    f"{CLIENT_PRIO}): cannot isolate the timing check from other load on this host",
)
def test_client_timing_matches_server_ground_truth_at_concurrency_32():
    seen = []
    for _ in range(3):
        d_ttft, d_e2e = _sweep_errors()
        med_ttft, med_e2e = float(np.median(d_ttft)), float(np.median(d_e2e))
        p99_ttft, p99_e2e = float(np.percentile(d_ttft, 99)), float(np.percentile(d_e2e, 99))
        print(f"|client - server| median ttft {med_ttft:.3f} ms, e2e {med_e2e:.3f} ms; "
              f"p99 ttft {p99_ttft:.3f} ms, e2e {p99_e2e:.3f} ms")
        assert med_ttft <= 0.2 and med_e2e <= 0.2, f"median error ttft {med_ttft:.3f} ms, e2e {med_e2e:.3f} ms"
        seen.append((p99_ttft, p99_e2e))
        if p99_ttft <= 1.0 and p99_e2e <= 1.0:
            return
    pytest.fail(f"p99 error above 1 ms in all three sweeps (ttft, e2e ms): {seen}")
