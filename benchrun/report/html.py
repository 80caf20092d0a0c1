"""The run report: one self-contained HTML file that leads with the answer.

Top to bottom: the verdict (phase, class granted, regressions, against which baseline), a
headline per suite (primary metrics, median, interval, change against the baseline), figures
that show something, then the details collapsed.

Built in two steps so the report is never stale: :func:`render_figures` draws the figures
(the slow part, matplotlib) and indexes them under ``figures/``; :func:`write_report` writes
the HTML from the run's *current* status and that index in milliseconds, so ``run_status``
writes it again once the phase is final. :func:`build_report` does both.

Extension point: a module adds a section by listing ``"package.module:function"`` in
``EXTRA_SECTIONS``; the function takes a :class:`SectionContext` and returns a
:class:`ReportSection` (or None when it has nothing to show). Its figures are drawn with the
others and its HTML is kept in the index.
"""

from __future__ import annotations

import base64
import html
import importlib
import json
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from benchrun.console import number
from benchrun.errors import BenchrunError
from benchrun.paths import validate_name
from benchrun.report import content as C
from benchrun.fsio import atomic_write_bytes, atomic_write_json, atomic_write_text

log = logging.getLogger(__name__)

# "module:function" of extra sections, in display order (after the built-in figures).
EXTRA_SECTIONS: list[str] = [
    "benchrun.report.telemetry:utilization_section",  # utilization timelines per suite (telemetry)
    "benchrun.report.training:training_section",  # training figures per replicate, straggler nodes
]


@dataclass
class SectionContext:
    """What a section function may read: the run, its statistics and its comparison."""

    run: Any  # benchrun.stats.load.RunInfo
    stats: Any  # benchrun.stats.analysis.TrialStatistics
    comparison: dict[str, Any] | None


@dataclass
class ReportSection:
    title: str
    html: str  # a fragment; escape whatever comes from data
    figures: list[tuple[str, bytes]] = field(default_factory=list)  # (caption, PNG bytes)


# --- formatting ----------------------------------------------------------------------------

def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return number(v)
    return html.escape(str(v))


def _table(rows: list[dict[str, Any]], cols: list[tuple[str, str]], cls: str = "") -> str:
    """A table; a column with one value on every row is said once above it instead."""
    cols = [(k, label) for k, label in cols if any(k in r for r in rows)]
    common = []
    if len(rows) > 1:
        for k, label in list(cols):
            values = {_fmt(r.get(k)) for r in rows}
            if len(values) == 1:
                common.append(f"{html.escape(label)}: {values.pop()}")
                cols.remove((k, label))
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label in cols)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(r.get(k))}</td>" for k, _ in cols) + "</tr>" for r in rows)
    note = f"<p class='common'>Every row: {'; '.join(common)}</p>" if common else ""
    return f'{note}<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _when(stamp: Any) -> str:
    """``2026-12-01T00:22:13.76Z`` as ``2026-12-01 00:22:13 UTC``."""
    if not stamp:
        return ""
    text = str(stamp).replace("T", " ").rstrip("Z")
    return text.split(".")[0] + " UTC"


def _change(rec: dict[str, Any] | None) -> str:
    """The change as measured (+ = went up) with its interval and better/worse (benchrun.stats.reading)."""
    from benchrun.stats.reading import POOLED_MARK, change_of, pooled_shift

    if not rec:
        return "<span class='muted'>–</span>"
    verdict = str(rec.get("verdict") or "")
    # Red and green only where the verdict decides the run (gating rows): a reported row's
    # verdict is said in grey, so the colours never contradict the verdict box.
    cls = f"v-{html.escape(verdict)}" if rec.get("gating") else "muted"
    if C.unconfirmed(rec):  # the round did not confirm it: said as the verdict box counts it, not in red
        cls, verdict = ("v-suspected" if rec.get("gating") else "muted"), "regression (not confirmed)"
    pct, bw = change_of(rec)
    if pct is None:
        return f"<span class='{cls}'>{html.escape(verdict or '–')}</span>"
    lo, hi = C.pick(rec, "change_low_pct"), C.pick(rec, "change_high_pct")
    interval = f" [{lo:+.1f}, {hi:+.1f}]" if lo is not None and hi is not None else ""
    mark = f" {POOLED_MARK}" if pooled_shift(rec) else ""  # the pooled-request p99s' ratio, said below the table
    return (f"<span class='{cls}'>{pct:+.1f} %{mark}{interval} {html.escape(bw)} "
            f"{html.escape(verdict.replace('_', ' '))}</span>")


