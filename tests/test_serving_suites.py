"""The serving_sweep and serving_workflow suites against the self-started reference server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from benchrun.errors import BenchrunError
from benchrun.suites import serving_sweep, serving_workflow
from benchrun.suites._runtime import SuiteContext
from benchrun.suites.result import PERCENTILE_SUFFIXES, SERVING_DISTRIBUTIONS, SERVING_SCALARS, read_result

MIX = [{"inputTokens": 64, "outputTokens": 16, "weight": 0.7}, {"inputTokens": 128, "outputTokens": 32, "weight": 0.3}]


def _workload(**extra):
    wl = {"model": "openai/gpt-oss-20b", "sequenceLengthMix": MIX, "precision": "bf16", "batchingPolicy": "continuous", "concurrencyModel": "closed_loop", "slo": None, "pricing": None}
    wl.update(extra)
    return wl


def _env(run_dir: Path, suite: str, params: dict, workload: dict) -> dict[str, str]:
    return {
        "BENCHRUN_RUN_ID": "r1",
        "BENCHRUN_RUN_DIR": str(run_dir),
        "BENCHRUN_SUITE": suite,
        "BENCHRUN_REPLICATE": "1",
        "BENCHRUN_CASE_ID": "case-1",
        "BENCHRUN_PARAMS": json.dumps(params),
        "BENCHRUN_WORKLOAD": json.dumps(workload),
    }


def _run_inline(module, run_dir, suite, params, workload):
    ctx = SuiteContext(_env(run_dir, suite, params, workload))
    module.run(ctx)
    return read_result(ctx.finish("ok"))


@pytest.mark.slow
def test_serving_sweep_as_a_real_subprocess_with_slo_and_price(tmp_path):
    env = {**os.environ, **_env(tmp_path, "serving_sweep", {"concurrency": [1, 4], "requests_per_point": 24, "warmup": 2}, _workload(slo={"ttft_ms": 500, "decode_ms_per_token": 50}, pricing={"pricePerNodeHourUsd": 98.32, "nodes": 2}))}
    p = subprocess.run([sys.executable, "-m", "benchrun.suites.serving_sweep"], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    doc = read_result(tmp_path / "structured" / "r1_serving_sweep_r1.json")
    assert doc["status"] == "ok" and doc["synthetic"] is True
    assert doc["context"]["reference_server"]["synthetic"] is True
    rows = doc["serving"]
    assert [(r["point"], r["bucket"]) for r in rows] == [(p, b) for p in ("c=1", "c=4") for b in ("all", "64/16", "128/32")]
    for r in rows:
        for k in SERVING_SCALARS:
            assert k in r, k
        for base in SERVING_DISTRIBUTIONS:
            for suf in PERCENTILE_SUFFIXES:
                assert f"{base}_{suf}" in r
        assert r["verdict"] in ("valid", "invalid") and isinstance(r["verdict_reasons"], list)
        assert r["synthetic"] is True
    alls = [r for r in rows if r["bucket"] == "all"]
    assert all(r["n_requests"] == 24 and r["n_errors"] == 0 for r in alls)
    # 24 samples cannot bound a p99 at 95 % (368 needed, the comparison's own rule): the verdict says so
    assert all(any("368 needed for a bounded p99 at 95%" in x for x in r["verdict_reasons"]) for r in alls)
    names = {(m["name"], m["case"]) for m in doc["metrics"]}
    for name in ("ttft_ms", "p50_latency_ms", "p99_latency_ms", "tokens_per_second", "jitter_ms", "request_goodput", "slo_attainment", "cost_per_request_usd", "cost_per_token_usd", "decode_ms_per_token"):
        assert (name, "c=1") in names and (name, "c=4") in names, name
    # generous SLO, but 24 requests a point support no p99 (368 needed): no point counts, the
    # metric is absent and the context says what a point needs
    from benchrun.loadgen.metrics import SLO, point_passes_slo

    assert not any(point_passes_slo(r, SLO(ttft_ms=500, decode_ms_per_token=50)) for r in alls)
    assert not any(m["name"] == "capacity_at_slo" for m in doc["metrics"])
    note = doc["context"]["capacity_at_slo"]
    assert note.startswith("absent: no point") and "a point needs 368 completed requests for a supported p99" in note
    table = pq.read_table(tmp_path / doc["samples"]["requests"])
    for col in ("request_id", "trace_id", "point", "bucket", "send_ts", "ttft_ms", "e2e_ms", "input_tokens", "output_tokens", "decode_ms_per_token", "error", "worker", "usage_output_tokens", "chunk_output_tokens"):
        assert col in table.column_names
    assert table.num_rows == 48 and set(table.column("run_id").to_pylist()) == {"r1"}
    figs = doc["context"]["figures"]
    assert sorted(Path(f).name for f in figs) == sorted(f"r1_serving_sweep_r1_latency_throughput_{b}.png" for b in ("all", "64-16", "128-32"))
    assert all((tmp_path / f).stat().st_size > 1000 for f in figs)


def test_serving_workflow_without_slo_or_price_has_no_goodput_or_cost(tmp_path):
    doc = _run_inline(serving_workflow, tmp_path, "serving_workflow", {"concurrency": 4, "requests": 32, "warmup": 2}, _workload())
    names = {m["name"] for m in doc["metrics"]}
    assert {"ttft_ms", "p99_latency_ms", "tokens_per_second", "jitter_ms"} <= names
    assert not names & {"request_goodput", "slo_attainment", "cost_per_request_usd", "cost_per_token_usd", "capacity_at_slo"}
    allrow = next(r for r in doc["serving"] if r["bucket"] == "all")
    assert allrow["point"] == "c=4" and allrow["n_requests"] == 32
    for k in ("request_goodput", "slo_attainment", "cost_per_request_usd", "cost_per_token_usd"):
        assert allrow[k] is None


def test_serving_sweep_open_loop_from_the_workload(tmp_path):
    doc = _run_inline(serving_sweep, tmp_path, "serving_sweep", {"rates": [20, 40], "requests_per_point": 12, "warmup": 0, "arrival": "constant"}, _workload(concurrencyModel="open_loop"))
    alls = [r for r in doc["serving"] if r["bucket"] == "all"]
    assert [r["point"] for r in alls] == ["rate=20", "rate=40"]
    assert all(r["load_model"] == "open_loop" and r["n_requests"] == 12 for r in alls)


def test_serving_sweep_rejects_load_points_that_contradict_the_workload(tmp_path):
    with pytest.raises(BenchrunError, match="only 'rates' was given"):
        _run_inline(serving_sweep, tmp_path, "serving_sweep", {"rates": [2]}, _workload())


def test_unreachable_endpoint_fails_the_suite_with_one_clear_reason(tmp_path):
    env = {**os.environ, **_env(tmp_path, "serving_sweep", {"endpoint": "http://127.0.0.1:1", "concurrency": [1], "requests_per_point": 2}, _workload())}
    p = subprocess.run([sys.executable, "-m", "benchrun.suites.serving_sweep"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    doc = read_result(tmp_path / "structured" / "r1_serving_sweep_r1.json")
    assert doc["status"] == "failed" and "cannot reach http://127.0.0.1:1" in doc["reason"] and "connection refused" in doc["reason"]


@pytest.mark.parametrize("module, suite", [(serving_sweep, "serving_sweep"), (serving_workflow, "serving_workflow")])
def test_a_misspelt_parameter_is_refused_not_ignored(tmp_path, module, suite):
    # "concurency" would otherwise run the default load and look like a valid result
    with pytest.raises(ValueError, match=f"parameter concurency is not a parameter of suite {suite}"):
        _run_inline(module, tmp_path, suite, {"concurency": [8]}, _workload())


def test_a_refserver_override_that_is_not_a_mapping_is_a_clear_error(tmp_path):
    with pytest.raises(BenchrunError, match="parameter refserver"):
        _run_inline(serving_sweep, tmp_path, "serving_sweep", {"refserver": [1, 2]}, _workload())


@pytest.mark.parametrize(
    "module, suite, params, named",
    [
        (serving_sweep, "serving_sweep", {"concurrency": [1, 2.5]}, "concurrency"),  # was truncated to c=2
        (serving_sweep, "serving_sweep", {"warmup": 1.5}, "warmup"),
        (serving_workflow, "serving_workflow", {"concurrency": 2.5}, "concurrency"),
        (serving_workflow, "serving_workflow", {"requests": 0}, "requests"),
        (serving_workflow, "serving_workflow", {"api": "embeddings"}, "api"),
    ],
)
def test_bad_numeric_parameters_are_refused_naming_them(tmp_path, module, suite, params, named):
    with pytest.raises(ValueError, match=f"parameter {named}"):
        _run_inline(module, tmp_path, suite, params, _workload())


def test_an_infinite_rate_is_refused(tmp_path):
    with pytest.raises(BenchrunError, match="positive, finite"):
        _run_inline(serving_sweep, tmp_path, "serving_sweep", {"rates": [float("inf")]}, _workload(concurrencyModel="open_loop"))


def test_serving_workflow_with_a_pinned_dataset_and_sessions(tmp_path):
    """Issue 29: the suite reads workload.dataset (checking the pinned sha256) and runs chat sessions."""
    import hashlib
    import shutil

    data = tmp_path / "conv.jsonl"
    shutil.copy(Path(__file__).resolve().parent.parent / "specs/datasets/benchrun-conversations.jsonl", data)
    sha = hashlib.sha256(data.read_bytes()).hexdigest()
    params = {"concurrency": 2, "requests": 8, "api": "chat", "session_turns": 2, "think_time_s": 0.002}
    doc = _run_inline(serving_workflow, tmp_path, "serving_workflow", params,
                      _workload(dataset={"path": str(data), "format": "sharegpt", "sha256": sha}))
    row = next(r for r in doc["serving"] if r["bucket"] == "all")
    assert row["n_requests"] == 8 and row["sessions"] == 4 and set(row["ttft_ms_p50_by_turn"]) == {"1", "2"}
    assert row["input_token_mismatches"] == 0 and row["prefix_cache_hit_rate"] > 0
    assert doc["context"]["loadgen"]["content"]["dataset"]["sha256"] == sha
    table = pq.read_table(tmp_path / doc["samples"]["requests"]).to_pylist()
    assert sorted(r["turn"] for r in table) == [1, 1, 1, 1, 2, 2, 2, 2] and all(r["dataset_index"] is not None for r in table)
    data.write_text(data.read_text().replace("GPU", "CPU"))
    with pytest.raises(BenchrunError, match="differs from the pinned"):
        _run_inline(serving_workflow, tmp_path / "again", "serving_workflow", params,
                    _workload(dataset={"path": str(data), "format": "sharegpt", "sha256": sha}))
    from benchrun.suites._common import ParamError

    with pytest.raises(ParamError, match="session_turns=0 must be an integer"):
        _run_inline(serving_workflow, tmp_path / "bad", "serving_workflow", {**params, "session_turns": 0}, _workload())


def test_server_metrics_of_the_self_started_server_reach_telemetry_slice_fact(tmp_path):
    from types import SimpleNamespace

    from benchrun.telemetry.facts import slice_tables
    from benchrun.warehouse.schemas import TABLES

    doc = _run_inline(serving_workflow, tmp_path, "serving_workflow",
                      {"concurrency": 4, "requests": 200, "warmup": 2, "server_metrics": True, "server_metrics_interval_s": 0.02}, _workload())
    allrow = next(r for r in doc["serving"] if r["bucket"] == "all")
    assert allrow["server_metrics"]["scrapes"] >= 2 and allrow["server_metrics"]["server_names"]["requests_running"] == "vllm:num_requests_running"
    rel = doc["samples"]["server_metrics"]
    assert rel == "raw/r1_serving_workflow_r1_servermetrics.parquet"
    src = SimpleNamespace(run_dir=tmp_path, run_id="r1", launch_for=lambda s, r: {}, lineage=lambda p: {})
    [t] = list(slice_tables(src, TABLES["telemetry_slice_fact"]))
    assert set(t.column("point").to_pylist()) == {"c=4"} and "requests_running" in set(t.column("metric").to_pylist())
    assert set(t.column("suite").to_pylist()) == {"serving_workflow"}


def test_serving_sweep_replays_a_trace_and_runs_stages(tmp_path):
    tr = tmp_path / "t.jsonl"
    tr.write_text("".join(json.dumps({"timestamp": 20 * i, "input_length": 8 + i, "output_length": 3}) + "\n" for i in range(12)))
    doc = _run_inline(serving_sweep, tmp_path / "a", "serving_sweep", {"trace": str(tr), "speedup": 2}, _workload(concurrencyModel="open_loop"))
    [allrow] = [r for r in doc["serving"] if r["bucket"] == "all"]
    assert allrow["point"] == "trace x2" and allrow["n_requests"] == 12 and doc["context"]["trace"]["requests"] == 12
    doc = _run_inline(serving_sweep, tmp_path / "b", "serving_sweep", {"stages": "ramp:10:30:3", "burstiness": 0.5, "requests_per_point": 6, "warmup": 0},
                      _workload(concurrencyModel="open_loop"))
    assert [r["point"] for r in doc["serving"] if r["bucket"] == "all"] == [f"rate={r},burstiness=0.5" for r in (10, 20, 30)]
