"""Arrival shapes, load stages, trace replay, the server's own metrics and worker saturation, checked against the reference server's own log.

Tolerances on this shared 2-core machine: every send reaches the server after its scheduled
time (arrival - scheduled >= 0), and the median of |server inter-arrival gap - scheduled gap|
is within 3 ms (the server stamps arrivals with the kernel's receive time, so its log is the
ground truth of when each request was sent).
"""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from benchrun.errors import BenchrunError
from benchrun.loadgen.client import Endpoint, get_json
from benchrun.loadgen.config import LoadPoint, SweepConfig
from benchrun.loadgen.metrics import SLO, VerdictPolicy
from benchrun.loadgen.refserver import PerfModel, ServerProcess
from benchrun.loadgen.runner import run_sweep, summarize_point
from benchrun.loadgen.schedule import _arrivals, parse_stages
from benchrun.loadgen import servermetrics, trace
from benchrun.loadgen.workload import parse_mix

FAST = PerfModel(decode_base_ms=0.3, decode_ms_per_seq=0.01, prefill_ms_per_token=0.001)
GAP_TOLERANCE_MS = 3.0


@pytest.fixture(scope="module")
def server():
    with ServerProcess(FAST) as sp:
        yield sp


def _truth(url: str) -> dict[str, dict]:
    doc = asyncio.run(get_json(Endpoint.from_url(url), "/debug/requests"))
    return {r["request_id"]: r for r in doc["requests"]}


def _cfg(url, **kw):
    base = dict(url=url, model="m", mix=tuple(parse_mix("16/4")), points=(LoadPoint("closed_loop", 1),), requests_per_point=12, warmup=0, seed=1)
    base.update(kw)
    return SweepConfig(**base)


def _check_sends_against_server(rows, truth):
    """Every row reached the server; arrivals follow the schedule (see module docstring)."""
    got = [truth[r["request_id"]] for r in rows]
    assert all(g["arrival_ns"] >= r["scheduled_mono_ns"] for g, r in zip(got, rows))
    order = sorted(zip(rows, got), key=lambda x: x[0]["scheduled_mono_ns"])
    sched = np.diff([r["scheduled_mono_ns"] for r, _ in order]) / 1e6
    arr = np.diff([g["arrival_ns"] for _, g in order]) / 1e6
    assert float(np.median(np.abs(arr - sched))) <= GAP_TOLERANCE_MS
    return got


# --- gamma arrivals --------------------------------------------------------------------------


def test_gamma_burstiness_sets_the_gaps_spread_and_one_is_poisson():
    rng = lambda: np.random.default_rng(7)  # noqa: E731
    pois = _arrivals(LoadPoint("open_loop", 10.0), 10.0, 4001, None, rng(), 0.0)
    g1 = _arrivals(LoadPoint("open_loop", 10.0, "gamma", 1.0), 10.0, 4001, None, rng(), 0.0)
    burst = _arrivals(LoadPoint("open_loop", 10.0, "gamma", 0.25), 10.0, 4001, None, rng(), 0.0)
    regular = _arrivals(LoadPoint("open_loop", 10.0, "gamma", 4.0), 10.0, 4001, None, rng(), 0.0)
    cv = lambda offs: float(np.std(np.diff(offs)) / np.mean(np.diff(offs)))  # noqa: E731
    assert cv(pois) == pytest.approx(1.0, rel=0.1) and cv(g1) == pytest.approx(cv(pois), rel=0.1)
    assert cv(burst) == pytest.approx(2.0, rel=0.15)  # CV = 1/sqrt(burstiness)
    assert cv(regular) == pytest.approx(0.5, rel=0.15)
    for offs in (pois, burst, regular):  # count-ended: the schedule spans (n-1)/rate exactly
        assert offs[-1] == pytest.approx(400.0, rel=1e-9)
    with pytest.raises(ValueError, match="needs gamma"):
        LoadPoint("open_loop", 1.0, "poisson", 0.5)
    assert LoadPoint("open_loop", 4.0, "gamma", 0.5).label == "rate=4,burstiness=0.5"