# --- step 1: figures -----------------------------------------------------------------------

def _index_path(run_path: Path) -> Path:
    return run_path / "figures" / f"{run_path.name}_report_figures.json"


def report_outputs(run_dir: str | os.PathLike[str]) -> list[str]:
    """Run-relative paths of what ``build_report`` writes: the report, the figure index and
    the figures it lists, its sections' included (re-signing after `benchrun report` and the
    figure worker allows exactly these to change)."""
    run_path = Path(run_dir)
    out = [f"reports/{run_path.name}_report.html", _index_path(run_path).relative_to(run_path).as_posix()]
    try:
        index = json.loads(_index_path(run_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return out
    listed = [f for f in index.get("figures") or [] if isinstance(f, dict)] + [  # the sections' figures too
        f for sec in index.get("sections") or [] if isinstance(sec, dict) for f in sec.get("figures") or []
        if isinstance(f, dict)]
    files = [str(f.get("file")) for f in listed]
    return out + [f"figures/{name}" for name in files if "/" not in name and name not in ("", ".", "..")]


def _read_comparison(run_path: Path) -> dict[str, Any] | None:
    path = run_path / "structured" / f"{run_path.name}_comparison.json"
    if not path.is_file():
        return None
    from benchrun.stats.reading import read_comparison

    try:
        return read_comparison(json.loads(path.read_text(encoding="utf-8")))  # an older document as this one
    except (OSError, ValueError) as exc:
        raise BenchrunError(f"{path}: not readable JSON ({exc}); materialize baseline_comparison "
                            "again (or remove the file) and rebuild the report") from exc


def _figures() -> Any:
    """benchrun.report.figures, imported on first use: matplotlib costs ~0.5 s and a run
    with nothing informative to draw should not pay it."""
    from benchrun.report import figures

    return figures


def render_figures(run_dir: str | os.PathLike[str], *, home: Path | None = None, stats: Any = None) -> list[dict]:
    """Draw the figures that show something, save them under ``figures/`` and index them."""
    from benchrun.stats.analysis import read_trial_statistics
    from benchrun.stats.changepoint import change_points
    from benchrun.stats.load import load_run, serving_rows, slo_lines

    run = load_run(run_dir)
    rid = run.run_id
    stats = stats if stats is not None else read_trial_statistics(run.path)
    comparison = _read_comparison(run.path)
    heads = C.headlines(stats, run.spec, comparison)
    index: list[dict[str, Any]] = []

    def save(section: str, caption: str, name: str, png: bytes) -> None:
        fname = f"{rid}_{name}.png"
        atomic_write_bytes(run.path / "figures" / fname, png)
        index.append({"section": section, "caption": caption, "file": fname})

    serving = serving_rows(run.path)
    if not serving.empty and "offered_load" in serving.columns:
        slo = slo_lines(run.spec)
        serving, invalid = C.mark_invalid_points(run.path, serving)
        for suite, g in serving.groupby("suite"):
            if g["offered_load"].nunique() < 2:
                continue  # one load point is a dot, not a curve; its numbers are in the headline
            name = validate_name(str(suite), what="suite name")
            bad = "; ".join(f"{pt} (replicate{'s' if len(ks) > 1 else ''} {', '.join(map(str, sorted(ks)))}: "
                            f"{', '.join(why)})" for (s, pt), (ks, why) in sorted(invalid.items()) if s == suite)
            save("serving", f"{suite}: p99 latency against throughput per load point, SLO dashed"
                 + (f"; left out of the curve, as the history and the comparison leave them out, the load points "
                    f"the load generator judged invalid (hollow where no valid replicate of that load is left): {bad}"
                    if bad else ""),
                 f"{name}_report-latency-throughput", _figures().latency_throughput(g, slo, f"{suite}: latency vs throughput"))

    if comparison and comparison.get("metrics"):
        missing = _figures().forest_not_drawn(comparison["metrics"])
        save("comparison", "change against the baseline with its interval; grey = ±δ no-change band; ◀ ▶ = beyond "
             "the axis (a −100 % change at its left end)" + (f"; not drawn: {'; '.join(missing)}" if missing else ""),
             "comparison_forest", _figures().forest_plot(comparison["metrics"], f"{rid} vs {comparison.get('baseline')}"))

    hist = C.history_for(run, stats, home or run.path.parent.parent)
    # what the report says when no history figure is drawn: a first run, or one with nothing to place
    history = {"earlier_runs": int(hist.loc[hist["run_id"] != rid, "run_id"].nunique()) if len(hist) else 0,
               "this_run": bool(len(hist) and (hist["run_id"] == rid).any())}
    cp_rows: list[dict[str, Any]] = []
    if len(hist) and hist["run_id"].nunique() >= 2:
        cps = change_points(hist)
        cp_rows = json.loads(cps.to_json(orient="records")) if len(cps) else []
        flagged = set(cps[["suite", "case", "metric"]].itertuples(index=False, name=None)) if len(cps) else set()
        series = C.history_series(hist, heads, flagged)
        save("history", f"replicate medians of the headline metrics over {hist['run_id'].nunique()} runs of this "
             "workload on this hardware; ★ this run, dashed = change point", "history_changepoints",
             _figures().history_plot(hist, cps, "history (same workload × hardware)", current_run=rid, series=series))

    # Strip plots only where the interval says more than the replicates' range.
    informative = {(r.suite, r.case, r.metric) for h in heads for r in h.rows if r.informative}
    if informative and not stats.summary.empty:
        for suite in sorted({k[0] for k in informative}):
            keys = [(c, m) for s, c, m in informative if s == suite]
            summ = stats.summary[(stats.summary["suite"] == suite)
                                 & stats.summary[["case", "metric"]].apply(tuple, axis=1).isin(keys)]
            png = _figures().strip_plot(stats.replicates[stats.replicates["suite"] == suite], summ, f"{suite}: replicates")
            save("replicates", f"{suite}: one point per replicate, median and its interval; red × = MAD outlier "
                 "(kept)", f"{validate_name(suite, what='suite name')}_strip", png)

    extra = []
    for ref in EXTRA_SECTIONS:
        mod, _, fn = ref.partition(":")
        try:
            section_fn: Callable[[SectionContext], ReportSection | None] = getattr(importlib.import_module(mod), fn)
            sec = section_fn(SectionContext(run, stats, comparison))
            if sec is None:
                continue
            files = []
            for i, (caption, png) in enumerate(sec.figures):
                fname = f"{rid}_{validate_name(fn, what='section function')}_{i}.png"
                atomic_write_bytes(run.path / "figures" / fname, png)
                files.append({"caption": caption, "file": fname})
        except Exception as exc:  # one section's failure (its data, its code) never costs the report
            log.warning("report section %s of run %s failed: %s", ref, rid, exc, exc_info=True)
            extra.append({"title": fn.replace("_", " "), "figures": [], "html": (
                f"<p class='muted'>This section could not be drawn ({html.escape(type(exc).__name__)}: "
                f"{html.escape(str(exc))}); the rest of the report does not depend on it.</p>")})
            continue
        extra.append({"title": sec.title, "html": sec.html, "figures": files})
    atomic_write_json(_index_path(run.path), {"figures": index, "sections": extra, "change_points": cp_rows,
                                            "history": history})
    return index


# --- step 2: the HTML ----------------------------------------------------------------------

def _img(run_path: Path, fig: dict[str, Any]) -> str:
    path = run_path / "figures" / validate_name(Path(fig["file"]).name, what="figure file")
    try:
        data = base64.b64encode(path.read_bytes()).decode()
    except FileNotFoundError:
        return f"<p class='muted'>figure {html.escape(fig['file'])} is missing; run `benchrun report` again</p>"
    cap = html.escape(fig["caption"])
    return f'<figure><img alt="{cap}" src="data:image/png;base64,{data}"/><figcaption>{cap}</figcaption></figure>'


def _verdict_html(v: C.Verdict, st: dict[str, Any]) -> str:
    cls = {"Succeeded": "ok", "Failed": "bad", "Rejected": "bad"}.get(v.phase, "warn")
    granted = v.class_granted or "–"
    if v.class_requested and v.class_requested != v.class_granted:
        granted += f" (requested {v.class_requested})"
    rows = [("phase", f"<span class='badge {cls}'>{html.escape(v.phase)}</span> outcome {_fmt(v.outcome)}"),
            ("class granted", html.escape(granted)),
            ("gating regressions", f"<span class='badge {v.regression_level}'>{html.escape(v.regressions)}</span>"),
            ("baseline", html.escape(v.baseline or "none")),
            *([("gate overridden", f"<span class='badge warn'>{html.escape(v.overridden)}</span>")]
              if v.overridden else []),
            ("replicates", html.escape(v.replicates)),
            ("finished", html.escape(_when(st.get("finished_utc")) or "not yet"))]
    dl = "".join(f"<dt>{k}</dt><dd>{val}</dd>" for k, val in rows)
    probs = "".join(f"<li>{html.escape(p)}</li>" for p in v.problems)
    return (f"<section id='verdict' class='verdict {cls}'><h1>{html.escape(st.get('run_id') or '')}</h1>"
            f"<dl>{dl}</dl><p>{html.escape(v.against)}</p>" + (f"<ul class='problems'>{probs}</ul>" if probs else "")
            + "</section>")


def _headline_html(heads: list[C.SuiteHeadline], stats: Any, compared: bool, validity: list[str] | None = None) -> str:
    from benchrun.stats.reading import pooled_note

    said = C.coverage_said(heads, stats.confidence)[0]
    every = [r for h in heads for r in h.rows]  # no row with an interval: say so, not an interval none has
    parts = ["<section id='headline'><h2>Headline</h2><p class='muted'>Median over replicates (one value per launch)"
             + (f" with its distribution-free interval ({html.escape(said)}; each row's coverage beside it)"
                if any(C.has_interval(r) for r in every) else f"; {html.escape(said)}"
                + (": a median interval needs at least 2 replicates" if all(r.n < 2 for r in every) else "")
                if every else "")
             + ("; shift = the estimated change of candidate against baseline (Hodges–Lehmann: the median of all "
                "candidate − baseline differences, or of their ratios when every value is positive), in % (+ when the "
                "value went up), with its interval, and better/worse by the metric's direction. It is not the ratio of "
                "the two medians and can differ from it, even in sign, when the replicates spread widely. "
                "§: a request percentile judged on pooled requests, whose shift is instead the ratio "
                "of the two arms' pooled-request p99s (each arm's requests pooled over its replicates), said below "
                "the table; its median is still the replicates'.</p>"
                if compared else ".</p>")]
    any_range = False
    for h in heads:
        rows = []
        for r in h.rows:
            interval = "–"
            if r.low is not None and r.high is not None:
                interval = f"[{_fmt(r.low)}, {_fmt(r.high)}]"
                if not r.informative:
                    interval = f"<span class='muted'>{interval}†</span>"
                    any_range = True
                if r.coverage is not None and math.isfinite(r.coverage):
                    interval += f" <span class='muted'>{r.coverage:.1%}</span>"
            star = " <span title='gates against the baseline'>★</span>" if r.gating else ""
            rows.append(f"<tr><td>{html.escape(r.metric)}{star}</td><td>{html.escape(r.case)}</td>"
                        f"<td class='num'><b>{_fmt(r.median)}</b> {html.escape(r.unit)}</td><td class='num'>{interval}"
                        f"</td><td class='num'>{html.escape(r.n_text())}</td>"
                        + (f"<td>{_change(r.change)}</td>" if compared else "")
                        + "</tr>")
        parts.append(f"<h3>{html.escape(h.suite)}</h3><table class='headline'><thead><tr><th>metric</th><th>case</th>"
                     "<th>median</th><th>interval</th><th>n</th>"
                     + ("<th>estimated shift vs baseline</th>" if compared else "") + "</tr></thead>"
                     f"<tbody>{''.join(rows)}</tbody></table>")
    if any(r.gating for h in heads for r in h.rows):
        parts.append("<p class='muted'>★ gates against the baseline (the spec's primary metrics).</p>")
    notes = C.compared_notes(heads)
    notes += [n for n in (pooled_note(r.change or {}) for h in heads for r in h.rows) if n]
    notes += list(validity or [])  # suites that judged their own measurement invalid (benchrun.stats.validity)
    if notes:
        parts.append("<ul class='note'>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
    if any_range:
        parts.append("<p class='muted'>† with this few replicates the interval is the replicates' whole range; "
                     "raise trials.minReplicates for a tighter one.</p>")
    if not heads:
        parts.append("<p>No metrics were recorded.</p>")
    return "".join(parts) + "</section>"


def _details_html(run: Any, stats: Any, comparison: dict[str, Any] | None, cps: list[dict[str, Any]]) -> str:
    def block(title: str, body: str) -> str:
        return f"<details><summary>{html.escape(title)}</summary>{body}</details>"

    parts = ["<section id='details'><h2>Details</h2>"]
    if not stats.summary.empty:
        recs = []
        for r in stats.summary.to_dict(orient="records"):
            lo, hi, cov = C.interval_of(r)
            recs.append({**r, "interval": f"[{_fmt(lo)}, {_fmt(hi)}]",
                         "coverage": f"{cov:.1%}" if cov is not None and math.isfinite(cov) else None,
                         "notes": "; ".join(str(x) for x in (r.get("notes"), r.get("median_ci_note")) if x)})
        parts.append(block(f"All metrics ({len(recs)})", _table(recs, [
            ("suite", "suite"), ("case", "case"), ("metric", "metric"), ("unit", "unit"), ("n", "n"),
            ("median", "median"), ("interval", "median interval"), ("coverage", "coverage"), ("mean", "mean"),
            ("cv", "CV"), ("bca_ci_note", "BCa"), ("n_outliers", "outliers"), ("notes", "notes")], "all")))
    if comparison and comparison.get("metrics"):
        outcomes = [m for m in comparison["metrics"] if m.get("role") != "context"]
        context = [m for m in comparison["metrics"] if m.get("role") == "context"]
        cond = comparison.get("condition") or {}
        notes = (f"<p>RegressionDetected = <b>{_fmt(cond.get('status'))}</b> ({_fmt(cond.get('reason'))}): "
                 f"{_fmt(cond.get('message'))}</p>"
                 + "".join(f"<p class='note'>{html.escape(str(n))}</p>" for n in comparison.get("notes", []))
                 + "<p class='note'>p adj: gating rows are Holm-adjusted over the one-sided p in the regression "
                 "direction (the gate); other rows Benjamini–Hochberg over the two-sided p.</p>"
                 + f"<p class='note'>{SHIFT_NOTE}</p>")
        parts.append(block(f"Comparison with {comparison.get('baseline')} ({len(outcomes)} outcomes: primary and "
                           "secondary)", notes + _table(_medians_change(outcomes), [
                               ("metric", "metric"), ("gating", "gating"), ("baseline_median", "baseline"),
                               ("candidate_median", "candidate"), ("n_compared", "n (baseline/candidate)"),
                               ("medians_change_pct", "medians' change %"),
                               ("change_pct", "estimated shift % (+ = up)"), ("shift_of", "shift of"),
                               ("better_worse", "better/worse"), ("change_low_pct", "CI low %"),
                               ("change_high_pct", "CI high %"), ("role", "role"), ("mde_pct", "MDE %"), ("p_value", "p 2-sided"), ("p_adjusted", "p adj"),
                               ("correction", "correction"), ("delta_pct", "δ %"), ("verdict", "verdict"),
                               ("confirmation", "confirmation"), ("advice", "what n can show"), ("note", "note")], "comparison")
                           + _left_out_html(outcomes) + _pooled_html(outcomes)))
        if context:
            parts.append(_context_html(context))
    elif comparison:
        parts.append(block("Comparison", f"<p>{html.escape((comparison.get('gate') or {}).get('message', ''))}</p>"))
    if not stats.tails.empty:
        parts.append(block(f"p99 per load point ({len(stats.tails)} rows)", _table(stats.tails.to_dict(orient="records"), [
            ("suite", "suite"), ("replicate", "r"), ("point", "point"), ("bucket", "bucket"), ("quantity", "quantity"),
            # within one replicate: a descriptive band, not a confidence interval (requests are
            # autocorrelated); README "Statistics and comparisons"
            ("n_requests", "requests"), ("value", "p99"), ("ci_low", "band low (descriptive)"),
            ("ci_high", "band high (descriptive)"), ("coverage", "coverage if requests were independent"),
            ("n_required", "requests needed"), ("trustworthy", "enough"),
            ("note", "note")], "tails")))
    if cps:
        parts.append(block(f"Change points in the history ({len(cps)})", _table(cps, [
            ("suite", "suite"), ("metric", "metric"), ("case", "case"), ("run_id", "first run after"),
            ("change_utc", "date"), ("before_mean", "before"), ("after_mean", "after"), ("magnitude_pct", "Δ %"),
            ("floor_pct", "floor %"), ("alarm_run_id", "alarm at"), ("kind", "kind")], "cps")))
    st = run.status
    parts.append(block("Conditions", _table(st.get("conditions") or [], [
        ("type", "type"), ("status", "status"), ("reason", "reason"), ("message", "message"),
        ("lastTransitionTime", "time")], "conditions")))
    parts.append(block("Run and lineage", _table([{"k": k, "v": st.get(k)} for k in (
        "workload_type", "cadence", "variable_under_test", "selected_scheduler_path", "workload_spec_digest",
        "spec_digest", "artifact_manifest_digest", "created_utc", "started_utc", "finished_utc", "run_directory")],
        [("k", "field"), ("v", "value")], "meta")))
    return "".join(parts) + "</section>"


SHIFT_NOTE = ("baseline and candidate: the replicate medians, on every row. medians' change: candidate median ÷ "
              "baseline median − 1, shown where the baseline median is above 0 and the candidate's not below. "
              "Estimated shift: what the verdict and its interval are about — the Hodges–Lehmann estimate over "
              "replicates (the median of all candidate − baseline differences, as % of the baseline median, or of "
              "the ratios when every value is positive), except on a request percentile judged on pooled requests "
              "(shift of: pooled-request p99s, marked §), where it is the ratio of the two arms' "
              "pooled-request p99s (each arm's requests pooled over its replicates), given below the table. The "
              "shift and the medians' change differ when replicates spread widely, and where they disagree the "
              "shift, not the medians' ratio, is what was tested.")


def _medians_change(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row with ``medians_change_pct``, the change of the two medians the table shows,
    ``n_compared``, the replicates each arm compared (``5/4 ‡`` when some were left out), and
    ``shift_of``, what its estimated shift is of (replicates, or the pooled requests' p99s)."""
    from benchrun.stats.reading import POOLED_MARK, n_shown, pooled_shift

    out = []
    for r in rows:
        b, c = C.pick(r, "baseline_median"), C.pick(r, "candidate_median")
        ok = b is not None and c is not None and b > 0 and c >= 0
        out.append({**r, "medians_change_pct": (c / b - 1.0) * 100.0 if ok else None, "n_compared": n_shown(r),
                    "shift_of": f"pooled-request p99s {POOLED_MARK}" if pooled_shift(r) else
                    "replicates (Hodges–Lehmann)" if C.pick(r, "change_pct") is not None else None})
    return out


def _pooled_html(rows: list[dict[str, Any]]) -> str:
    """The footnotes of the rows marked §: the pooled-request p99s their shift is the ratio of."""
    from benchrun.stats.reading import pooled_notes

    notes = pooled_notes(rows)
    return ("<ul class='note'>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>") if notes else ""


def _left_out_html(rows: list[dict[str, Any]]) -> str:
    """The footnotes of the rows marked ‡: per suite, the replicates its comparison left out and why."""
    from benchrun.stats.reading import left_out_notes

    notes = left_out_notes(rows)
    if not notes:
        return ""
    return ("<p class='note'>‡ the medians, changes and tests of these rows are over the replicates compared, "
            "not every replicate of the run (the headline's n):</p><ul class='note'>"
            + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")


def _context_html(rows: list[dict[str, Any]]) -> str:
    """Context rows (telemetry, utilization, environment) in their own collapsed section, apart
    from the outcomes: shown as measured, with no verdict and in no multiple-testing family."""
    body = ("<p class='muted'>What the run's telemetry and environment did, beside the outcomes it explains: "
            "the change as measured (+ = the value went up) with its interval; no verdict, in no "
            "multiple-testing family. A spec's metrics.&lt;family&gt;.secondary makes one an outcome.</p>"
            + _table(_medians_change(rows), [
                ("metric", "metric"), ("baseline_median", "baseline"), ("candidate_median", "candidate"),
                ("unit", "unit"), ("medians_change_pct", "medians' change %"),
                ("change_pct", "estimated shift % (+ = up)"), ("change_low_pct", "CI low %"),
                            ("change_high_pct", "CI high %"), ("n_baseline", "n baseline"),
                            ("n_candidate", "n candidate"), ("note", "note")], "context"))
    count = f"{len(rows)} row" + ("s" if len(rows) != 1 else "")
    return (f"<details id='context'><summary>Context: telemetry, utilization, environment ({count}, "
            f"no verdict)</summary>{body}</details>")


STYLE = (
    "body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1100px;padding:0 1em;color:#222}"
    "h1{font-size:1.3em;margin:0 0 .4em}h2{margin-top:1.6em;border-bottom:1px solid #ddd}h3{margin:1em 0 .2em}"
    ".verdict{border:2px solid #999;border-left-width:10px;border-radius:6px;padding:.8em 1.2em}"
    ".verdict.ok{border-color:#1e8449}.verdict.bad{border-color:#c0392b}.verdict.warn{border-color:#d68910}"
    ".verdict dl{display:grid;grid-template-columns:max-content auto;gap:.25em 1em;margin:.4em 0}"
    ".verdict dt{color:#555}.verdict dd{margin:0}"
    ".badge{padding:1px 8px;border-radius:4px;font-weight:bold;background:#eee}"
    ".badge.ok{background:#d4efdf;color:#145a32}.badge.bad{background:#f5b7b1;color:#78281f}"
    ".badge.warn{background:#fdebd0;color:#7e5109}.badge.none{background:#eaecee;color:#333}"
    "table{border-collapse:collapse;font-size:13px;margin:.4em 0 1em}td,th{border:1px solid #ddd;padding:3px 8px;"
    "text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums}th{background:#f4f6f7}"
    ".muted{color:#777}.common{font-size:12px;color:#555}.note{color:#a04000}"
    ".v-regression{color:#c0392b;font-weight:bold}.v-improvement{color:#1e8449}.v-no_change{color:#2e86c1}"
    ".v-inconclusive{color:#7f8c8d}.v-suspected{color:#b9770e}img{max-width:100%}figure{margin:1em 0}figcaption{font-size:12px;color:#555}"
    "details{margin:.4em 0}summary{cursor:pointer;font-weight:bold}"
)


def write_report(run_dir: str | os.PathLike[str], *, stats: Any = None, figures_pending: bool | None = None) -> Path:
    """Write ``reports/<run_id>_report.html`` from the run's current status and the figure index.

    ``figures_pending`` (default: whether a figure worker is drawing this run's figures now)
    adds a line saying the figures follow."""
    from benchrun.stats.analysis import read_trial_statistics
    from benchrun.stats.load import load_run

    run = load_run(run_dir)
    rid = run.run_id
    stats = stats if stats is not None else read_trial_statistics(run.path)
    comparison = _read_comparison(run.path)
    try:
        index = json.loads(_index_path(run.path).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        index = {"figures": [], "sections": []}
    heads = C.headlines(stats, run.spec, comparison)
    figs = index.get("figures") or []

    def imgs(section: str) -> str:
        return "".join(_img(run.path, f) for f in figs if f["section"] == section)

    if figures_pending is None:
        from benchrun.report.workerpids import pending

        figures_pending = pending(run.path.parent.parent, rid)
    from benchrun.stats.validity import run_notes

    parts = [_verdict_html(C.verdict(run, comparison), run.status),
             _headline_html(heads, stats, bool(comparison and comparison.get("metrics")), run_notes(run.path))]
    titles = {"serving": "Serving: latency against throughput", "comparison": "Change against the baseline",
              "history": "History", "replicates": "Replicates"}
    for section, title in titles.items():
        body = imgs(section)
        if body:
            parts.append(f"<section id='fig-{section}'><h2>{title}</h2>{body}</section>")
    for sec in index.get("sections") or []:
        parts.append(f"<section><h2>{html.escape(sec['title'])}</h2>{sec['html']}"
                     + "".join(_img(run.path, f) for f in sec.get("figures") or []) + "</section>")
    if figures_pending:
        parts.append("<p class='note' id='figures-pending'>The figures are being drawn (a few seconds after the "
                     "run); reload this page.</p>")
    elif not any(f["section"] == "history" for f in figs) and (said := C.no_history_figure(index.get("history"))):
        parts.append(f"<p class='muted' id='no-history'>History: {html.escape(said)}</p>")
    parts.append(_details_html(run, stats, comparison, index.get("change_points") or []))
    doc = (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(rid)}: "
           f"{html.escape(str(run.status.get('phase')))}</title><style>{STYLE}</style></head>"
           f"<body>{''.join(parts)}</body></html>")
    out = atomic_write_text(run.path / "reports" / f"{rid}_report.html", doc)
    _record_report_ref(run.path, out)
    log.info("report written to %s (%d figures)", out, len(figs))
    return out


def _record_report_ref(run_path: Path, report: Path) -> None:
    """Record the report's path as status.json's ``report_ref``: the BenchmarkRun's reportRef is
    read from it in every pod, and the operator's pulls only status.json, never ``reports/``."""
    from benchrun.rundir import RunDir

    try:
        rd = RunDir(run_path.parent.parent, run_path.name)
    except BenchrunError:
        return  # not named as a run directory is: a copy somewhere else
    if rd.path.resolve() != run_path.resolve() or not rd.exists():
        return  # a run directory outside a home (a copy): no status of a live run to record it in
    with rd.status_lock():
        if rd.read_status().get("report_ref") != str(report):
            rd.update_status(report_ref=str(report))


def build_report(run_dir: str | os.PathLike[str], *, home: Path | None = None, stats: Any = None) -> Path:
    """Draw the figures and write the report; return the report's path."""
    if stats is None:
        from benchrun.stats.analysis import read_trial_statistics

        stats = read_trial_statistics(run_dir)
    render_figures(run_dir, home=home, stats=stats)
    return write_report(run_dir, stats=stats)


__all__ = ["build_report", "render_figures", "report_outputs", "write_report", "EXTRA_SECTIONS", "ReportSection", "SectionContext"]
