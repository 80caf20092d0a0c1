"""What the report says, as plain data: the verdict, the headline per suite, the history to plot.

No matplotlib and no HTML here. Field names of the statistics (owned by benchrun.stats, which
changes) are read through the small adapters at the top, so a renamed column costs one line.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from benchrun.console import number
from benchrun.errors import BenchrunError

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    import pandas as pd

    from benchrun.stats.analysis import TrialStatistics
    from benchrun.stats.load import RunInfo


# --- adapters over the statistics' fields ---------------------------------------------------

def pick(row: dict[str, Any], *names: str, default: Any = None) -> Any:
    """The first of ``names`` present in ``row`` with a real value (NaN and None are absent)."""
    for n in names:
        v = row.get(n)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        return v
    return default


def interval_of(row: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
    """(low, high, coverage) of a summary row's median interval."""
    return (pick(row, "median_ci_low", "ci_low"), pick(row, "median_ci_high", "ci_high"),
            pick(row, "median_ci_coverage", "ci_coverage", "coverage"))


def comparison_key(rec: dict[str, Any]) -> tuple[str, str, str]:
    """(suite, case, metric name) of one comparison record."""
    return (str(pick(rec, "suite", default="")), str(pick(rec, "case", default="")),
            str(pick(rec, "name", "metric_name", default=rec.get("metric", ""))))


def is_gating(rec: dict[str, Any]) -> bool:
    return bool(pick(rec, "gating", "is_gating", default=False))