def test_gamma_sends_reach_the_server_on_schedule(server):
    res = run_sweep(_cfg(server.url, points=(LoadPoint("open_loop", 60.0, "gamma", 0.3),), requests_per_point=40))
    assert len(res.rows) == 40 and not any(r["error"] for r in res.rows)
    _check_sends_against_server(res.rows, _truth(server.url))
    s = res.summaries[0]
    assert s["scheduled_rate_rps"] == pytest.approx(60.0, rel=1e-6) and s["point"] == "rate=60,burstiness=0.3"


def test_several_workers_send_one_schedule_at_the_offered_rate():
    # each worker drew its own schedule at rate/workers from 0, rescaled to end at the same
    # instant: 8 workers sent 8 requests at t = 0 and 8 at the last instant together
    from benchrun.loadgen.schedule import dealt_arrivals
    from benchrun.loadgen.workload import split_evenly

    for point in (LoadPoint("open_loop", 20.0), LoadPoint("open_loop", 20.0, "gamma", 0.25)):
        shares = [dealt_arrivals(point, 400, None, 0, 0, w, 8, 1) for w in range(8)]
        assert [len(x) for x in shares] == split_evenly(400, 8)
        t = np.sort(np.concatenate(shares))
        assert int(np.sum(t == 0.0)) == 1 and int(np.sum(np.isclose(t, t[-1]))) == 1
        assert t[-1] == pytest.approx(399 / 20.0)
        cv = float(np.std(np.diff(t)) / np.mean(np.diff(t)))
        assert cv == pytest.approx(1.0 if point.arrival == "poisson" else 2.0, rel=0.2)  # the stated process
        timed = [dealt_arrivals(point, None, 5.0, 0, 0, w, 3, 1) for w in range(3)]
        assert all(max(x) < 5.0 for x in timed) and len(set(np.concatenate(timed))) == sum(map(len, timed))


def test_several_workers_interleave_one_poisson_schedule_on_the_server(server):
    res = run_sweep(_cfg(server.url, points=(LoadPoint("open_loop", 80.0),), requests_per_point=48, workers=3))
    assert len(res.rows) == 48 and not any(r["error"] for r in res.rows)
    assert {r["worker"] for r in res.rows} == {0, 1, 2}
    sched = sorted(r["scheduled_mono_ns"] for r in res.rows)
    assert len(set(sched)) == 48  # no two workers at the same instant
    assert (sched[-1] - sched[0]) / 1e9 == pytest.approx(47 / 80.0, rel=1e-6)  # one schedule, at the offered rate
    _check_sends_against_server(res.rows, _truth(server.url))


# --- load stages -----------------------------------------------------------------------------


def test_stage_forms():
    pts, sat = parse_stages("ramp:2:10:5", "open_loop")
    assert [p.offered_load for p in pts] == [2, 4, 6, 8, 10] and not sat
    pts, sat = parse_stages("saturate:1:2:16", "closed_loop")
    assert [p.offered_load for p in pts] == [1, 2, 4, 8, 16] and sat
    pts, _ = parse_stages("1,8,32", "closed_loop")
    assert [p.label for p in pts] == ["c=1", "c=8", "c=32"]
    pts, _ = parse_stages("ramp:1:4:3", "open_loop", arrival="gamma", burstiness=0.5)
    assert all(p.arrival == "gamma" and p.burstiness == 0.5 for p in pts)
    for bad, msg in (("ramp:4:1:3", "START < END"), ("saturate:1:1:8", "FACTOR > 1"), ("steps:1:2:3", "unknown stage form"),
                     ("1.5,2", "whole numbers"), ("ramp:1:2", "three numbers")):
        with pytest.raises(ValueError, match=msg):
            parse_stages(bad, "closed_loop")


