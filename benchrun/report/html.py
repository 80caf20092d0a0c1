"""The run report: one self-contained HTML file (figures embedded as base64 PNG, no network),
with the headline table and intervals, replicate strip plots, the comparison forest plot,
serving latency–throughput curves and the history with change points."""

from __future__ import annotations

import base64
import html
import json
import logging
import math
import os
from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError
from benchrun.paths import validate_name
from benchrun.report import figures as F
from benchrun.stats.analysis import TrialStatistics, read_trial_statistics
from benchrun.stats.changepoint import change_points, hardware_key, history_table
from benchrun.stats.load import load_run, serving_rows, slo_lines
from benchrun.suites.result import atomic_write_bytes, atomic_write_text

log = logging.getLogger(__name__)


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:.4g}"
    return html.escape(str(v))


def _table(rows: list[dict[str, Any]], cols: list[tuple[str, str]], cls: str = "") -> str:
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label in cols)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(r.get(k))}</td>" for k, _ in cols) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def headline_rows(stats: TrialStatistics) -> list[dict[str, Any]]:
    """The headline table: one row per metric with its median interval and coverage."""
    out = []
    for r in stats.summary.to_dict(orient="records"):
        out.append({
            "metric": f"{r['suite']}/{r['metric']}" + (f" [{r['case']}]" if r["case"] else ""),
            "unit": r["unit"], "direction": r["direction"], "n": r["n"], "median": r["median"],
            "interval": f"[{_fmt(r['median_ci_low'])}, {_fmt(r['median_ci_high'])}]",
            "coverage": f"{r['median_ci_coverage']:.1%}" if not math.isnan(r["median_ci_coverage"]) else "–",
            "bca": (f"[{_fmt(r['bca_ci_low'])}, {_fmt(r['bca_ci_high'])}]"
                    if not math.isnan(r["bca_ci_low"]) else r["bca_ci_note"]),
            "mean": r["mean"], "cv": f"{r['cv']:.2%}" if not math.isnan(r["cv"]) else "–",
            "outliers": r["n_outliers"], "notes": "; ".join(x for x in (r["notes"], r["median_ci_note"]) if x),
        })
    return out


HEADLINE_COLS = [("metric", "metric"), ("unit", "unit"), ("n", "n"), ("median", "median"),
                 ("interval", "median interval"), ("coverage", "coverage"), ("bca", "BCa (mean)"),
                 ("mean", "mean"), ("cv", "CV"), ("outliers", "outliers"), ("notes", "notes")]


