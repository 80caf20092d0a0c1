"""Load models, warm-up, reproducibility, worker processes and exact merging, against the reference server."""

from __future__ import annotations


import numpy as np
import pytest

from benchrun.loadgen import client as http
from benchrun.loadgen.metrics import summarize, window_s
from benchrun.loadgen.refserver import PerfModel, ServerProcess
from benchrun.loadgen.runner import LoadPoint, SweepConfig, _row, _Spec, _WorkerState, run_sweep
from benchrun.loadgen.workload import parse_mix
from helpers import threaded_server

FAST = PerfModel(decode_base_ms=0.3, decode_ms_per_seq=0.01, prefill_ms_per_token=0.001)




@pytest.fixture(scope="module")
def server():
    with ServerProcess(FAST) as sp:
        yield sp


def _cfg(url, **kw):
    base = dict(url=url, model="m", mix=tuple(parse_mix("16/4@0.5,32/8@0.5")), points=(LoadPoint("closed_loop", 1),), requests_per_point=12, warmup=0, seed=1)
    base.update(kw)
    return SweepConfig(**base)


def test_same_seed_same_requests_and_warmup_excluded(server):
    a = run_sweep(_cfg(server.url, warmup=3))
    b = run_sweep(_cfg(server.url, warmup=3))
    c = run_sweep(_cfg(server.url, warmup=3, seed=2))
    seq = lambda res: [r["bucket"] for r in res.rows]  # noqa: E731
    assert seq(a) == seq(b) and seq(a) != seq(c)
    assert len(a.rows) == 12 and not any("-wu" in r["request_id"] for r in a.rows)
    allrow = next(s for s in a.summaries if s["bucket"] == "all")
    assert allrow["n_warmup"] == 3 and allrow["n_requests"] == 12
    # each bucket's requests have that bucket's lengths, counted by the server's usage
    for r in a.rows:
        i, o = map(int, r["bucket"].split("/"))
        assert (r["input_tokens"], r["output_tokens"], r["usage_output_tokens"]) == (i, o, o)
        assert r["output_token_discrepancy"] == 0 and r["input_token_discrepancy"] == 0
        assert r["token_count_source"] == "usage"
        assert len(r["token_gaps_ms"]) == o - 1
    # bucket rows partition the point
    buckets = [s for s in a.summaries if s["bucket"] != "all"]
    assert sum(s["n_requests"] for s in buckets) == 12


def test_two_workers_merge_raw_rows_exactly(server):
    res = run_sweep(_cfg(server.url, points=(LoadPoint("closed_loop", 4),), requests_per_point=20, workers=2, warmup=2))
    rows = res.rows
    assert len(rows) == 20 and {r["worker"] for r in rows} == {0, 1}
    assert len({r["request_id"] for r in rows}) == 20
    s = next(x for x in res.summaries if x["bucket"] == "all")
    ttft = [r["ttft_ms"] for r in rows]
    # percentiles over the merged raw rows, not an average of per-worker percentiles
    assert s["ttft_ms_p99"] == pytest.approx(float(np.percentile(ttft, 99)))
    assert s["ttft_ms_p50"] == pytest.approx(float(np.median(ttft)))
    again = summarize(rows, point="c=4", load_model="closed_loop", offered_load=4, bucket="all", window=window_s(rows), slo=None, pricing=None)
    for k in ("e2e_ms_p90", "token_gap_ms_p99", "jitter_ms", "tokens_per_second"):
        assert s[k] == pytest.approx(again[k])
    assert res.context["points"][0]["workers_active"] == 2


def test_open_loop_poisson_schedule_has_the_offered_rate(server):
    res = run_sweep(_cfg(server.url, points=(LoadPoint("open_loop", 40.0),), requests_per_point=20))
    s = next(x for x in res.summaries if x["bucket"] == "all")
    # count-ended Poisson schedule is rescaled to span (n-1)/rate exactly
    assert s["scheduled_rate_rps"] == pytest.approx(40.0, rel=1e-6)
    assert s["achieved_rate_rps"] == pytest.approx(40.0, rel=0.5)  # sends may wake late under load
    assert s["load_model"] == "open_loop" and s["point"] == "rate=40"
    lags = [r["schedule_lag_ms"] for r in res.rows]
    assert min(lags) >= 0


def test_open_loop_constant_rate_across_workers_interleaves(server):
    res = run_sweep(_cfg(server.url, points=(LoadPoint("open_loop", 50.0, "constant"),), requests_per_point=20, workers=2))
    sched = sorted(r["scheduled_mono_ns"] for r in res.rows)
    gaps = np.diff(sched) / 1e6
    # 50 req/s overall: 20 ms apart, exactly, however late either worker woke (its lateness is
    # schedule lag, not a shifted schedule)
    assert np.allclose(gaps, 20.0, atol=0.01), gaps