def test_sweep_to_saturation_stops_when_goodput_falls():
    # two sequences at a time, 40 tokens at ~2 ms each: from c=4 on, half the requests wait a whole
    # request (~80 ms) for a slot, so their TTFT misses 30 ms and goodput falls
    slow = PerfModel(decode_base_ms=2.0, decode_ms_per_seq=0.0, prefill_ms_per_token=0.0, max_batch=2)
    with ServerProcess(slow) as sp:
        pts, sat = parse_stages("saturate:1:2:16", "closed_loop")
        cfg = SweepConfig(url=sp.url, model="m", mix=tuple(parse_mix("8/40")), points=tuple(pts), requests_per_point=8, warmup=0,
                          slo=SLO(ttft_ms=30.0), stop_when_goodput_falls=sat)
        res = run_sweep(cfg)
        truth = _truth(sp.url)
    ran = [s["point"] for s in res.summaries if s["bucket"] == "all"]
    assert ran[:2] == ["c=1", "c=2"] and "c=16" not in ran
    stop = res.context["stages"]
    assert stop["stopped_after"] == ran[-1] and "fell more than 10%" in stop["reason"]
    assert stop["points_not_run"] == [p.label for p in pts[len(ran):]]
    # the server saw exactly the stages that ran, 8 requests each (besides the one dialect probe before them)
    nonce = res.rows[0]["request_id"].split("-")[0]
    sent = {k for k in truth if k.startswith(nonce + "-")}
    assert len(sent) == 8 * len(ran) and {r["request_id"] for r in res.rows} == sent and len(truth) == len(sent) + 1


# --- trace replay ----------------------------------------------------------------------------


def _mooncake(path, n=30, seed=3):
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(25.0, size=n)).round()  # ms
    lines = []
    for i, ts in enumerate(t):
        ids = [100, 101] if i % 3 == 0 else [200 + i]
        lines.append(json.dumps({"timestamp": int(ts), "input_length": int(rng.integers(8, 40)), "output_length": int(rng.integers(2, 6)), "hash_ids": ids}))
    path.write_text("\n".join(lines) + "\n")
    return t - t[0]


def test_trace_formats_and_bad_input(tmp_path):
    t = _mooncake(tmp_path / "m.jsonl")
    es = trace.load_trace(tmp_path / "m.jsonl")
    assert len(es) == 30 and [round(e.t_s * 1000) for e in es] == [int(x) for x in t]
    assert es[0].prefix_ids == (100, 101)
    az = tmp_path / "azure.csv"
    az.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
                  "2023-11-16 18:15:46.1000000,1200,3\n2023-11-16 18:15:47.0000000,90,12\n")
    es = trace.load_trace(az)
    assert [(round(e.t_s, 4), e.input_tokens, e.output_tokens) for e in es] == [(0.0, 1200, 3), (0.5806, 374, 44), (0.9, 90, 12)]
    plain = tmp_path / "plain.csv"
    plain.write_text("timestamp_s,input_tokens,output_tokens,session_id\n1.5,10,2,a\n2.0,12,3,a\n")
    es = trace.load_trace(plain)
    assert es[1].t_s == pytest.approx(0.5) and es[1].session_id == "a"
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,10,0\n")
    with pytest.raises(BenchrunError, match=r"bad.csv:2: GeneratedTokens 0 must be >= 1"):
        trace.load_trace(bad)
    (tmp_path / "x.jsonl").write_text('{"timestamp": 1, "input_length": 5}\n{"nope": 1}\n')
    with pytest.raises(BenchrunError, match=r"x.jsonl:1: output_length None is not a number"):
        trace.load_trace(tmp_path / "x.jsonl")
    (tmp_path / "h.csv").write_text("a,b\n1,2\n")
    with pytest.raises(BenchrunError, match="neither Azure's"):
        trace.load_trace(tmp_path / "h.csv")
    # not UTF-8 (UnicodeDecodeError naming no file), by format and in the auto-detected first line
    (tmp_path / "l.jsonl").write_bytes(b'{"timestamp_s": 0, "input_tokens": 8, "output_tokens": 4}\n{"session_id": "caf\xe9"}\n')
    with pytest.raises(trace.TraceError, match=r"l.jsonl:2: not UTF-8 text \(byte 0xe9 at column 20\); .* convert it"):
        trace.load_trace(tmp_path / "l.jsonl")
    (tmp_path / "l.csv").write_bytes(b"\xfftimestamp_s,input_tokens,output_tokens\n0,8,4\n")
    for fmt in ("auto", "csv"):
        with pytest.raises(trace.TraceError, match=r"l.csv:1: not UTF-8 text \(byte 0xff at column 1\)"):
            trace.load_trace(tmp_path / "l.csv", fmt)
    # an absurd length (3e9 tokens ended in MemoryError building its prompt), prompt or reply
    big = trace.MAX_TRACE_TOKENS + 1
    (tmp_path / "big.csv").write_text(f"timestamp_s,input_tokens,output_tokens\n0,8,4\n1,8,{big}\n")
    with pytest.raises(trace.TraceError, match=rf"big.csv:3: output_tokens {big} is above 2,000,000 tokens.*fix the row or drop it"):
        trace.load_trace(tmp_path / "big.csv")
    (tmp_path / "ok.csv").write_text(f"timestamp_s,input_tokens,output_tokens\n0,{big - 1},4\n")
    assert trace.load_trace(tmp_path / "ok.csv")[0].input_tokens == trace.MAX_TRACE_TOKENS