def gating_regressions(metrics: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(confirmed, suspected but not confirmed) among a comparison's gating rows with verdict
    ``regression``: a suspect keeps its first-round verdict when the round did not confirm it (or
    gave no answer), so the verdict alone overcounts. Rows that record no ``confirmation`` at all
    (documents from before it was recorded) count as confirmed, as they were read then."""
    bad = [m for m in metrics if is_gating(m) and m.get("verdict") == "regression"]
    return [m for m in bad if not unconfirmed(m)], [m for m in bad if unconfirmed(m)]


def unconfirmed(rec: dict[str, Any]) -> bool:
    """A ``regression`` row the confirmation round did not confirm (``not_confirmed``, ``failed``,
    ``not_run``): it keeps its first-round verdict, but the run's verdict does not count it confirmed."""
    return rec.get("verdict") == "regression" and rec.get("confirmation", "confirmed") != "confirmed"


# --- headline metrics ----------------------------------------------------------------------

# What a performance engineer reads first from the built-in suites that the spec's primary
# metrics (serving and training outcomes) do not cover. A suite not listed shows its first
# two metrics.
SUITE_HEADLINE: dict[str, tuple[str, ...]] = {
    "gemm": ("tflops",),
    "membw": ("bandwidth_median_gb_per_s",),
    "fio": ("bandwidth_mib_per_s", "p99_clat_ms"),
    "allreduce": ("busbw_gb_per_s", "p50_latency_us"),
    "dataloader": ("samples_per_s", "p99_batch_latency_ms"),
    "job_startup": ("launch_to_first_measurement_p50_s",),
}


def metric_name(entry: str) -> str:
    from benchrun.spec.rules import metric_name as _name

    return _name(entry)


def primary_metrics(spec: dict[str, Any]) -> list[str]:
    """The spec's primary metrics in the order written (enabled families)."""
    out: list[str] = []
    for fam in ((spec.get("spec") or {}).get("metrics") or {}).values():
        if isinstance(fam, dict) and fam.get("enabled"):
            # by metric name: a primary qualified as suite/metric[case] still heads its suite
            out += [n for m in fam.get("primary") or [] if (n := metric_name(str(m))) not in out]
    return out


def primary_selectors(spec: dict[str, Any]) -> list[str]:
    """The spec's primary metrics as written (``ttft_ms`` or ``serving_workflow/ttft_ms[c=4]``)."""
    out: list[str] = []
    for fam in ((spec.get("spec") or {}).get("metrics") or {}).values():
        if isinstance(fam, dict) and fam.get("enabled"):
            out += [str(m) for m in fam.get("primary") or [] if str(m) not in out]
    return out


def headline_names(suite: str, metrics: list[str], primary: list[str]) -> list[str]:
    """The metrics of ``suite`` that lead its headline: primaries it reports, else its known
    headline metrics, else its first two."""
    names = [m for m in primary if m in metrics]
    if names:
        return names
    names = [m for m in SUITE_HEADLINE.get(suite, ()) if m in metrics]
    return names or metrics[:2]


def suite_order(spec: dict[str, Any], suites: list[str], with_primary: set[str]) -> list[str]:
    """Suites that report primary metrics first, the end-to-end layer before the component
    layer (the customer's outcome leads), then the rest in the order the spec runs them."""
    layers = ((spec.get("spec") or {}).get("layers")) or []
    pos: dict[str, tuple[int, int]] = {}
    for li, layer in enumerate(layers):
        for si, s in enumerate(layer.get("suites") or []):
            pos.setdefault(str(s.get("name")), (li, si))
    uniq = list(dict.fromkeys(suites))
    return sorted(uniq, key=lambda s: (s not in with_primary, -pos.get(s, (0, 0))[0] if s in with_primary else
                                       pos.get(s, (99, 0))[0], pos.get(s, (99, 0))[1], uniq.index(s)))


@dataclass
class HeadlineRow:
    suite: str
    case: str
    metric: str
    unit: str
    direction: str
    n: int
    median: float
    low: float | None
    high: float | None
    coverage: float | None
    min_value: float = math.nan
    max_value: float = math.nan
    change: dict[str, Any] | None = None  # the comparison record, when compared
    gating: bool = False  # a primary selector names this suite/case/metric

    @property
    def informative(self) -> bool:
        """False when the interval is just the replicates' range (too few replicates to say more)."""
        return self.low is not None and self.high is not None and self.n > 0 and not (
            self.low <= self.min_value and self.high >= self.max_value)


    @property
    def compared_n(self) -> int | None:
        """The candidate replicates the comparison compared, when that is not this row's n (its
        contended replicates excluded, say): the change beside the median is over those."""
        nc = pick(self.change or {}, "n_candidate")
        return int(nc) if nc is not None and int(nc) != self.n else None

    def n_text(self) -> str:
        """``5``, or ``5 (4 compared) ‡`` when the change is over fewer replicates than the median,
        ``5 ‡`` when the comparison left baseline replicates out or kept contended ones."""
        from benchrun.stats.reading import LEFT_OUT_MARK, left_out

        nc = self.compared_n
        if nc is not None:
            return f"{self.n} ({nc} compared) {LEFT_OUT_MARK}"
        return f"{self.n} {LEFT_OUT_MARK}" if left_out(self.change or {}) else str(self.n)

    def compared_note(self) -> str:
        """Why :meth:`n_text` is marked: which replicates the comparison left out (of either arm),
        or kept though contended, and its own median."""
        from benchrun.stats.reading import LEFT_OUT_MARK

        label, body, _ = self._compared()
        return f"{LEFT_OUT_MARK} {label}: {body}" if body else ""

    def _compared(self) -> tuple[str, str, bool]:
        """(row label, why n is marked or "", whether the words are this row's own — its
        comparison median — rather than its suite's)."""
        from benchrun.stats.reading import left_out

        why = left_out(self.change or {})
        nc = self.compared_n
        label = (self.change or {}).get("metric") or f"{self.suite}/{self.metric}" + (f"[{self.case}]" if self.case else "")
        if nc is None and not why:
            return label, "", False
        if nc is None:
            nb = pick(self.change or {}, "n_baseline")
            return label, ("the change against the baseline is over "
                           + (f"{int(nb)} baseline and " if nb is not None else "") + f"{self.n} candidate replicates: {why}"), False
        med = pick(self.change or {}, "candidate_median")
        return label, (f"the change against the baseline is over the {nc} replicates the comparison kept, not all {self.n}"
                       + (f" (their median {number(float(med))})" if med is not None else "") + (f": {why}" if why else "")), True


def compared_notes(heads: list["SuiteHeadline"]) -> list[str]:
    """The headline's ‡ footnotes: one per row that has words of its own, one per suite for the
    rows whose words are the suite's (ten rows of a suite whose baseline lost a contended
    replicate printed the same line ten times)."""
    from benchrun.stats.reading import LEFT_OUT_MARK

    out: list[str] = []
    shared: dict[tuple[str, str], list[str]] = {}
    for h in heads:
        for r in h.rows:
            label, body, own = r._compared()
            if not body:
                continue
            if own:
                out.append(f"{LEFT_OUT_MARK} {label}: {body}")
            else:
                shared.setdefault((r.suite, body), []).append(label)
    for (suite, body), labels in shared.items():
        out.append(f"{LEFT_OUT_MARK} {labels[0] if len(labels) == 1 else f'{suite} ({len(labels)} rows)'}: {body}")
    return out


@dataclass
class SuiteHeadline:
    suite: str
    rows: list[HeadlineRow] = field(default_factory=list)


def coverage_said(heads: list[SuiteHeadline], confidence: float) -> tuple[str, bool]:
    """What the headline says of its intervals: ``93.8% interval, below the 95% asked: too few
    replicates for it`` when every row has one coverage (at n = 5 the interval is [min, max], 0.9375),
    ``interval coverage 93.8%–97.9% (per row)`` when they differ; True then: show each row's.
    ``no interval (n = 1)`` when no row has one (a median of one replicate has none)."""
    rows = [r for h in heads for r in h.rows]
    if rows and not any(has_interval(r) for r in rows):
        ns = sorted({r.n for r in rows})
        return f"no interval (n = {ns[0] if len(ns) == 1 else f'{ns[0]}–{ns[-1]}'})", False
    covs = sorted({f"{r.coverage:.1%}": r.coverage for h in heads for r in h.rows
                   if r.low is not None and r.coverage is not None and math.isfinite(r.coverage)}.items(),
                  key=lambda kv: kv[1])
    if not covs:
        return f"{confidence:.0%} interval", False
    (lo_text, lo), (hi_text, _) = covs[0], covs[-1]
    text = f"{lo_text} interval" if len(covs) == 1 else f"interval coverage {lo_text}–{hi_text} (per row)"
    if lo < confidence - 1e-9:
        text += f", {'some ' if len(covs) > 1 else ''}below the {confidence:.0%} asked: too few replicates for it"
    return text, len(covs) > 1


def has_interval(row: HeadlineRow) -> bool:
    """Whether a headline row has a median interval (none below 2 replicates)."""
    return row.low is not None and row.high is not None


def headlines(stats: "TrialStatistics", spec: dict[str, Any],
              comparison: dict[str, Any] | None) -> list[SuiteHeadline]:
    """One headline per suite, in run order, with the change against the baseline when compared."""
    if stats.summary.empty:
        return []
    from benchrun.stats.compare import gating_mask

    primary = primary_metrics(spec)
    selectors = primary_selectors(spec)
    changes = {comparison_key(r): r for r in (comparison or {}).get("metrics") or []}
    out: list[SuiteHeadline] = []
    rows = stats.summary.to_dict(orient="records")
    for suite in suite_order(spec, [r["suite"] for r in rows], {r["suite"] for r in rows if r["metric"] in primary}):
        mine = [r for r in rows if r["suite"] == suite]
        names = headline_names(suite, list(dict.fromkeys(r["metric"] for r in mine)), primary)
        sh = SuiteHeadline(suite)
        for name in names:
            for r in (r for r in mine if r["metric"] == name):
                lo, hi, cov = interval_of(r)
                sh.rows.append(HeadlineRow(
                    suite, str(r.get("case") or ""), name, str(r.get("unit") or ""), str(r.get("direction") or ""),
                    int(r.get("n") or 0), float(r["median"]), lo, hi, cov,
                    float(pick(r, "min", default=math.nan)), float(pick(r, "max", default=math.nan)),
                    changes.get((suite, str(r.get("case") or ""), name)),
                    bool(gating_mask([(suite, str(r.get("case") or ""), name)], selectors)[0])))
        out.append(sh)
    return out


# --- the verdict ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    phase: str
    outcome: str | None
    class_requested: str | None
    class_granted: str | None
    regressions: str  # "none", "2 confirmed" (", 1 suspected, not confirmed"), "1 suspected, not confirmed", "not compared"
    regression_level: str  # ok | bad | warn | none (for the colour)
    baseline: str | None
    against: str  # one sentence on what was compared
    replicates: str  # "48 launches: 48 ok, 0 failed"
    problems: list[str]
    overridden: str = ""  # spec paths the gate let through besides the variable, and by whom


def _launch_counts(run: "RunInfo") -> tuple[int, int, int]:
    """(ok, failed, launched) replicates: the layers' counts in status.json, or — before any layer
    ended (a run canceled or still running) — the launcher's record of each launch so far."""
    layers = run.status.get("layers") or {}
    if layers:
        return (sum(int(v.get("ok", 0)) for v in layers.values()), sum(int(v.get("failed", 0)) for v in layers.values()),
                sum(int(v.get("launches", 0)) for v in layers.values()))
    from benchrun.stats.load import launch_statuses

    try:
        said = launch_statuses(run.path) or {}
    except BenchrunError:
        said = {}
    values = list(said.values())
    return values.count("ok"), values.count("failed"), len(values)


def verdict(run: "RunInfo", comparison: dict[str, Any] | None) -> Verdict:
    from benchrun.stats.reading import not_shown

    st = run.status
    ok, failed, launches = _launch_counts(run)
    phase = st.get("phase")
    if comparison is None and phase not in (None, "Succeeded"):
        regressions, level, baseline = "not compared", "none", None
        against = f"Not compared: the run ended {phase} before its comparison."
    elif comparison is None:
        regressions, level, baseline = "not compared", "none", None
        against = "No baseline was resolved for this run; `benchrun promote RUN_ID --alias NAME` publishes one."
    elif not (comparison.get("gate") or {}).get("passed", True):
        regressions, level, baseline = "not compared", "warn", comparison.get("baseline")
        gate = comparison.get("gate") or {}
        against = (f"Not comparable, nothing judged: {gate.get('message', '')}" if gate.get("comparable") is False
                   else f"Refused by the one-variable gate: {gate.get('message', '')}")
        if comparison.get("confirmation") == "not_confirmed":
            against += (" A confirmation round ran and did not confirm the suspected regression; its rows and "
                        "launches are in the comparison document.")
    else:
        baseline = comparison.get("baseline")
        cond = comparison.get("condition") or {}
        confirmed, unconfirmed = gating_regressions(comparison.get("metrics") or [])
        n_gating = sum(1 for m in comparison.get("metrics") or [] if is_gating(m))
        if not n_gating:
            regressions, level = "nothing gates (no primary metric in this run)", "none"
        elif cond.get("status") == "True":
            regressions, level = f"{len(confirmed)} confirmed", "bad"
            if unconfirmed:
                regressions += f", {len(unconfirmed)} suspected, not confirmed"
        elif confirmed or unconfirmed:
            regressions, level = f"{len(confirmed) + len(unconfirmed)} suspected, not confirmed", "warn"
        elif unshown := [m for m in comparison.get("metrics") or [] if is_gating(m) and not_shown(m)]:
            # nothing regressed, but not everything was shown within its margin (NoRegressionShown)
            regressions, level = (f"none shown; {len(unshown)} of {n_gating} not shown within the margin either "
                                  f"({', '.join(sorted({str(m.get('verdict')) for m in unshown}))}: see each MDE)"), "warn"
        elif cond.get("reason") == "NoRegressionShown":
            # nothing regressed in what was tested, but a primary went untested or was compared on
            # contended replicates kept: the condition says which, and the badge is not the all-clear
            said = str(cond.get("message") or "").removeprefix("no gating metric was shown to regress, ")
            regressions, level = f"none shown; {said}", "warn"
        else:
            regressions, level = "none", "ok"
        against = (f"Against baseline {baseline} ({(comparison.get('gate') or {}).get('message', '')}); "
                   f"{sum(1 for m in comparison.get('metrics') or [] if is_gating(m))} gating metrics.")
    problems = [f"{c['type']}: {c.get('message', '')}" for c in st.get("conditions") or []
                if c.get("status") == "False" and c.get("type") != "RegressionDetected"]
    gate = (comparison or {}).get("gate") or {}
    allowed = [str(a) for a in gate.get("allowed_differences") or []]
    overridden = (f"{', '.join(allowed)} (allowed by {gate.get('allowed_by') or '--allow-differences'})"
                  if allowed else "")
    return Verdict(str(st.get("phase") or "unknown"), st.get("outcome"), st.get("benchmark_class_requested"),
                   st.get("benchmark_class_granted"), regressions, level, baseline, against,
                   f"{launches} launches: {ok} ok, {failed} failed", problems, overridden)


# --- history -------------------------------------------------------------------------------

def history_for(run: "RunInfo", stats: "TrialStatistics", home: Any) -> "pd.DataFrame":
    """Replicate medians of earlier runs of this workload on this hardware, plus this run.

    The run under report is always in its own history (its status may still say Analyzing
    when the figures are drawn, and the history table keeps only finished runs). With shared state
    the earlier runs are those the shared prefix holds (a run-worker pod's home holds only this run:
    its history figure showed this run alone)."""
    import pandas as pd

    from benchrun.stats.changepoint import gather_history, hardware_key, history_table, run_medians

    wd = run.status.get("workload_spec_digest")
    try:  # (no workload digest: no earlier run can match, and no shared run is read for nothing)
        hist = gather_history(home, cadences=None, workload=wd) if wd else history_table(home, cadences=None)
    except BenchrunError as exc:  # the shared state unreachable: a figure must not fail the report, nor the run
        log.warning("report history: the shared runs could not be read (%s); this home's runs only", exc)
        hist = history_table(home, cadences=None, workload=wd)
    hk = hardware_key(run.environment)
    if not hist.empty:
        hist = hist[(hist["workload_spec_digest"] == wd) & (hist["hardware_key"] == hk)]
        hist = hist[hist["run_id"] != run.run_id]
    if not stats.summary.empty:  # this run's rows by the history's own rule (invalid replicates left out)
        mine = run_medians(run)
        # (concatenating an empty frame is deprecated in pandas: take this run's rows alone)
        hist = pd.concat([hist, mine], ignore_index=True) if len(hist) and len(mine) else (hist if len(hist) else mine)
    return hist.sort_values(["created_utc", "run_id"], kind="stable").reset_index(drop=True)


def history_series(hist: "pd.DataFrame", heads: list[SuiteHeadline], flagged: set[tuple[str, str, str]],
                   limit: int = 12) -> list[tuple[str, str, str]]:
    """Which series to plot: those with change points first, then the headline metrics."""
    present = set(hist[["suite", "case", "metric"]].itertuples(index=False, name=None)) if len(hist) else set()
    order = [k for k in sorted(flagged) if k in present]
    order += [k for h in heads for k in ((r.suite, r.case, r.metric) for r in h.rows) if k in present and k not in order]
    return order[:limit]


def no_history_figure(history: Any) -> str:
    """Why the report has no history figure, from what :func:`benchrun.report.html.render_figures` found: "" when it
    did not record it (an older index, figures not drawn), as the history is then unknown."""
    if not isinstance(history, dict):
        return ""
    earlier = int(history.get("earlier_runs") or 0)
    if not earlier:
        return "this is the first finished run of this workload on this hardware."
    if not history.get("this_run"):
        runs = f"{earlier} earlier finished run" + ("s" if earlier != 1 else "")
        return (f"no figure: this run recorded no metrics to place on it ({runs} of this workload on this "
                "hardware).")
    return ""


# --- serving ---------------------------------------------------------------------------------

def mark_invalid_points(run_path: Any, serving: Any) -> tuple[Any, dict[tuple[str, str], tuple[set, list[str]]]]:
    """``serving`` with an ``invalid`` column: its load point judged invalid by the load generator
    beyond its request count (:func:`benchrun.stats.validity.invalid_point_rows`, the history's and
    the comparison's rule), and (suite, point) → (replicates, reasons) of those points."""
    from benchrun.stats.load import suite_results
    from benchrun.stats.validity import invalid_point_rows

    points = invalid_point_rows(suite_results(run_path)) if "point" in serving.columns else {}
    serving = serving.assign(invalid=[(str(s), int(r), str(p)) in points for s, r, p in zip(
        serving["suite"], serving["replicate"], serving["point"] if "point" in serving.columns else serving["suite"])])
    said: dict[tuple[str, str], tuple[set, list[str]]] = {}
    for (suite, k, point), reasons in points.items():
        ks, why = said.setdefault((suite, point), (set(), []))
        ks.add(k)
        why.extend(str(x) for x in reasons if str(x) not in why)
    return serving, said
