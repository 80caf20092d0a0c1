"""The case of an ingested ``vllm bench serve`` result names every setting that makes it a
different experiment: runs at different ``max_concurrency`` caps or ``burstiness`` are not
replicates of one case. (Fixture fields as vLLM's ``benchmarks/serve.py`` writes them; see
tests/test_ingest_vllm.py.)"""

from __future__ import annotations

import json

import pytest

from benchrun.errors import BenchrunError
from benchrun.ingest import ingest_file
from benchrun.ingest.vllm_bench import points_from_file
from benchrun.loadgen.config import LoadPoint

BASE = {"date": "x", "completed": 100, "failed": 0, "duration": 10.0, "request_rate": 8.0, "burstiness": 1.0,
        "max_concurrency": None, "request_throughput": 10, "output_throughput": 1000, "median_ttft_ms": 50,
        "p99_ttft_ms": 90}


def _write(tmp_path, docs):
    f = tmp_path / "sweep.jsonl"
    f.write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    return f


def test_concurrency_cap_and_burstiness_are_in_the_case(tmp_path):
    """/tmp/rev/ingest_collide.py: all three became ``rate=8`` and pooled as replicates."""
    f = _write(tmp_path, [dict(BASE, max_concurrency=4, median_ttft_ms=20), dict(BASE, max_concurrency=64, median_ttft_ms=400),
                          dict(BASE, burstiness=0.25, median_ttft_ms=900), dict(BASE, median_ttft_ms=50)])
    pts = points_from_file(f)
    assert [(p["point"], p["load_model"], p["offered_load"]) for p in pts] == [
        ("rate=8,max_concurrency=4", "open_loop", 8.0), ("rate=8,max_concurrency=64", "open_loop", 8.0),
        ("rate=8,burstiness=0.25", "open_loop", 8.0), ("rate=8", "open_loop", 8.0)]
    assert [(p["max_concurrency"], p["burstiness"]) for p in pts] == [(4.0, 1.0), (64.0, 1.0), (None, 0.25), (None, 1.0)]
    ttft = [(r["case"], r["value"]) for r in ingest_file(f, "vllm_bench") if r["name"] == "ttft_ms"]
    assert ttft == [("rate=8,max_concurrency=4", 20), ("rate=8,max_concurrency=64", 400),
                    ("rate=8,burstiness=0.25", 900), ("rate=8", 50)]


def test_labels_match_the_load_generators_own_points(tmp_path):
    """Poisson (vLLM's default burstiness 1.0, or none recorded) is ``rate=R`` and gamma arrivals
    ``rate=R,burstiness=B``, as benchrun's own points are labelled; an infinite rate stays ``c=N``."""
    f = _write(tmp_path, [dict(BASE, burstiness=None), dict(BASE, burstiness=2.0, max_concurrency=16),
                          dict(BASE, request_rate="inf", max_concurrency=32, burstiness=0.5)])
    assert [p["point"] for p in points_from_file(f)] == [
        LoadPoint("open_loop", 8.0).label, f"{LoadPoint('open_loop', 8.0, 'gamma', 2.0).label},max_concurrency=16",
        LoadPoint("closed_loop", 32).label]


@pytest.mark.parametrize("field", ["max_concurrency", "burstiness"])
def test_a_label_field_of_the_wrong_type_is_one_clear_error(tmp_path, field):
    f = _write(tmp_path, [dict(BASE, **{field: "eight"})])
    with pytest.raises(BenchrunError, match="unexpected type or value"):
        points_from_file(f)