@pytest.mark.parametrize("workers", [1, 2])
def test_trace_replays_at_its_own_times_and_lengths(server, tmp_path, workers):
    t = _mooncake(tmp_path / "m.jsonl")
    es = trace.load_trace(tmp_path / "m.jsonl")
    pt = trace.trace_point(es, speedup=2.0)
    res = run_sweep(_cfg(server.url, points=(pt,), requests_per_point=None, warmup=None, trace=es, workers=workers))
    rows = sorted(res.rows, key=lambda r: r["trace_index"])
    assert [r["trace_index"] for r in rows] == list(range(30)) and not any(r["error"] for r in rows)
    truth = _truth(server.url)
    got = _check_sends_against_server(rows, truth)
    # scheduled at the trace's times / speedup, from one go time shared by the workers
    sched = np.array([r["scheduled_mono_ns"] for r in rows]) - rows[0]["scheduled_mono_ns"]
    assert np.allclose(sched / 1e6, t / 2.0, atol=0.01)
    # what the server received: each request's lengths from the trace, prefix blocks shared
    for r, g, e in zip(rows, got, es):
        assert (g["prompt_tokens"], g["completion_tokens"]) == (e.input_tokens, e.output_tokens)
        assert r["schedule_lag_ms"] >= 0 and r["trace_prefix_ids"] == ",".join(map(str, e.prefix_ids))
    s = res.summaries[0]
    assert s["point"] == "trace x2" and s["load_model"] == "trace"
    assert {r["worker"] for r in rows} == set(range(workers))
    # review 2026-12-07: a replay sends none of the mix, yet each mix pair had a 0-request `invalid` row
    # (into the warehouse through the suite); its one bucket is the trace's, with every request
    assert [(x["bucket"], x["n_requests"]) for x in res.summaries] == [("all", 30), ("trace", 30)]
    assert res.summaries[1]["verdict_reasons"] == res.summaries[0]["verdict_reasons"]  # 30 requests: too few for a p99


def test_trace_prompts_share_their_prefix_blocks():
    rng = np.random.default_rng(0)
    a = trace.trace_prompt(trace.TraceEntry(0, 600, 1, None, (5, 6)), rng).split()
    b = trace.trace_prompt(trace.TraceEntry(0, 700, 1, None, (5, 7)), rng).split()
    c = trace.trace_prompt(trace.TraceEntry(0, 50, 1, None, ()), rng).split()
    assert len(a) == 600 and len(b) == 700 and len(c) == 50
    assert a[:512] == b[:512] and a[512:600] != b[512:600]


