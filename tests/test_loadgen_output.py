"""Load-generator outputs: the per-request parquet and the latency-throughput figures."""

from __future__ import annotations

import sys

import pyarrow.parquet as pq

from benchrun.loadgen.output import REQUEST_COLUMNS, plot_latency_throughput, write_requests_parquet


def _summary(point, load, bucket, tps, p50, p99, verdict="valid"):
    return {"point": point, "offered_load": load, "bucket": bucket, "tokens_per_second": tps, "e2e_ms_p50": p50, "e2e_ms_p99": p99, "ttft_ms_p99": p50 / 4, "verdict": verdict}


def test_parquet_has_typed_columns_nulls_and_no_leftover_temp_file(tmp_path):
    rows = [
        {"request_id": "a", "trace_id": "t" * 32, "worker": 0, "point": "c=1", "bucket": "8/4", "ttft_ms": 1.5, "e2e_ms": 9.0, "token_gaps_ms": [1.0, 2.0], "error": None, "synthetic": True},
        {"request_id": "b", "trace_id": "u" * 32, "worker": 1, "point": "c=1", "bucket": "8/4", "ttft_ms": None, "e2e_ms": None, "token_gaps_ms": [], "error": "http_500: x", "error_kind": "http_500", "synthetic": True},
    ]
    path = write_requests_parquet(rows, tmp_path / "raw" / "r_requests.parquet", {"run_id": "r1"})
    t = pq.read_table(path)
    assert t.column_names == ["run_id"] + [c for c, _ in REQUEST_COLUMNS]
    assert t.column("ttft_ms").to_pylist() == [1.5, None]
    assert t.column("token_gaps_ms").to_pylist() == [[1.0, 2.0], []]
    assert t.column("error").to_pylist() == [None, "http_500: x"]
    assert str(t.schema.field("worker").type) == "int32"
    assert [p.name for p in path.parent.iterdir()] == ["r_requests.parquet"]


def test_one_figure_per_bucket(tmp_path):
    s = [_summary("c=1", 1, "all", 100, 10, 20), _summary("c=4", 4, "all", 300, 12, 30, "invalid"), _summary("c=1", 1, "8/4", 50, 9, 18)]
    paths, why = plot_latency_throughput(s, tmp_path, "r1_sweep_r1", synthetic=True)
    assert why is None
    assert sorted(p.name for p in paths) == ["r1_sweep_r1_latency_throughput_8-4.png", "r1_sweep_r1_latency_throughput_all.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)


def test_figure_is_skipped_with_a_reason_without_matplotlib(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    paths, why = plot_latency_throughput([_summary("c=1", 1, "all", 100, 10, 20)], tmp_path, "x")
    assert paths == [] and why == "figure skipped: matplotlib is not installed"
