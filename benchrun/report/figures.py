"""The report's figures (matplotlib, Agg): replicate strip plots, comparison forest plot,
latency–throughput curves with SLO lines, history with change points. Each returns PNG bytes."""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")
# Labels are data (suite, metric and case names as written): a `$` in one is a dollar, not math text
# (`c=$_$` stopped the report with a ParseSyntaxException; `price=$1-$2` was drawn as italic `price=1-2`).
matplotlib.rcParams["text.parse_math"] = False
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

if TYPE_CHECKING:
    import pandas as pd

VERDICT_COLORS = {"regression": "#c0392b", "improvement": "#1e8449", "no_change": "#2e86c1",
                  "inconclusive": "#7f8c8d"}


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    # tight_layout already placed everything; bbox_inches="tight" would measure it all again.
    fig.savefig(buf, format="png", dpi=96)
    plt.close(fig)
    return buf.getvalue()


def strip_plot(replicates: "pd.DataFrame", summary: "pd.DataFrame", title: str, max_panels: int = 24) -> bytes:
    """One panel per (case, metric): replicate values (outliers in red, kept), median and its interval."""
    keys = list(summary[["case", "metric"]].itertuples(index=False, name=None))[:max_panels]
    cols = min(4, max(1, len(keys)))
    rows = math.ceil(len(keys) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False)
    rng = np.random.default_rng(0)  # jitter only; fixed so figures are reproducible
    for ax, (case, metric) in zip(axes.flat, keys):
        r = replicates[(replicates["case"] == case) & (replicates["metric"] == metric)]
        s = summary[(summary["case"] == case) & (summary["metric"] == metric)].iloc[0]
        x = rng.uniform(-0.15, 0.15, size=len(r))
        out = r["outlier"].to_numpy(bool)
        ax.scatter(x[~out], r["value"][~out], s=22, color="#2e86c1")
        if out.any():
            ax.scatter(x[out], r["value"][out], s=40, color="#c0392b", marker="x")
        ax.axhline(s["median"], color="black", lw=1)
        if np.isfinite(s.get("median_ci_low", np.nan)):
            ax.axhspan(s["median_ci_low"], s["median_ci_high"], color="#f5b041", alpha=0.3)
        ax.set_xlim(-0.5, 0.5)
        ax.set_xticks([])
        ax.set_title(f"{metric}" + (f"\n[{case}]" if case else ""), fontsize=8)
        ax.set_ylabel(s["unit"], fontsize=7)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Line2D([], [], ls="", marker="o", color="#2e86c1", label="replicate"),
               Line2D([], [], ls="", marker="x", color="#c0392b", label="MAD outlier (|z| > 3.5, kept)"),
               Line2D([], [], color="black", label="median"),
               Patch(color="#f5b041", alpha=0.3, label="median interval (coverage in the table)")]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=7, frameon=False)
    fig.suptitle(title, fontsize=10)
    # Fixed margins instead of tight_layout: measuring every panel's text dominated the
    # report's time (several seconds per run on a small machine) for a grid this regular.
    height = 2.6 * rows
    fig.subplots_adjust(left=0.07, right=0.98, top=1 - 0.7 / height, bottom=0.45 / height,
                        wspace=0.45, hspace=0.75)
    return _png(fig)


NEUTRAL = "#566573"  # secondary rows: their verdict is said, not coloured (only gating rows decide the run)
# the axis spans measured ratios 1/4 .. 4 (-75 % .. +300 %); wider intervals are clipped, arrows mark it
FOREST_LIMITS = (0.25, 4.0)