def test_trace_falling_behind_makes_the_point_invalid():
    rows = [{"send_mono_ns": i * 10_000_000 + 150_000_000 * (i == 5), "scheduled_mono_ns": i * 10_000_000, "end_mono_ns": i * 10_000_000 + 5,
             "schedule_lag_ms": 150.0 * (i == 5), "error": None, "ttft_ms": 1.0, "e2e_ms": 2.0, "decode_ms_per_token": 0.1,
             "output_tokens": 2, "input_tokens": 4, "bucket": "trace", "token_gaps_ms": [1.0]} for i in range(500)]
    pt = LoadPoint("trace", 100.0)
    cfg = SweepConfig(url="http://127.0.0.1:1", model="m", mix=(), points=(pt,), policy=VerdictPolicy())
    s = summarize_point(rows, pt, [{"cpu_frac": 0.1, "loop_lag_ms": [0.1]}], cfg)[0]
    assert s["verdict"] == "invalid" and any("fell behind the trace" in r for r in s["verdict_reasons"])


# --- worker saturation -----------------------------------------------------------------------


def test_one_saturated_worker_makes_the_point_invalid():
    rows = [{"send_mono_ns": i * 1_000_000, "scheduled_mono_ns": i * 1_000_000, "end_mono_ns": i * 1_000_000 + 900_000, "schedule_lag_ms": 0.0,
             "error": None, "ttft_ms": 1.0, "e2e_ms": 2.0, "decode_ms_per_token": 0.1, "output_tokens": 2, "input_tokens": 4, "bucket": "16/4",
             "token_gaps_ms": [1.0]} for i in range(500)]
    pt = LoadPoint("closed_loop", 1)
    cfg = _cfg("http://127.0.0.1:1", points=(pt,))
    calm = {"cpu_frac": 0.2, "loop_lag_ms": [0.1] * 1000}
    ok = summarize_point(rows, pt, [calm, calm], cfg)[0]
    assert ok["verdict"] == "valid", ok["verdict_reasons"]
    hot_cpu = summarize_point(rows, pt, [calm, {"cpu_frac": 0.97, "loop_lag_ms": [0.1]}], cfg)[0]
    assert any("client saturated" in r for r in hot_cpu["verdict_reasons"])
    # one worker's lagging loop counts even when the merged samples would hide it (3 % of them)
    lagging = summarize_point(rows, pt, [calm, calm, calm, {"cpu_frac": 0.3, "loop_lag_ms": [0.1] * 90 + [40.0] * 10}], cfg)[0]
    assert any("event-loop lag" in r for r in lagging["verdict_reasons"])


# --- the server's own metrics ----------------------------------------------------------------

SGLANG_TEXT = """# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m"} 3.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m"} 7.0
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m"} 0.28
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="m"} 0.5
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{model_name="m"} 4.0
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 2.0
sglang:time_to_first_token_seconds_count{model_name="m"} 2.0
"""


def test_sglang_and_vllm_names_map_to_one_vocabulary():
    vals, names = servermetrics.mapped(servermetrics.parse(SGLANG_TEXT))
    assert vals == {"requests_running": 3.0, "requests_waiting": 7.0, "kv_cache_usage_ratio": 0.28, "prefix_cache_hit_ratio": 0.5, "preemptions_total": 4.0}
    assert names["requests_waiting"] == "sglang:num_queue_reqs"
    old_vllm = '# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{engine="0"} 0.25\nvllm:gpu_cache_usage_perc{engine="1"} 0.5\n'
    assert servermetrics.mapped(servermetrics.parse(old_vllm))[0] == {"kv_cache_usage_ratio": 0.75}  # summed over engines
    # a NaN or Inf sample (the exposition format allows them: a gauge with nothing to report) is no value;
    # it made the point's mean NaN, written into the result as the bare token NaN
    nan = ('# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{engine="0"} NaN\n'
           'vllm:gpu_cache_usage_perc{engine="1"} 0.5\n# TYPE vllm:num_requests_waiting gauge\n'
           'vllm:num_requests_waiting +Inf\n')
    assert servermetrics.mapped(servermetrics.parse(nan))[0] == {"kv_cache_usage_ratio": 0.5}


