"""Reading ``vllm bench serve`` result JSON into the per-point serving shape.

The fixtures are written here from the format vLLM documents and writes in
``vllm/benchmarks/serve.py`` (``--save-result``, ``--save-detailed``, ``--append-result``;
field names: date, backend, model_id, num_prompts, request_rate ("inf" or a number),
burstiness, max_concurrency, duration, completed, failed, total_input_tokens,
total_output_tokens, request_throughput, request_goodput, output_throughput,
mean/median/std/p<P>_<ttft|tpot|itl|e2el>_ms, and per request input_lens, output_lens,
ttfts (s), itls (s), errors). They are not output captured from a real vLLM run: no GPU
or vLLM server is available here.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchrun.errors import BenchrunError
from benchrun.ingest import ingest_file
from benchrun.ingest.vllm_bench import points_from_file
from benchrun.suites.result import PERCENTILE_SUFFIXES, SERVING_DISTRIBUTIONS

SUMMARY = {
    "date": "20250101-120000",
    "backend": "vllm",
    "model_id": "openai/gpt-oss-20b",
    "tokenizer_id": "openai/gpt-oss-20b",
    "num_prompts": 100,
    "request_rate": "inf",
    "burstiness": 1.0,
    "max_concurrency": 8,
    "duration": 12.5,
    "completed": 98,
    "failed": 2,
    "total_input_tokens": 50176,
    "total_output_tokens": 12544,
    "request_throughput": 7.84,
    "request_goodput": None,
    "output_throughput": 1003.52,
    "total_token_throughput": 5017.6,
    "mean_ttft_ms": 41.2,
    "median_ttft_ms": 38.9,
    "std_ttft_ms": 9.1,
    "p99_ttft_ms": 77.7,
    "mean_tpot_ms": 7.4,
    "median_tpot_ms": 7.3,
    "std_tpot_ms": 0.6,
    "p99_tpot_ms": 9.2,
    "mean_itl_ms": 7.4,
    "median_itl_ms": 7.1,
    "std_itl_ms": 1.5,
    "p99_itl_ms": 12.0,
    "max_output_tokens_per_s": 1200.0,
    "max_concurrent_requests": 8,
}


def test_summary_only_result(tmp_path):
    f = tmp_path / "vllm.json"
    f.write_text(json.dumps(SUMMARY))
    [pt] = points_from_file(f)
    assert (pt["point"], pt["load_model"], pt["offered_load"], pt["bucket"]) == ("c=8", "closed_loop", 8.0, "all")
    assert (pt["n_requests"], pt["n_errors"], pt["window_s"]) == (98, 2, 12.5)
    assert pt["tokens_per_second"] == 1003.52 and pt["request_throughput_rps"] == 7.84
    assert pt["ttft_ms_p50"] == 38.9 and pt["ttft_ms_p99"] == 77.7 and pt["ttft_ms_mean"] == 41.2
    assert pt["decode_ms_per_token_p99"] == 9.2 and pt["chunk_gap_ms_p50"] == 7.1 and pt["token_gap_ms_p50"] is None
    assert pt["ttft_ms_p90"] is None and pt["e2e_ms_p50"] is None  # not saved: null, not invented
    assert pt["request_goodput"] is None and pt["slo_attainment"] is None
    assert pt["verdict"] is None and "not judged" in pt["verdict_reasons"][0]
    for base in SERVING_DISTRIBUTIONS:
        for suf in PERCENTILE_SUFFIXES:
            assert f"{base}_{suf}" in pt


def test_detailed_result_is_recomputed_with_our_definitions(tmp_path):
    ttfts = [0.010, 0.020, 0.030]
    itls = [[0.005, 0.007], [0.004, 0.004], [0.010, 0.002]]
    doc = dict(SUMMARY, request_rate=4.0, max_concurrency=None, completed=3, failed=1, num_prompts=4, duration=2.0,
               request_goodput=1.0, ttfts=ttfts + [0.0], itls=itls + [[]], output_lens=[3, 3, 3, 0], input_lens=[8, 8, 8, 8],
               errors=["", "", "", "timeout"], **{"p99.9_ttft_ms": 99.0})
    f = tmp_path / "d.json"
    f.write_text(json.dumps(doc))
    [pt] = points_from_file(f)
    assert (pt["point"], pt["load_model"], pt["offered_load"]) == ("rate=4", "open_loop", 4.0)
    assert pt["n_errors"] == 1
    # the failed request (no first token) ranks slower than every value, as the load generator
    # ranks it: Hazen positions (k + 1/2) / 4 of the 3 values among 4 requests, linear in between
    def hazen(values, n_failed, q):
        pos = [(k + 0.5) / (len(values) + n_failed) for k in range(len(values))]
        return float(np.interp(q, pos, sorted(values)))

    assert pt["ttft_ms_p50"] == pytest.approx(hazen([10.0, 20.0, 30.0], 1, 0.50)) == pytest.approx(25.0)
    e2e = [22.0, 28.0, 42.0]
    assert pt["e2e_ms_p99"] == pytest.approx(hazen(e2e, 1, 0.99)) == pytest.approx(42.0)  # past 0.625: a lower bound
    assert pt["e2e_ms_p50"] == pytest.approx(hazen(e2e, 1, 0.50)) == pytest.approx(35.0)
    assert pt["percentiles_censored"]["e2e_ms"] == ["p90", "p95", "p99", "p999"]
    assert pt["decode_ms_per_token_mean"] == pytest.approx(np.mean([6.0, 4.0, 6.0]))
    assert pt["token_gap_ms_max"] == pytest.approx(10.0)
    assert pt["jitter_ms"] == pytest.approx(float(np.median([np.std([5, 7]), 0.0, np.std([10, 2])])))
    assert pt["slo_attainment"] == pytest.approx(1.0 * 2.0 / 4)
    assert pt["per_user_output_tokens_per_s"] == pytest.approx(np.mean([3 / 0.022, 3 / 0.028, 3 / 0.042]))


def test_append_result_lines_and_ingest_registry(tmp_path):
    f = tmp_path / "sweep.jsonl"
    f.write_text("\n".join(json.dumps(dict(SUMMARY, max_concurrency=c)) for c in (1, 8, 32)) + "\n")
    assert [p["point"] for p in points_from_file(f)] == ["c=1", "c=8", "c=32"]
    rows = ingest_file(f, "vllm_bench")
    ttft = [r for r in rows if r["name"] == "ttft_ms"]
    assert [(r["case"], r["value"], r["direction"]) for r in ttft] == [("c=1", 38.9, "lower"), ("c=8", 38.9, "lower"), ("c=32", 38.9, "lower")]
    assert {r["name"] for r in rows} == {"ttft_ms", "decode_ms_per_token", "tokens_per_second", "request_throughput_rps"}


@pytest.mark.parametrize("text, match", [("{}", "not a vllm bench serve result"), ("not json\n", "not JSON"), ("", "empty")])
def test_bad_files_name_the_file(tmp_path, text, match):
    f = tmp_path / "bad.json"
    f.write_text(text)
    with pytest.raises(BenchrunError, match=match) as e:
        points_from_file(f)
    assert "bad.json" in str(e.value)


@pytest.mark.parametrize(
    "content, match",
    [
        (b"\xff\xfe\x00 not text", "not UTF-8 text"),
        (json.dumps(dict(SUMMARY, completed="many")).encode(), "unexpected type or value"),
        (json.dumps(dict(SUMMARY, max_concurrency="eight")).encode(), "unexpected type or value"),
    ],
)
def test_wrong_bytes_or_field_types_are_one_clear_error(tmp_path, content, match):
    f = tmp_path / "odd.json"
    f.write_bytes(content)
    with pytest.raises(BenchrunError, match=match) as e:
        ingest_file(f, "vllm_bench")
    assert "odd.json" in str(e.value) and "\n" not in str(e.value)


def test_undefined_load_point(tmp_path):
    f = tmp_path / "x.json"
    f.write_text(json.dumps(dict(SUMMARY, max_concurrency=None)))
    with pytest.raises(BenchrunError, match="load point is undefined"):
        points_from_file(f)
