"""The report's utilization timeline: per suite, host CPU, background CPU and GPU utilization
over the run's clock, with each replicate's window shaded, from the replicates' sample files."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc

from benchrun.paths import validate_name
from benchrun.telemetry.facts import sample_files
from benchrun.telemetry.samples import read_samples

log = logging.getLogger(__name__)

# (metric, label, colour); GPU series are drawn one line per GPU index.
SERIES = (("cpu_utilization_pct", "host CPU", "#2e86c1"), ("suite_cpu_pct", "suite CPU", "#8e44ad"),
          ("background_cpu_pct", "background CPU (other processes)", "#c0392b"),
          ("gpu_utilization_pct", "GPU", "#1e8449"))


def timeline_data(run_dir: Path, run_id: str) -> dict[str, list[dict[str, Any]]]:
    """Per suite, per replicate: its window (epoch s) and the plotted series as (t, value) arrays."""
    out: dict[str, list[dict[str, Any]]] = {}
    for relpath, suite, rep, kind in sample_files(Path(run_dir), run_id):
        if kind != "telemetry":
            continue
        try:
            t = read_samples(Path(run_dir) / relpath)
        except ValueError as exc:
            log.warning("timeline: %s", exc)
            continue
        meta = {k.decode(): v.decode() for k, v in (t.schema.metadata or {}).items()}
        series = {}
        for metric, _, _ in SERIES:
            sel = t.filter(pc.equal(t["metric"], metric))
            for idx in sorted(set(sel["device_index"].to_pylist()), key=lambda v: -1 if v is None else v):
                g = sel.filter(pc.is_null(sel["device_index"]) if idx is None else pc.equal(sel["device_index"], idx))
                ts = g["ts"].cast("int64").to_numpy() / 1e6
                order = np.argsort(ts)
                series[(metric, idx)] = (ts[order], g["value"].to_numpy()[order])
        try:
            window = (float(meta["window_start"]), float(meta["window_end"]))
        except (KeyError, ValueError):
            ts_all = t["ts"].cast("int64").to_numpy() / 1e6
            window = (float(ts_all.min()), float(ts_all.max())) if len(ts_all) else (0.0, 0.0)
        out.setdefault(suite, []).append({"replicate": rep, "window": window, "series": series, "raw": relpath})
    for reps in out.values():
        reps.sort(key=lambda r: r["window"][0])
    return out


def utilization_timeline(replicates: list[dict[str, Any]], title: str) -> bytes:
    """PNG: utilization (%) against seconds since the suite's first replicate started; windows shaded."""
    from benchrun.report.figures import _png, plt

    t0 = min(r["window"][0] for r in replicates)
    fig, ax = plt.subplots(figsize=(10, 3.6))
    labelled: set[str] = set()
    for r in replicates:
        a, b = r["window"][0] - t0, r["window"][1] - t0
        ax.axvspan(a, b, color="#d5dbdb", alpha=0.5, lw=0)
        ax.annotate(f"r{r['replicate']}", (a, 101), fontsize=7, va="bottom")
        for metric, label, colour in SERIES:
            for (m, idx), (ts, vals) in r["series"].items():
                if m != metric or not len(ts):
                    continue
                name = label if metric != "gpu_utilization_pct" else f"GPU {idx}"
                # markers: a short replicate at 1 Hz has one or two samples, which a bare line hides
                ax.plot(ts - t0, vals, color=colour, lw=1, marker=".", ms=4, alpha=0.9 if idx in (None, 0) else 0.6,
                        label=None if name in labelled else name)
                labelled.add(name)
    ax.set_ylim(0, 108)
    ax.set_xlabel("seconds since the first replicate started (grey: replicate windows)")
    ax.set_ylabel("%")
    ax.grid(alpha=0.3)
    if labelled:  # below the axes: inside, it hides the top of the late replicates
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=4, frameon=False)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return _png(fig)


def utilization_section(ctx: Any) -> Any:
    """The report section (``benchrun.report.html.EXTRA_SECTIONS``): one timeline per suite."""
    from benchrun.report.html import ReportSection

    run_dir, run_id = Path(ctx.run.path), ctx.run.run_id
    data = timeline_data(run_dir, run_id)
    if not data:
        return ReportSection("Utilization while suites ran",
                             "<p>No telemetry samples in this run (sampling off, or a launcher that does not sample).</p>")
    figures = []
    for suite in sorted(data):
        png = utilization_timeline(data[suite], f"{validate_name(suite, what='suite name')}: utilization per replicate")
        cap = f"{suite}: {len(data[suite])} replicates; samples in " + ", ".join(r["raw"] for r in data[suite][:3]) + (
            " …" if len(data[suite]) > 3 else "")
        figures.append((cap, png))
    body = ("<p>Sampled beside every replicate (host through psutil, GPUs through NVML when present); grey bands "
            "are the replicates' windows; background = CPU used by processes other than the suite and the "
            "harness. Every sample is a row of <code>telemetry_slice_fact</code>.</p>")
    return ReportSection("Utilization while suites ran", body, figures)
