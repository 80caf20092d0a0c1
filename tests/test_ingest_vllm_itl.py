"""vLLM's itl is a gap between streamed chunks; benchrun's ``token_gap_ms`` is per token.

vLLM's request functions (``vllm/benchmarks/lib/endpoint_request_func.py``) append
``timestamp - most_recent_timestamp`` once per chunk after the first, and ``serve.py`` pools
them (``itls += outputs[i].itl``) into mean/median/p<P>_itl_ms; tpot is
(latency − ttft) / (output_len − 1), per token. With k tokens a chunk (speculative decoding,
``--stream-interval``) the itl is k times benchrun's token gap, so the ingest must not file it
under ``token_gap_ms``. The fixtures are written from that format, not captured from a run.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchrun.ingest.vllm_bench import metrics_from_file, points_from_file
from benchrun.suites.result import PERCENTILE_SUFFIXES

BASE = {"date": "20250101-120000", "backend": "vllm", "model_id": "m", "num_prompts": 2, "request_rate": "inf",
        "burstiness": 1.0, "max_concurrency": 2, "duration": 1.0, "completed": 2, "failed": 0,
        "total_input_tokens": 16, "total_output_tokens": 26, "request_throughput": 2.0,
        "request_goodput": None, "output_throughput": 26.0}


def _point(tmp_path, doc):
    f = tmp_path / "r.json"
    f.write_text(json.dumps(doc))
    [pt] = points_from_file(f)
    return pt, f


def test_four_tokens_per_chunk_is_not_filed_as_token_gaps(tmp_path):
    # 13 tokens each: a first chunk of 1 token, then 3 chunks of 4 tokens, 8 ms apart (2 ms a token)
    doc = dict(BASE, ttfts=[0.010, 0.010], itls=[[0.008] * 3, [0.006, 0.008, 0.010]], output_lens=[13, 13],
               input_lens=[8, 8], errors=["", ""])
    pt, f = _point(tmp_path, doc)
    assert pt["chunk_gap_ms_p50"] == pytest.approx(8.0) and pt["chunk_gap_ms_max"] == pytest.approx(10.0)
    assert pt["decode_ms_per_token_mean"] == pytest.approx(24.0 / 12)  # per token, as vLLM's tpot
    # the token gaps are not k x 2 ms under benchrun's per-token name: unknown, and said why
    assert all(pt[f"token_gap_ms_{s}"] is None for s in PERCENTILE_SUFFIXES)
    assert pt["token_gaps_from"].startswith("unknown: 2 of 2")
    assert pt["jitter_ms"] is None and pt["chunk_jitter_ms"] == pytest.approx(float(np.median([0.0, np.std([6, 8, 10])])))
    assert "jitter_ms" not in {r["name"] for r in metrics_from_file(f)}


def test_one_token_per_chunk_gives_token_gaps(tmp_path):
    doc = dict(BASE, ttfts=[0.010, 0.010], itls=[[0.002, 0.004], [0.003, 0.003]], output_lens=[3, 3],
               input_lens=[8, 8], errors=["", ""])
    pt, _ = _point(tmp_path, doc)
    for s in PERCENTILE_SUFFIXES:
        assert pt[f"token_gap_ms_{s}"] == pytest.approx(pt[f"chunk_gap_ms_{s}"])
    assert pt["token_gap_ms_max"] == pytest.approx(4.0) and pt["jitter_ms"] == pytest.approx(0.5)
    assert pt["token_gaps_from"].startswith("chunk gaps")


def test_summary_itl_fields_are_chunk_gaps(tmp_path):
    doc = dict(BASE, mean_tpot_ms=2.0, median_tpot_ms=2.0, p99_tpot_ms=2.5,
               mean_itl_ms=8.0, median_itl_ms=8.0, std_itl_ms=1.0, p99_itl_ms=10.0)
    pt, _ = _point(tmp_path, doc)
    assert (pt["chunk_gap_ms_mean"], pt["chunk_gap_ms_p50"], pt["chunk_gap_ms_p99"]) == (8.0, 8.0, 10.0)
    assert pt["decode_ms_per_token_p50"] == 2.0
    assert all(pt[f"token_gap_ms_{s}"] is None for s in PERCENTILE_SUFFIXES)
    assert "--save-detailed" in pt["token_gaps_from"]