def test_server_metrics_are_scraped_during_each_point(server):
    cfg = _cfg(server.url, points=(LoadPoint("closed_loop", 4),), requests_per_point=None, duration_s=1.2, mix=tuple(parse_mix("64/60")),
               server_metrics_url=server.url + "/metrics", server_metrics_interval_s=0.1)
    res = run_sweep(cfg)
    sm = res.summaries[0]["server_metrics"]
    assert sm["scrapes"] >= 5 and sm["scrape_errors"] == 0
    assert sm["server_names"]["requests_running"] == "vllm:num_requests_running"
    assert 1 <= sm["requests_running_max"] <= 4 and sm["kv_cache_usage_ratio_max"] > 0
    # prompt tokens the server counted between the first and last scrape: 64 per request admitted then
    assert sm["prefix_cache_queries_increase"] > 0 and sm["prefix_cache_queries_increase"] % 64 == 0
    assert sm["preemptions_increase"] == 0 and sm["prefix_cache_hit_ratio_point"] == 0.0
    rows = res.server_samples
    assert {r["point"] for r in rows} == {"c=4"} and {r["source"] for r in rows} == {"server:vllm"}
    lo, hi = min(r["send_ts"] for r in res.rows), max(r["send_ts"] for r in res.rows) + 1.0
    assert all(lo - 0.05 <= r["ts"] <= hi for r in rows)


def test_server_metrics_reach_telemetry_slice_fact(tmp_path):
    from types import SimpleNamespace

    from benchrun.telemetry.facts import slice_tables
    from benchrun.warehouse.schemas import TABLES

    run_id = "r-20261202000000-abcdef12"
    (tmp_path / "raw").mkdir()
    scrapes = [{"mono_ns": 1, "wall_s": 1.8e9, "values": {"requests_running": 2.0, "preemptions_total": 1.0}, "names": {"requests_running": "vllm:num_requests_running"}}]
    servermetrics.write_samples(tmp_path / "raw" / f"{run_id}_serving_sweep_r0_servermetrics.parquet", servermetrics.sample_rows(scrapes, "c=4", 1.0), {})
    src = SimpleNamespace(run_dir=tmp_path, run_id=run_id, launch_for=lambda s, r: {"benchmark_case_id": "case1"}, lineage=lambda rel: {})
    [t] = list(slice_tables(src, TABLES["telemetry_slice_fact"]))
    rows = sorted(t.to_pylist(), key=lambda r: r["metric"])
    assert [(r["metric"], r["value"], r["point"], r["suite"], r["replicate"], r["benchmark_case_id"]) for r in rows] == [
        ("preemptions_total", 1.0, "c=4", "serving_sweep", 0, "case1"), ("requests_running", 2.0, "c=4", "serving_sweep", 0, "case1")]


# --- the command line ------------------------------------------------------------------------


def _cli(args, monkeypatch, capsys):
    from helpers import cli_in_process

    return cli_in_process(args, monkeypatch, capsys)


def test_cli_trace_replay_with_server_metrics(server, tmp_path, monkeypatch, capsys):
    import pyarrow.parquet as pq

    az = tmp_path / "azure.csv"
    az.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"2023-11-16 18:15:{46 + i // 10:02d}.{i % 10}000000,{10 + i},{2 + i % 3}\n" for i in range(20)))
    code, out, err = _cli(["loadgen", "--url", server.url, "--model", "m", "--trace", str(az), "--speedup", "4",
                           "--server-metrics", server.url + "/metrics", "--server-metrics-interval", "0.05",
                           "--out", str(tmp_path / "o"), "--json", "--allow-invalid"], monkeypatch, capsys)
    assert code == 0, err
    doc = json.loads(out)
    [pt] = [s for s in doc["points"] if s["bucket"] == "all"]
    assert pt["point"] == "trace x4" and pt["n_requests"] == 20 and pt["scheduled_rate_rps"] == pytest.approx(19 / 1.9 * 4, rel=1e-6)  # 20 requests over 1.9 s, 4x
    assert doc["context"]["trace"]["requests"] == 20 and pt["server_metrics"]["scrapes"] >= 3
    t = pq.read_table(tmp_path / "o" / doc["files"]["server_metrics"])
    assert set(t.column("point").to_pylist()) == {"trace x4"}
    req = pq.read_table(tmp_path / "o" / doc["files"]["requests"])
    assert sorted(req.column("trace_index").to_pylist()) == list(range(20))
    code, _, err = _cli(["loadgen", "--url", server.url, "--model", "m", "--trace", str(az), "--rate", "2", "--out", str(tmp_path / "o")],
                        monkeypatch, capsys)
    assert code != 0 and "leave out --concurrency and --rate" in err