def forest_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the forest plot draws, one dict per outcome row, gating rows first: the change as
    measured in % (+ = the value went up) with its interval, better/worse by the metric's
    direction (:mod:`benchrun.stats.reading`, the convention of the CLI, the JSON and the
    headline), and the colour: by verdict on gating rows, neutral on secondary ones. Context
    rows (role ``context``: no verdict) are left out."""
    from benchrun.stats.reading import change_interval_of, change_of

    out = []
    for r in rows:
        if r.get("role") == "context":
            continue
        pct, bw = change_of(r)
        if pct is None or math.isnan(pct):
            continue  # no change in % to place on the axis: :func:`forest_not_drawn` names it
        # a -100 % change (100 → 0) and an interval reaching past the axis are clipped to its end
        # and marked ◀ / ▶ (:func:`_to_ratio`); a withheld interval leaves the point alone
        lo, hi = (None if v is None or math.isnan(float(v)) else float(v) for v in change_interval_of(r))
        gating = bool(r.get("gating"))
        verdict = str(r.get("verdict") or "")
        out.append({"metric": str(r["metric"]), "gating": gating, "change_pct": float(pct),
                    "change_low_pct": lo, "change_high_pct": hi, "better_worse": bw,
                    "verdict": verdict, "delta_pct": r.get("delta_pct"), "scale": r.get("scale"),
                    "color": VERDICT_COLORS.get(verdict, "black") if gating else NEUTRAL})
    out.sort(key=lambda r: not r["gating"])  # stable: gating first, each group in its own order
    return out


def forest_not_drawn(rows: list[dict[str, Any]]) -> list[str]:
    """The outcome rows the forest plot cannot place, each with why: ``metric (baseline median 0:
    no change in %; difference +5 count, regression)``, for the figure's caption."""
    from benchrun.console import number
    from benchrun.stats.reading import change_of

    out = []
    for r in rows:
        if r.get("role") == "context":
            continue
        pct, _ = change_of(r)
        if pct is not None and not math.isnan(pct):
            continue
        base = r.get("baseline_median")
        why = (f"baseline median {number(float(base))}: no change in %"
               if isinstance(base, (int, float)) and not math.isnan(float(base)) and float(base) <= 0
               else "the comparison gave no change in %")
        diff = r.get("difference")
        if isinstance(diff, (int, float)) and math.isfinite(float(diff)):
            why += f"; difference {'+' if diff > 0 else ''}{number(float(diff))} {r.get('unit') or ''}".rstrip()
        if r.get("verdict"):
            why += f", {str(r['verdict']).replace('_', ' ')}" + ("" if r.get("gating") else " (not gating)")
        out.append(f"{r.get('metric')} ({why})")
    return out


def _to_ratio(pct: float) -> float:
    lo_lim, hi_lim = FOREST_LIMITS
    ratio = 1.0 + pct / 100.0 if np.isfinite(pct) else (hi_lim if pct > 0 else lo_lim)
    return float(min(max(ratio, lo_lim), hi_lim))