def test_duration_ends_the_point(server):
    res = run_sweep(_cfg(server.url, points=(LoadPoint("closed_loop", 2),), requests_per_point=None, duration_s=0.4))
    sends = [r["send_mono_ns"] for r in res.rows]
    assert len(res.rows) > 2
    sched = [r["scheduled_mono_ns"] for r in res.rows]
    # no request is scheduled after the deadline (a send may follow a late wake-up)
    assert (max(sched) - min(sched)) / 1e9 < 0.4
    assert (max(sends) - min(sends)) / 1e9 < 0.4 + 0.25


def test_chat_api_and_headers_reach_the_server():
    with threaded_server(perf=FAST) as (srv, url):
        res = run_sweep(_cfg(url, api="chat", requests_per_point=4))
        recs = dict(srv.records)
    assert all(r["error"] is None for r in res.rows)
    for r in res.rows:
        assert recs[r["request_id"]]["trace_id"] == r["trace_id"]


def test_row_records_usage_versus_chunk_discrepancy():
    cfg = _cfg("http://127.0.0.1:9")
    st = _WorkerState(cfg, 0)
    spec = _Spec()
    spec.request_id, spec.trace_id, spec.bucket, spec.in_tokens, spec.out_tokens, spec.scheduled_ns = "r", "t", "16/4", 16, 4, 0
    out = http.Outcome()
    out.send_ns, out.first_ns, out.last_ns = 1_000_000, 3_000_000, 9_000_000
    out.chunk_ns, out.chunk_tokens = [3_000_000, 6_000_000, 9_000_000], [1, 1, 1]
    out.usage_prompt, out.usage_completion = 18, 5
    row = _row(st, spec, out, 9_500_000, cfg.points[0], 0)
    assert row["output_tokens"] == 5 and row["chunk_output_tokens"] == 3
    assert row["output_token_discrepancy"] == 2 and row["input_token_discrepancy"] == 2
    assert row["ttft_ms"] == pytest.approx(2.0) and row["e2e_ms"] == pytest.approx(8.0)
    assert row["decode_ms_per_token"] == pytest.approx(6.0 / 4)
    assert row["token_gaps_ms"] == [3.0, 3.0]


@pytest.mark.parametrize("conc, n", [(17, 340), (3, 60)])
def test_workers_that_do_not_divide_the_concurrency_keep_it_for_the_whole_window(conc, n):
    # c=17 over 2 workers is 9 and 8 streams: 170 requests each left the 8-stream worker sending
    # alone at the end (0.93 c measured; c=3: 2 and 1 streams, the lone one ran twice as long, 0.68 c).
    # Requests of ~96 ms (16 tokens at 6 ms), so the client's own gaps between them stay small even
    # beside busy processes: at ~32 ms a 2-core machine running the suite's other worker measured
    # 0.935-0.945 c (the bound sat between the fix and the bug); at 64 ms beside three CPU hogs
    # 0.963-0.968 c (2026-12-07).
    with ServerProcess(PerfModel(decode_base_ms=6.0, decode_ms_per_seq=0.0, prefill_ms_per_token=0.001)) as slow:
        res = run_sweep(_cfg(slow.url, mix=tuple(parse_mix("16/16")), points=(LoadPoint("closed_loop", conc),),
                             requests_per_point=n, workers=2, warmup=0))
    by_worker = [sum(1 for r in res.rows if r["worker"] == w) for w in (0, 1)]
    assert by_worker == [n * (conc // 2 + 1) // conc, n * (conc // 2) // conc]  # in proportion to the streams
    s = next(x for x in res.summaries if x["bucket"] == "all")
    assert s["achieved_concurrency"] >= 0.95 * conc, s["achieved_concurrency"]  # 0.98 c measured


def test_requests_and_dataset_entries_are_dealt_in_proportion_to_unequal_shares():
    from benchrun.loadgen.workload import dealt_index, split_by, split_evenly

    assert split_by(340, [9, 8]) == [180, 160] and split_by(5, [9, 8]) == [3, 2] and split_by(7, [1, 1, 1]) == split_evenly(7, 3)
    for shares in ([180, 160], [3, 1, 2], [5, 5], [0, 4]):
        got = sorted(dealt_index(shares, w, k) for w, s in enumerate(shares) for k in range(s))
        assert got == list(range(sum(shares)))
    assert [dealt_index([3, 3], 1, k) for k in range(3)] == [1, 3, 5]  # equal shares: the stride