# --- no cyclic GC while measuring ------------------------------------------------------------


def test_the_collector_is_off_while_measuring_and_forced_past_its_budget(server, monkeypatch):
    import gc

    from benchrun.loadgen import schedule

    seen = []
    orig = schedule._phase

    async def spy(*a, **k):
        seen.append(gc.isenabled())
        return await orig(*a, **k)

    monkeypatch.setattr("benchrun.loadgen.runner._phase", spy)
    res = run_sweep(_cfg(server.url, points=(LoadPoint("closed_loop", 2),), requests_per_point=8, warmup=2))
    assert seen == [True, False] and gc.isenabled()  # warm-up with it, the measured phase without
    assert res.context["points"][0]["gc_collections_while_measuring"] == 0

    async def probe_with_garbage():
        stop = asyncio.Event()
        forced = [0]
        gc.disable()
        try:
            task = asyncio.ensure_future(schedule._probe_loop([], stop, 0.001, gc_forced=forced))
            junk = [[] for _ in range(50)]  # tracked allocations past the (lowered) budget
            await asyncio.sleep(0.02)
            stop.set()
            await task
        finally:
            gc.enable()
        return forced[0], junk

    monkeypatch.setattr(schedule, "GC_BUDGET", 10)
    forced, _ = asyncio.run(probe_with_garbage())
    assert forced >= 1


def test_server_counters_cover_the_whole_window_not_only_inner_scrapes(server):
    # a window shorter than a few scrape intervals: scrapes inside it miss up to an interval at
    # each end; bounded by the scrapes around it, the server's prompt-token counter rose by
    # exactly the point's prompt tokens (the server is idle before and after; no warm-up)
    n = 16
    cfg = _cfg(server.url, points=(LoadPoint("closed_loop", 2),), requests_per_point=n, mix=tuple(parse_mix("64/40")),
               server_metrics_url=server.url + "/metrics", server_metrics_interval_s=0.15)
    res = run_sweep(cfg)
    assert [r["error"] for r in res.rows] == [None] * n
    sm = res.summaries[0]["server_metrics"]
    assert sm["prefix_cache_queries_increase"] == 64 * n
    cover = sm["counters_cover"]
    assert cover["start"].startswith("scrape at/before") and cover["end"].startswith("scrape at/after") and "note" not in cover
    assert cover["span_s"] >= cover["window_s"] == pytest.approx(res.summaries[0]["window_s"])


def test_server_counters_say_when_only_inner_scrapes_bound_them():
    def scrape(t_s, v):
        return {"mono_ns": int(t_s * 1e9), "wall_s": t_s, "values": {"prefix_cache_queries_total": v, "requests_running": 1.0}}

    # the counter rises only inside the window [1.0, 3.0] s: 200 tokens in all
    scrapes = [scrape(0.5, 0.0), scrape(1.5, 50.0), scrape(2.5, 150.0), scrape(3.5, 200.0)]
    a, b = int(1.0e9), int(3.0e9)
    inner = servermetrics.for_point(scrapes, a, b)
    before, after = servermetrics.bounds(scrapes, a, b)
    full = servermetrics.summarize(inner, 1.0, window=(a, b), before=before, after=after)
    assert full["prefix_cache_queries_increase"] == 200.0 and full["counters_cover"]["span_s"] == 3.0
    assert full["requests_running_mean"] == 1.0 and full["scrapes"] == 2  # gauges: inner scrapes only
    part = servermetrics.summarize(inner, 1.0, window=(a, b), before=None, after=after)
    assert part["prefix_cache_queries_increase"] == 150.0 and "not scaled" in part["counters_cover"]["note"]
    assert part["counters_cover"]["start"] == "first scrape inside the window"
    # a window between two scrapes: no inner scrape, the counters still come from the bounding pair
    assert servermetrics.summarize([], 1.0, before=scrapes[1], after=scrapes[2])["prefix_cache_queries_increase"] == 100.0


