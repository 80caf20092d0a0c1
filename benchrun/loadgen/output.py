"""Writers for load-generator outputs: the per-request parquet and the latency-throughput figures.

pyarrow (parquet) and matplotlib (figures) are imported lazily: the load generator itself
needs neither. Every file is written to a temporary name beside its target and renamed.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Sequence

from benchrun.fsio import atomic_path

log = logging.getLogger(__name__)

# Column order and types of ``raw/<run_id>_<suite>_r<k>_requests.parquet``.
REQUEST_COLUMNS: tuple[tuple[str, str], ...] = (
    ("request_id", "string"),
    ("trace_id", "string"),
    ("worker", "int32"),
    ("point", "string"),
    ("point_index", "int32"),
    ("load_model", "string"),
    ("offered_load", "float64"),
    ("bucket", "string"),
    ("input_tokens_requested", "int64"),
    ("output_tokens_requested", "int64"),
    ("scheduled_ts", "float64"),
    ("send_ts", "float64"),
    ("schedule_lag_ms", "float64"),
    ("scheduled_mono_ns", "int64"),
    ("send_mono_ns", "int64"),
    ("write_mono_ns", "int64"),
    ("connect_ms", "float64"),
    ("first_token_mono_ns", "int64"),
    ("last_token_mono_ns", "int64"),
    ("end_mono_ns", "int64"),
    ("ttft_ms", "float64"),
    ("e2e_ms", "float64"),
    ("input_tokens", "int64"),
    ("output_tokens", "int64"),
    ("usage_input_tokens", "int64"),
    ("usage_output_tokens", "int64"),
    ("chunk_count", "int64"),
    ("chunk_output_tokens", "int64"),
    ("token_count_source", "string"),
    ("chunk_token_method", "string"),
    ("output_token_discrepancy", "int64"),
    ("input_token_discrepancy", "int64"),
    ("decode_ms_per_token", "float64"),
    ("token_gaps_ms", "list<float64>"),
    ("token_gap_std_ms", "float64"),
    ("http_status", "int32"),
    ("error_kind", "string"),
    ("error", "string"),
    ("reused_connection", "bool"),
    ("stream_end", "string"),
    ("synthetic", "bool"),
    ("session_id", "string"),
    ("turn", "int32"),
    ("prefix_id", "int32"),
    ("dataset_index", "int64"),
    ("usage_cached_tokens", "int64"),
    # trace replay (benchrun.loadgen.trace): the request's place in the trace; lateness is schedule_lag_ms
    ("trace_index", "int64"),
    ("trace_offset_s", "float64"),
    ("trace_session_id", "string"),
    ("trace_prefix_ids", "string"),
)


def write_requests_parquet(rows: Sequence[dict[str, Any]], path: str | os.PathLike[str], constants: dict[str, Any] | None = None) -> Path:
    """Write request rows (plus constant string columns such as run_id) atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {
        "string": pa.string(),
        "int32": pa.int32(),
        "int64": pa.int64(),
        "float64": pa.float64(),
        "bool": pa.bool_(),
        "list<float64>": pa.list_(pa.float64()),
    }
    consts = constants or {}
    fields = [pa.field(k, pa.string()) for k in consts]
    fields += [pa.field(name, types[t]) for name, t in REQUEST_COLUMNS]
    schema = pa.schema(fields)
    cols = {k: [None if v is None else str(v)] * len(rows) for k, v in consts.items()}
    for name, _ in REQUEST_COLUMNS:
        cols[name] = [r.get(name) for r in rows]
    table = pa.Table.from_pydict(cols, schema=schema)
    target = Path(path)
    with atomic_path(target) as tmp:
        pq.write_table(table, tmp, compression="zstd")
    return target


def _slug(bucket: str) -> str:
    return bucket.replace("/", "-")


def plot_latency_throughput(
    summaries: Sequence[dict[str, Any]],
    out_dir: str | os.PathLike[str],
    prefix: str,
    *,
    synthetic: bool = False,
) -> tuple[list[Path], str | None]:
    """One PNG per bucket: e2e p50/p99 and TTFT p99 against output tokens/s, one marker per
    point. Returns (paths, reason) — reason says why no figure was made (e.g. no matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return [], "figure skipped: matplotlib is not installed"
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    buckets: list[str] = []
    for s in summaries:
        if s["bucket"] not in buckets:
            buckets.append(s["bucket"])
    for b in buckets:
        pts = [s for s in summaries if s["bucket"] == b and s.get("tokens_per_second") is not None and s.get("e2e_ms_p50") is not None]
        if not pts:
            continue
        pts.sort(key=lambda s: s["offered_load"])
        x = [s["tokens_per_second"] for s in pts]
        fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
        ax.plot(x, [s["e2e_ms_p50"] for s in pts], "o-", label="e2e p50")
        ax.plot(x, [s["e2e_ms_p99"] for s in pts], "s--", label="e2e p99")
        ax.plot(x, [s["ttft_ms_p99"] for s in pts], "^:", label="TTFT p99")
        for s, xi in zip(pts, x):
            mark = "" if s.get("verdict") == "valid" else " (invalid)"
            ax.annotate(s["point"] + mark, (xi, s["e2e_ms_p99"]), textcoords="offset points", xytext=(4, 4), fontsize=7)
        ax.set_xlabel("output tokens/s (system)")
        ax.set_ylabel("latency (ms)")
        title = f"latency vs throughput, bucket {b}"
        if synthetic:
            title += "\nSYNTHETIC: benchrun reference server"
        ax.set_title(title, fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        target = out / f"{prefix}_latency_throughput_{_slug(b)}.png"
        try:
            with atomic_path(target) as tmp:
                fig.savefig(tmp, format="png")
        finally:
            plt.close(fig)
        paths.append(target)
    return paths, None