def forest_plot(rows: list[dict[str, Any]], title: str) -> bytes:
    """The change as measured (%, + = the value went up) with its interval per outcome, the ±δ
    band, and beside each row its change and whether that is better or worse.

    Outcomes only (context rows have no verdict and are left out), gating rows first and
    coloured by verdict; secondary rows neutral (their verdict is in the label, not in red or
    green); the axis at the top so it is on screen with the first rows. The axis is the
    measured ratio on a log scale (so +100 % and -50 % are as far from 0), labelled in %."""
    from matplotlib.lines import Line2D

    rows = forest_rows(rows)
    lo_lim, hi_lim = FOREST_LIMITS
    height = 0.35 * max(len(rows), 3) + 1.9
    fig, ax = plt.subplots(figsize=(9, height))
    for i, r in enumerate(rows):
        d = r["delta_pct"]
        if r["scale"] != "absolute" and d is not None and np.isfinite(float(d)):
            d = float(d) / 100.0  # the no-change band: log(1 + δ) either side on the analysis scale
            ax.fill_betweenx([i - 0.4, i + 0.4], 1 / (1 + d), 1 + d, color="#d5dbdb", alpha=0.7, lw=0)
        low, high = r["change_low_pct"], r["change_high_pct"]
        if low is not None and high is not None:
            ax.plot([_to_ratio(low), _to_ratio(high)], [i, i], color=r["color"], lw=2)
        ax.plot([_to_ratio(r["change_pct"])], [i], "o" if r["gating"] else "s", color=r["color"], ms=6)
        if 1 + min(r["change_pct"], low if low is not None else math.inf) / 100 < lo_lim:
            ax.annotate("◀", (lo_lim, i), fontsize=7, va="center", ha="left")
        if 1 + max(r["change_pct"], high if high is not None else -math.inf) / 100 > hi_lim:
            ax.annotate("▶", (hi_lim, i), fontsize=7, va="center", ha="right")
        said = f"{r['change_pct']:+.1f} % {r['better_worse']}".rstrip()
        if low is None or high is None:
            said += " (no interval)"
        if not r["gating"] and r["verdict"]:
            said += f" ({r['verdict'].replace('_', ' ')}, not gating)"
        ax.annotate(said, (1.01, i), xycoords=("axes fraction", "data"), fontsize=7, va="center", ha="left",
                    color=r["color"], annotation_clip=False).set_in_layout(False)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlim(lo_lim, hi_lim)
    ticks = [-75, -50, -20, 0, 25, 100, 300]
    ax.set_xticks([1 + t / 100 for t in ticks])
    ax.set_xticklabels([f"{t:+d} %" if t else "0" for t in ticks], fontsize=7)
    ax.minorticks_off()
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([("★ " if r["gating"] else "") + r["metric"] for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    ax.set_xlabel("change as measured, candidate vs baseline (+ = the value went up)\nbetter/worse beside each "
                  "row, by the metric's direction; grey: ±δ no-change band", fontsize=8)
    handles = [Line2D([], [], color=color, lw=2, marker="o", label=f"{verdict.replace('_', ' ')} (gating)")
               for verdict, color in VERDICT_COLORS.items()]
    handles.append(Line2D([], [], color=NEUTRAL, lw=2, marker="s", label="secondary outcome (not gating)"))
    fig.legend(handles=handles, fontsize=7, loc="lower center", ncol=5, frameon=False)
    ax.set_title(title + "  (★ gating)", fontsize=10)
    fig.tight_layout(rect=(0, 0.45 / height, 0.74, 1))
    return _png(fig)


# An SLO more than this many times the data's largest value is not drawn to scale: the axis
# follows the data (1–4 ms points under a 200 ms SLO would otherwise be a flat line at zero).
SLO_OFF_SCALE = 3.0


def _slo_line(ax: Any, slo: float, data_max: float, label: str) -> None:
    """The SLO as a dashed line when it is near the data; else the axis stays on the data and
    the SLO is named at the top as off-scale."""
    if not np.isfinite(data_max) or data_max <= 0 or slo <= SLO_OFF_SCALE * data_max:
        ax.axhline(slo, color="#c0392b", ls="--", lw=1, label=label)
        return
    ax.set_ylim(0, data_max * 1.15)
    ax.plot([], [], color="#c0392b", ls="--", lw=1, label=f"{label} (off scale: ×{slo / data_max:.0f} the data)")
    ax.annotate(f"▲ {label}: above, off scale", (0.5, 0.98), xycoords="axes fraction", ha="center", va="top",
                fontsize=7, color="#c0392b")


def slo_unit(name: str) -> str:
    """The unit of a per-request SLO (``metrics.inference.slo``), read off its name as the metric
    vocabulary writes units: ``ttft_ms``, ``e2e_ms`` → ms; ``decode_ms_per_token`` → ms/token."""
    for suffix, unit in (("_ms_per_token", "ms/token"), ("_ms", "ms"), ("_s", "s")):
        if name.endswith(suffix):
            return unit
    return ""


INVALID_LABEL = "judged invalid (hollow; not in the curve)"


def latency_throughput(serving: "pd.DataFrame", slo: dict[str, float], title: str) -> bytes:
    """Per bucket: p99 latency against output throughput over the load points, SLO lines dashed.

    Rows flagged in an ``invalid`` column (a load point the load generator judged invalid beyond
    its request count: :func:`benchrun.stats.validity.invalid_point_rows`) are left out of the
    curve, as the history and the comparison leave them out; a load with no valid replicate left
    is drawn hollow (the median of its invalid ones), unjoined."""
    quantities = [q for q in ("ttft_ms_p99", "e2e_ms_p99", "decode_ms_per_token_p99") if q in serving.columns]
    buckets = sorted(serving["bucket"].dropna().unique()) if "bucket" in serving.columns else ["all"]
    fig, axes = plt.subplots(1, max(len(quantities), 1), figsize=(4.2 * max(len(quantities), 1), 3.4),
                             squeeze=False)
    import pandas as pd

    xcol = "tokens_per_second" if "tokens_per_second" in serving.columns else "request_throughput_rps"
    bad = (serving["invalid"].fillna(False).astype(bool) if "invalid" in serving.columns
           else pd.Series(False, index=serving.index))
    for ax, q in zip(axes.flat, quantities):
        labelled = False
        for b in buckets:
            sel = serving["bucket"] == b if "bucket" in serving.columns else pd.Series(True, index=serving.index)
            g, g_bad = serving[sel], bad[sel]
            agg = g[~g_bad].groupby("offered_load", as_index=False)[[xcol, q]].median().sort_values("offered_load")
            color = ax.plot(agg[xcol], agg[q], marker="o", label=f"bucket {b}")[0].get_color()
            left = g[g_bad & ~g["offered_load"].isin(agg["offered_load"])]
            hollow = left.groupby("offered_load", as_index=False)[[xcol, q]].median()
            if len(hollow):
                ax.plot(hollow[xcol], hollow[q], ls="", marker="o", mfc="none", color=color,
                        label="_nolegend_" if labelled else INVALID_LABEL)
                labelled = True
            for frame, mark in ((agg, ""), (hollow, " invalid")):
                for _, row in frame.iterrows():
                    ax.annotate(f"{row['offered_load']:g}{mark}", (row[xcol], row[q]), fontsize=6,
                                textcoords="offset points", xytext=(3, 3))
        base = q.rsplit("_p99", 1)[0]
        if base in slo:
            label = f"SLO {base} {slo[base]:g} {slo_unit(base)}".rstrip()
            _slo_line(ax, slo[base], float(np.nanmax(serving[q].to_numpy(float))), label)
        ax.set_xlabel(xcol.replace("_", " "))
        ax.set_ylabel(q)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle(title + " (median over replicates; labels = offered load)", fontsize=10)
    fig.tight_layout()
    return _png(fig)


HISTORY_MIN_SPAN_PCT = 2.0


def _floor_span(ax: Any, values: "np.ndarray") -> None:
    """No offset on the y-axis, and at least ±HISTORY_MIN_SPAN_PCT % of the median shown."""
    ax.ticklabel_format(axis="y", useOffset=False, style="plain")
    finite = values[np.isfinite(values)]
    if not finite.size:
        return
    mid = float(np.median(finite))
    half = abs(mid) * HISTORY_MIN_SPAN_PCT / 100.0
    lo, hi = ax.get_ylim()
    if half > 0 and hi - lo < 2 * half:
        ax.set_ylim(min(lo, mid - half), max(hi, mid + half))


def history_plot(history: "pd.DataFrame", cps: "pd.DataFrame", title: str, current_run: str | None = None,
                 series: list[tuple[str, str, str]] | None = None, max_panels: int = 12) -> bytes:
    """Per series: replicate medians by run date, the current run starred, change points marked;
    each y-axis in plain numbers (no offset) over at least ±``HISTORY_MIN_SPAN_PCT`` % of the
    series' median, so a 0.02 % wobble is not drawn full height like a 75 % change."""
    import matplotlib.dates as mdates
    import pandas as pd

    keys = series or list(history[["suite", "case", "metric"]].drop_duplicates().itertuples(index=False, name=None))
    keys = keys[:max_panels]
    cols = min(3, max(1, len(keys)))
    rows = math.ceil(len(keys) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.6 * rows), squeeze=False)
    for ax, (suite, case, metric) in zip(axes.flat, keys):
        h = history[(history["suite"] == suite) & (history["case"] == case) & (history["metric"] == metric)]
        h = h.sort_values(["created_utc", "run_id"], kind="stable").reset_index(drop=True)
        when = pd.to_datetime(h["created_utc"], utc=True, errors="coerce").dt.tz_localize(None)
        ax.plot(when, h["median"], marker=".", color="#2e86c1")
        here = np.nonzero((h["run_id"] == current_run).to_numpy())[0]
        if here.size:
            ax.plot(when.iloc[here], h["median"].to_numpy()[here], "*", color="#f39c12", ms=14, label="this run")
        c = cps[(cps["suite"] == suite) & (cps["case"] == case) & (cps["metric"] == metric)] if len(cps) else cps
        for _, cp in c.iterrows():
            i = int(cp["change_index"])
            if 0 < i < len(when):
                at = when.iloc[i - 1] + (when.iloc[i] - when.iloc[i - 1]) / 2
                ax.axvline(at, color=VERDICT_COLORS.get(cp["kind"], "black"), ls="--")
                ax.annotate(f"{cp['magnitude_pct']:+.1f}%", (when.iloc[i], cp["after_mean"]), fontsize=7)
        locator = mdates.AutoDateLocator(minticks=2, maxticks=5)  # 4 finds no interval for 85-110 s spans (a warning)
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
        ax.set_title(f"{suite}/{metric}" + (f" [{case}]" if case else ""), fontsize=8)
        _floor_span(ax, h["median"].to_numpy(dtype=float))
        unit = h["unit"].iloc[0] if "unit" in h.columns and len(h) else ""
        ax.set_ylabel(unit, fontsize=7)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return _png(fig)