def build_report(run_dir: str | os.PathLike[str], *, home: Path | None = None,
                 stats: TrialStatistics | None = None) -> Path:
    """Write ``reports/<run_id>_report.html`` and the figures under ``figures/``; return the report path."""
    run = load_run(run_dir)
    rid = run.run_id
    stats = stats or read_trial_statistics(run.path)  # the asset's file when present, else computed
    figs: list[tuple[str, str, bytes]] = []  # (section, caption, png)

    for suite in sorted(stats.summary["suite"].unique()) if not stats.summary.empty else []:
        png = F.strip_plot(stats.replicates[stats.replicates["suite"] == suite],
                           stats.summary[stats.summary["suite"] == suite], f"{suite}: replicates")
        figs.append(("replicates", f"{suite}: one point per replicate; red × = MAD outlier (kept)", png))
        atomic_write_bytes(run.path / "figures" / f"{rid}_{validate_name(suite, what='suite name')}_strip.png", png)

    comparison = None
    comp_path = run.path / "structured" / f"{rid}_comparison.json"
    if comp_path.is_file():
        try:
            comparison = json.loads(comp_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise BenchrunError(f"{comp_path}: not readable JSON ({exc}); materialize baseline_comparison "
                                "again (or remove the file) and rebuild the report") from exc
        if comparison.get("metrics"):
            png = F.forest_plot(comparison["metrics"], f"{rid} vs {comparison.get('baseline')}")
            figs.append(("comparison", "effects with exact HL intervals; grey = ±δ", png))
            atomic_write_bytes(run.path / "figures" / f"{rid}_comparison_forest.png", png)

    serving = serving_rows(run.path)
    slo = slo_lines(run.spec)
    if not serving.empty and "offered_load" in serving.columns:
        for suite, g in serving.groupby("suite"):
            png = F.latency_throughput(g, slo, f"{suite}: latency vs throughput per bucket")
            figs.append(("serving", f"{suite}: p99 latency against throughput, SLO dashed", png))
            atomic_write_bytes(run.path / "figures" / f"{rid}_{validate_name(str(suite), what='suite name')}"
                                                        "_report-latency-throughput.png", png)

    hist_home = home or run.path.parent.parent
    hist = history_table(hist_home, cadences=None)
    if not hist.empty and run.status.get("workload_spec_digest"):
        hist = hist[(hist["workload_spec_digest"] == run.status["workload_spec_digest"])
                    & (hist["hardware_key"] == hardware_key(run.environment))]
    cps = change_points(hist) if len(hist) else hist
    if len(hist) and hist["run_id"].nunique() >= 2:
        shown = hist
        if len(cps):  # series with change points first
            flagged = set(cps[["suite", "case", "metric"]].itertuples(index=False, name=None))
            order = sorted(set(hist[["suite", "case", "metric"]].itertuples(index=False, name=None)),
                           key=lambda k: (k not in flagged, k))
            shown = hist.set_index(["suite", "case", "metric"]).loc[order[:12]].reset_index()
        png = F.history_plot(shown, cps, "history of replicate medians (same workload × hardware; ★ this run)",
                             current_run=rid)
        figs.append(("history", "dashed lines: significant change points", png))
        atomic_write_bytes(run.path / "figures" / f"{rid}_history_changepoints.png", png)

    def img(section: str) -> str:
        return "".join(
            f'<figure><img alt="{html.escape(cap)}" src="data:image/png;base64,'
            f'{base64.b64encode(png).decode()}"/><figcaption>{html.escape(cap)}</figcaption></figure>'
            for sec, cap, png in figs if sec == section)

    st = run.status
    parts = [
        f"<h1>Benchmark report: {html.escape(rid)}</h1>",
        _table([{"k": k, "v": st.get(k)} for k in (
            "phase", "benchmark_class_granted", "workload_type", "cadence", "variable_under_test",
            "workload_spec_digest", "spec_digest", "artifact_manifest_digest", "created_utc")],
            [("k", "field"), ("v", "value")], "meta"),
        f"<h2>Headline (confidence level {stats.confidence:.0%}, min replicates {stats.min_replicates})</h2>",
        "<p>One value per replicate (one launch); samples inside a replicate are never counted as "
        "independent. Median interval: distribution-free order statistics with its exact coverage.</p>",
        _table(headline_rows(stats), HEADLINE_COLS, "headline"),
        "<h2>Replicates</h2>", img("replicates") or "<p>No metrics.</p>",
    ]
    parts.append("<h2>Comparison with baseline</h2>")
    if comparison is None:
        parts.append("<p>No comparison was made for this run (no baseline resolved).</p>")
    else:
        parts.append(f"<p>{html.escape(comparison['gate']['message'])}</p>")
        if comparison.get("metrics"):
            cond = comparison.get("condition") or {}
            parts.append(f"<p>RegressionDetected = <b>{_fmt(cond.get('status'))}</b> "
                         f"({_fmt(cond.get('reason'))}): {_fmt(cond.get('message'))}</p>")
            parts += [f"<p class='note'>{html.escape(n)}</p>" for n in comparison.get("notes", [])]
            parts.append(_table(comparison["metrics"], [
                ("metric", "metric"), ("gating", "gating"), ("baseline_median", "baseline median"),
                ("candidate_median", "candidate median"), ("ratio", "ratio (↑ better)"), ("ci_low", "CI low"),
                ("ci_high", "CI high"), ("ci_coverage", "coverage"), ("p_value", "p"), ("p_adjusted", "p adj"),
                ("correction", "correction"), ("delta_pct", "δ %"), ("verdict", "verdict"),
                ("confirmation", "confirmation")], "comparison"))
            parts.append(img("comparison"))
    parts.append("<h2>Serving: latency vs throughput</h2>")
    parts.append(img("serving") or "<p>No serving suites in this run.</p>")
    if not stats.tails.empty:
        parts.append("<h3>p99 per point with order-statistic intervals</h3>")
        parts.append(_table(stats.tails.to_dict(orient="records"), [
            ("suite", "suite"), ("replicate", "r"), ("point", "point"), ("bucket", "bucket"),
            ("quantity", "quantity"), ("n_requests", "requests"), ("value", "p99"), ("ci_low", "CI low"),
            ("ci_high", "CI high"), ("coverage", "coverage"), ("n_required", "needed"),
            ("trustworthy", "enough")], "tails"))
    parts.append("<h2>History and change points</h2>")
    parts.append(img("history") or "<p>Fewer than two runs of this workload on this hardware: no history yet.</p>")
    if len(cps):
        parts.append(_table(cps.to_dict(orient="records"), [
            ("suite", "suite"), ("metric", "metric"), ("case", "case"), ("run_id", "first run after"),
            ("before_mean", "before"), ("after_mean", "after"), ("magnitude_pct", "Δ %"),
            ("p_adjusted", "p adj"), ("kind", "kind")], "cps"))
    style = ("body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;"
             "font-size:12px;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}"
             "td:first-child,th:first-child{text-align:left}img{max-width:100%}.note{color:#a04000}"
             "figure{margin:1em 0}figcaption{font-size:11px;color:#555}")
    doc = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(rid)} report</title>"
           f"<style>{style}</style></head><body>{''.join(parts)}</body></html>")
    out = atomic_write_text(run.path / "reports" / f"{rid}_report.html", doc)
    log.info("report written to %s (%d figures)", out, len(figs))
    return out


__all__ = ["build_report", "headline_rows", "HEADLINE_COLS"]