def test_a_scrape_answered_after_the_window_started_does_not_bound_its_start():
    # sent 10 ms before the first request, answered 5 ms after it: the server read its counters
    # with the first requests admitted (the clean-clone run under load: 896 of 1,024 tokens); the
    # scrape before it bounds the start instead
    def scrape(sent_s, done_s, v):
        return {"mono_ns": int(sent_s * 1e9), "done_ns": int(done_s * 1e9), "wall_s": sent_s,
                "values": {"prefix_cache_queries_total": v}}

    scrapes = [scrape(0.5, 0.502, 0.0), scrape(0.99, 1.005, 128.0), scrape(3.5, 3.51, 1024.0)]
    a, b = int(1.0e9), int(3.0e9)
    before, after = servermetrics.bounds(scrapes, a, b)
    assert before is scrapes[0] and after is scrapes[2]  # was: scrapes[1], the first 2 requests lost
    full = servermetrics.summarize(servermetrics.for_point(scrapes, a, b), 1.0, window=(a, b), before=before,
                                   after=after)
    assert full["prefix_cache_queries_increase"] == 1024.0
    older = [{k: v for k, v in x.items() if k != "done_ns"} for x in scrapes]  # recorded by their send time
    assert servermetrics.bounds(older, a, b)[0] is older[1]


def test_a_trace_or_dataset_saved_with_a_byte_order_mark_reads(tmp_path):
    """A spreadsheet's "CSV UTF-8" export starts with a byte-order mark: the header read
    '\\ufefftimestamp_s' and the trace was refused as an unknown header; a JSONL trace's first
    line as not JSON."""
    from benchrun.loadgen import dataset

    csv_trace = tmp_path / "bom.csv"
    csv_trace.write_bytes(b"\xef\xbb\xbftimestamp_s,input_tokens,output_tokens\n0.5,10,2\n1.0,12,3\n")
    assert [(e.t_s, e.input_tokens) for e in trace.load_trace(csv_trace)] == [(0.0, 10), (0.5, 12)]
    jsonl_trace = tmp_path / "bom.jsonl"
    jsonl_trace.write_bytes(b'\xef\xbb\xbf{"timestamp_s": 0, "input_tokens": 8, "output_tokens": 4}\n')
    assert [e.input_tokens for e in trace.load_trace(jsonl_trace)] == [8]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_bytes(b'\xef\xbb\xbf{"prompt": "hello there"}\n{"prompt": "again"}\n')
    ds = dataset.load_dataset(prompts)
    assert len(ds.entries) == 2


def test_a_trace_warmup_does_not_fill_the_prefix_cache_its_measured_requests_read(tmp_path):
    """Found in review: the warm-up replayed the trace's first entries with their hash_ids, so the first
    measured requests found their prefix blocks cached (cached_tokens 1023 of 1024, hit rate 0.33 where
    a cold server gives 0)."""
    from benchrun.loadgen.refserver import Dialect

    lines = [json.dumps({"timestamp": 20 * i, "input_length": 64, "output_length": 2, "hash_ids": [1000 + i]})
             for i in range(8)]  # every request its own prefix block: nothing is shared
    (tmp_path / "own.jsonl").write_text("\n".join(lines) + "\n")
    es = trace.load_trace(tmp_path / "own.jsonl")
    with ServerProcess(FAST, dialect=Dialect(prefix_cache_block=16)) as srv:
        res = run_sweep(_cfg(srv.url, points=(trace.trace_point(es, speedup=1.0),), requests_per_point=None,
                             warmup=4, trace=es))
    rows = sorted(res.rows, key=lambda r: r["trace_index"])
    assert len(rows) == 8 and not any(r["error"] for r in rows)
    assert [r["usage_cached_tokens"] or 0 for r in rows] == [0] * 8
